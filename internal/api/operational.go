package api

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
)

// operationalEndpointResponse is an operational endpoint as the API shows
// it: never its secret (GET .../secret shows that).
type operationalEndpointResponse struct {
	ID             string    `json:"id"`
	URL            string    `json:"url"`
	Description    string    `json:"description"`
	EventTypes     []string  `json:"event_types"`
	Status         string    `json:"status"`
	DisabledReason *string   `json:"disabled_reason"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

func toOperationalEndpoint(e store.Endpoint) operationalEndpointResponse {
	types := e.EventTypes
	if types == nil {
		types = []string{}
	}
	return operationalEndpointResponse{
		ID: e.ID, URL: e.URL, Description: e.Description, EventTypes: types,
		Status: e.Status, DisabledReason: e.DisabledReason, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt,
	}
}

// validateOperationalFilters checks an operational endpoint's event_types:
// each an operational event type or a wildcard over some.
func validateOperationalFilters(fe *fieldErrors, field string, vs []string) {
	if len(vs) > maxEventTypes {
		fe.add(field, fmt.Sprintf("must hold at most %d event types", maxEventTypes))
		return
	}
	for i, v := range vs {
		if !store.ValidOperationalFilter(v) {
			fe.add(fmt.Sprintf("%s[%d]", field, i), "must be one of the operational event types ("+
				strings.Join(store.OperationalEventTypes, ", ")+`) or a wildcard (endpoint.*, breaker.*, delivery.*, traffic_class.*, "*")`)
		}
	}
}

type createOperationalEndpointRequest struct {
	URL         string   `json:"url"`
	Description string   `json:"description"`
	EventTypes  []string `json:"event_types"`
	Secret      string   `json:"secret"`
}

func (r createOperationalEndpointRequest) validate() error {
	var fe fieldErrors
	validateEndpointURL(&fe, "url", r.URL)
	validateDescription(&fe, "description", r.Description)
	validateOperationalFilters(&fe, "event_types", r.EventTypes)
	if r.Secret != "" {
		if _, err := delivery.ParseSecret(r.Secret); err != nil {
			fe.add("secret", err.Error())
		}
	}
	return fe.err()
}

// Operational endpoints are the operator's own services (often internal
// ones), so their URLs are not held to the SSRF guard's rules.
func handleCreateOperationalEndpoint(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := decode[createOperationalEndpointRequest](r, maxRequestBytes)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		secret := req.Secret
		if secret == "" {
			if secret, err = delivery.GenerateSecret(d.Rand); err != nil {
				writeProblem(w, r, d.Logger, err)
				return
			}
		}
		e, err := d.Store.CreateOperationalEndpoint(r.Context(), store.NewOperationalEndpoint{
			URL: req.URL, Description: req.Description, EventTypes: req.EventTypes, Secret: secret,
		})
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		w.Header().Set("Location", "/v1/operational-endpoints/"+e.ID)
		encode(w, http.StatusCreated, toOperationalEndpoint(e))
	})
}

func handleListOperationalEndpoints(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var fe fieldErrors
		page := parsePageAfter(&fe, r.URL.Query(), endpointIDPattern)
		if err := fe.err(); err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		list, err := d.Store.ListOperationalEndpoints(r.Context(), store.Page{After: page.After, Limit: page.Limit + 1})
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, pageOf(list, page.Limit, func(e store.Endpoint) string { return e.ID },
			toOperationalEndpoint))
	})
}

func handleGetOperationalEndpoint(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e, err := d.Store.GetOperationalEndpoint(r.Context(), chi.URLParam(r, "id"))
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, toOperationalEndpoint(e))
	})
}

type updateOperationalEndpointRequest struct {
	URL         *string   `json:"url"`
	Description *string   `json:"description"`
	EventTypes  *[]string `json:"event_types"`
}

func (r updateOperationalEndpointRequest) validate() error {
	var fe fieldErrors
	if r.URL != nil {
		validateEndpointURL(&fe, "url", *r.URL)
	}
	if r.Description != nil {
		validateDescription(&fe, "description", *r.Description)
	}
	if r.EventTypes != nil {
		validateOperationalFilters(&fe, "event_types", *r.EventTypes)
	}
	return fe.err()
}

func handleUpdateOperationalEndpoint(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := decode[updateOperationalEndpointRequest](r, maxRequestBytes)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		e, err := d.Store.UpdateOperationalEndpoint(r.Context(), chi.URLParam(r, "id"), store.OperationalPatch{
			URL: req.URL, Description: req.Description, EventTypes: req.EventTypes,
		})
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, toOperationalEndpoint(e))
	})
}

func handleDeleteOperationalEndpoint(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := d.Store.DeleteOperationalEndpoint(r.Context(), chi.URLParam(r, "id")); err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

func handleGetOperationalSecret(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e, err := d.Store.GetOperationalEndpoint(r.Context(), chi.URLParam(r, "id"))
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		out := secretResponse{Signing: e.Signing, Secret: e.Secret}
		if e.PreviousSecret != "" && e.PreviousSecretExpiresAt != nil && d.Now().Before(*e.PreviousSecretExpiresAt) {
			out.PreviousSecret, out.PreviousSecretExpiresAt = &e.PreviousSecret, e.PreviousSecretExpiresAt
		}
		w.Header().Set("Cache-Control", "no-store")
		encode(w, http.StatusOK, out)
	})
}
