package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/destination"
	"github.com/hookd/hookd/internal/store"
)

// endpointIDPattern is the shape of an endpoint id (store.NewID): "ep_" and
// a ULID.
var endpointIDPattern = regexp.MustCompile(`^ep_[0-7][0-9A-HJKMNP-TV-Z]{25}$`)

// secretOverlap is how long a rotated-out secret keeps signing.
const secretOverlap = 24 * time.Hour

// endpointResponse is an endpoint as the API shows it: never its secret.
type endpointResponse struct {
	ID           string            `json:"id"`
	TenantID     string            `json:"tenant_id"`
	URL          string            `json:"url"`
	Description  string            `json:"description"`
	EventTypes   []string          `json:"event_types"`
	TrafficClass string            `json:"traffic_class"`
	Metadata     map[string]string `json:"metadata"`
	// HeaderNames are the names of the endpoint's headers; their values
	// are write-only, like a secret.
	HeaderNames    []string `json:"header_names"`
	Signing        string   `json:"signing"`
	Status         string   `json:"status"`
	DisabledReason *string  `json:"disabled_reason"`
	RateLimit      *int     `json:"rate_limit"`
	// Type is what the endpoint delivers to; Destination is a non-HTTP
	// type's config without its credentials (null for http).
	Type        string          `json:"type"`
	Destination json.RawMessage `json:"destination"`
	endpointOptionsResponse
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func toEndpoint(e store.Endpoint) endpointResponse {
	return endpointResponse{
		ID: e.ID, TenantID: e.TenantID, URL: e.URL, Description: e.Description,
		EventTypes: e.EventTypes, TrafficClass: e.TrafficClass, Metadata: e.Metadata,
		HeaderNames: append([]string{}, slices.Sorted(maps.Keys(e.Headers))...), Signing: e.Signing,
		Status: e.Status, DisabledReason: e.DisabledReason, RateLimit: e.RateLimit,
		Type: endpointTypeOf(e), Destination: destinationResponse(e),
		endpointOptionsResponse: toEndpointOptions(e), CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt,
	}
}

// listResponse is one page of a list; NextCursor goes into the next request's
// after parameter.
type listResponse[T any] struct {
	Data       []T     `json:"data"`
	NextCursor *string `json:"next_cursor"`
}

type createEndpointRequest struct {
	TenantID     string            `json:"tenant_id"`
	URL          string            `json:"url"`
	Description  string            `json:"description"`
	EventTypes   []string          `json:"event_types"`
	Secret       string            `json:"secret"`
	TrafficClass string            `json:"traffic_class"`
	Metadata     map[string]string `json:"metadata"`
	Headers      map[string]string `json:"headers"`
	Signing      string            `json:"signing"`
	RateLimit    nullableInt       `json:"rate_limit,omitzero"`
	// Type is "http" (omitted) or a destination type; Destination is
	// its config, credentials included.
	Type        string          `json:"type"`
	Destination json.RawMessage `json:"destination,omitempty"`
	endpointOptions
}

func (r createEndpointRequest) validate() error {
	var fe fieldErrors
	validateTenantID(&fe, "tenant_id", r.TenantID)
	validateEndpointTarget(&fe, endpointType(r.Type), &r.URL, r.Destination, true)
	validateDescription(&fe, "description", r.Description)
	validateEventFilters(&fe, "event_types", r.EventTypes)
	switch r.Signing {
	case "", store.SigningHMAC:
		if r.Secret != "" {
			if _, err := delivery.ParseSecret(r.Secret); err != nil {
				fe.add("secret", err.Error())
			}
		}
	case store.SigningEd25519:
		if r.Secret != "" {
			fe.add("secret", "must be left out with ed25519 signing: hookd generates the key pair and keeps the private key")
		}
	default:
		fe.add("signing", `must be "hmac" or "ed25519"`)
	}
	if r.TrafficClass != "" {
		validateTrafficClass(&fe, "traffic_class", r.TrafficClass)
	}
	validateMetadata(&fe, "metadata", r.Metadata)
	validateEndpointHeaders(&fe, "headers", r.Headers)
	if t := endpointType(r.Type); t != destination.HTTP && len(r.Headers) > 0 {
		fe.add("headers", headersOnDestination(t))
	}
	validateRateLimit(&fe, "rate_limit", r.RateLimit)
	r.endpointOptions.validate(&fe)
	return fe.err()
}

func handleCreateEndpoint(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := decode[createEndpointRequest](r, maxRequestBytes)
		if err == nil {
			err = allowTenant(r, "tenant_id", req.TenantID)
		}
		if err == nil && req.TrafficClass != "" {
			err = allowTrafficClass(r, d, "traffic_class", req.TrafficClass, true)
		}
		var dest destination.Config
		if t := endpointType(req.Type); err == nil && t != destination.HTTP {
			if dest, err = parseDestination(t, req.Destination, nil); err == nil {
				err = checkDestinationTargets(r.Context(), d, dest)
			}
		} else if err == nil {
			err = checkTarget(r.Context(), d, req.URL)
		}
		if err == nil {
			err = checkScheduleWithinRetention(d, req.RetrySchedule)
		}
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		target, err := storedDestination(dest)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		signing := req.Signing
		if signing == "" {
			signing = store.SigningHMAC
		}
		secret := req.Secret
		if secret == "" {
			if secret, err = generateSigningKey(d, signing); err != nil {
				writeProblem(w, r, d.Logger, err)
				return
			}
		}
		ep := store.Endpoint{
			TenantID: req.TenantID, URL: req.URL, Description: req.Description, EventTypes: req.EventTypes,
			Secret: secret, TrafficClass: req.TrafficClass, Metadata: req.Metadata, Headers: req.Headers, Signing: signing, RateLimit: req.RateLimit.value(),
			Type: target.Type, Destination: target.Config, DestinationCredentials: target.Credentials,
		}
		req.endpointOptions.apply(&ep)
		e, err := d.Store.CreateEndpoint(r.Context(), ep)
		if errors.Is(err, store.ErrUnknownClass) {
			err = invalid("traffic_class", `names no traffic class; use "auto" or one of GET /v1/traffic-classes`)
		}
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		w.Header().Set("Location", "/v1/endpoints/"+e.ID)
		encode(w, http.StatusCreated, toEndpoint(e))
	})
}

func handleListEndpoints(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		var fe fieldErrors
		tenant := q.Get("tenant_id")
		if tenant != "" {
			validateTenantID(&fe, "tenant_id", tenant)
		}
		page := parsePageAfter(&fe, q, endpointIDPattern)
		if err := fe.err(); err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		list, err := d.Store.ListEndpoints(r.Context(), requestTenants(r), store.Page{After: page.After, Limit: page.Limit + 1})
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, pageOf(list, page.Limit, func(e store.Endpoint) string { return e.ID },
			toEndpoint))
	})
}

func handleGetEndpoint(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e, err := d.Store.GetEndpoint(r.Context(), chi.URLParam(r, "id"))
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, toEndpoint(e))
	})
}

type updateEndpointRequest struct {
	URL          *string            `json:"url"`
	Description  *string            `json:"description"`
	EventTypes   *[]string          `json:"event_types"`
	TrafficClass *string            `json:"traffic_class"`
	Metadata     *map[string]string `json:"metadata"`
	Headers      *map[string]string `json:"headers"`
	RateLimit    nullableInt        `json:"rate_limit,omitzero"`
	// Type and Destination change what the endpoint delivers to; a
	// credential the destination leaves out keeps its stored value.
	Type        *string         `json:"type"`
	Destination json.RawMessage `json:"destination,omitempty"`
	endpointOptions
}

func (r updateEndpointRequest) validate() error {
	var fe fieldErrors
	switch {
	case r.Type != nil:
		validateEndpointTarget(&fe, endpointType(*r.Type), r.URL, r.Destination, false)
	case r.URL != nil:
		validateEndpointURL(&fe, "url", *r.URL)
	}
	if r.Description != nil {
		validateDescription(&fe, "description", *r.Description)
	}
	if r.EventTypes != nil {
		validateEventFilters(&fe, "event_types", *r.EventTypes)
	}
	if r.TrafficClass != nil {
		validateTrafficClass(&fe, "traffic_class", *r.TrafficClass)
	}
	if r.Metadata != nil {
		validateMetadata(&fe, "metadata", *r.Metadata)
	}
	if r.Headers != nil {
		validateEndpointHeaders(&fe, "headers", *r.Headers)
	}
	validateRateLimit(&fe, "rate_limit", r.RateLimit)
	r.endpointOptions.validate(&fe)
	return fe.err()
}

func handleUpdateEndpoint(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := decode[updateEndpointRequest](r, maxRequestBytes)
		if err == nil && req.TrafficClass != nil {
			err = allowTrafficClass(r, d, "traffic_class", *req.TrafficClass, false)
		}
		var target *store.EndpointDestination
		if err == nil && (req.Type != nil || req.URL != nil || present(req.Destination)) {
			target, err = updatedTarget(r, d, req)
		}
		if err == nil {
			err = checkUpdatedHeaders(r, d, req)
		}
		if err == nil {
			err = checkScheduleWithinRetention(d, req.RetrySchedule)
		}
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		p := store.EndpointPatch{
			URL: req.URL, Description: req.Description, EventTypes: req.EventTypes,
			TrafficClass: req.TrafficClass, Metadata: req.Metadata, Headers: req.Headers, RateLimit: req.RateLimit.patch(),
			Destination: target,
		}
		if target != nil && target.Type != store.TypeHTTP {
			noURL := ""
			p.URL = &noURL
		}
		req.endpointOptions.patch(&p)
		e, err := d.Store.UpdateEndpoint(r.Context(), chi.URLParam(r, "id"), p)
		if errors.Is(err, store.ErrUnknownClass) {
			err = invalid("traffic_class", `names no traffic class; use "auto" or one of GET /v1/traffic-classes`)
		}
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, toEndpoint(e))
	})
}

func handleDeleteEndpoint(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := d.Store.DeleteEndpoint(r.Context(), chi.URLParam(r, "id")); err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// enabledEndpointResponse is an enabled endpoint and how many held
// deliveries the dispatchers release, in the background, oldest first at a
// pace.
type enabledEndpointResponse struct {
	endpointResponse
	Releasing int `json:"releasing"`
}

func handleSetEndpointStatus(d Deps, enable bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if enable {
			// The held deliveries are released by the dispatchers, not
			// by this request: it answers with how many there are.
			e, held, err := d.Store.EnableEndpoint(r.Context(), chi.URLParam(r, "id"), actorOf(r))
			if err != nil {
				writeProblem(w, r, d.Logger, err)
				return
			}
			encode(w, http.StatusOK, enabledEndpointResponse{endpointResponse: toEndpoint(e), Releasing: held})
			return
		}
		reason := "manual"
		e, err := d.Store.SetEndpointStatus(r.Context(), chi.URLParam(r, "id"), store.EndpointDisabled, &reason)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, toEndpoint(e))
	})
}

// secretResponse is what verifies an endpoint's signatures: its HMAC
// secret, or the public key of its Ed25519 private key (which never
// leaves the service).
type secretResponse struct {
	Signing                 string     `json:"signing"`
	Secret                  string     `json:"secret"`
	PreviousSecret          *string    `json:"previous_secret"`
	PreviousSecretExpiresAt *time.Time `json:"previous_secret_expires_at"`
}

func handleGetEndpointSecret(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e, err := d.Store.GetEndpoint(r.Context(), chi.URLParam(r, "id"))
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		current, err := verificationKey(e.Signing, e.Secret)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		out := secretResponse{Signing: e.Signing, Secret: current}
		if e.PreviousSecret != "" && e.PreviousSecretExpiresAt != nil && d.Now().Before(*e.PreviousSecretExpiresAt) {
			previous, err := verificationKey(e.Signing, e.PreviousSecret)
			if err != nil {
				writeProblem(w, r, d.Logger, err)
				return
			}
			out.PreviousSecret, out.PreviousSecretExpiresAt = &previous, e.PreviousSecretExpiresAt
		}
		w.Header().Set("Cache-Control", "no-store")
		encode(w, http.StatusOK, out)
	})
}

func handleRotateSecret(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The new key is of the endpoint's scheme.
		e, err := d.Store.GetEndpoint(r.Context(), chi.URLParam(r, "id"))
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		secret, err := generateSigningKey(d, e.Signing)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		e, err = d.Store.RotateSecret(r.Context(), e.ID, secret, secretOverlap)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, toEndpoint(e))
	})
}

// generateSigningKey returns a new serialized signing key of the scheme: a
// whsec_ secret, or a whsk_ private key.
func generateSigningKey(d Deps, signing string) (string, error) {
	if signing == store.SigningEd25519 {
		return delivery.GeneratePrivateKey(d.Rand)
	}
	return delivery.GenerateSecret(d.Rand)
}

// verificationKey returns what a receiver verifies with: the secret itself,
// or the whpk_ public key of an Ed25519 private key.
func verificationKey(signing, stored string) (string, error) {
	if signing != store.SigningEd25519 {
		return stored, nil
	}
	pub, err := delivery.PublicKeyOf(stored)
	if err != nil {
		return "", fmt.Errorf("endpoint key: %w", err)
	}
	return pub, nil
}

// pageOf renders a page of list, fetched with one row beyond limit: when
// that row is there, the cursor of the page's last row starts the next.
func pageOf[T, R any](list []T, limit int, cursor func(T) string, render func(T) R) listResponse[R] {
	out := listResponse[R]{Data: make([]R, 0, min(len(list), limit))}
	for i, v := range list {
		if i == limit {
			c := cursor(list[i-1])
			out.NextCursor = &c
			break
		}
		out.Data = append(out.Data, render(v))
	}
	return out
}
