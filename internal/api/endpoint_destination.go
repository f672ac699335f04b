package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/destination"
	"github.com/hookd/hookd/internal/store"
)

// An endpoint's type says what it delivers to: "http" (the default) to
// its url, any other type to the broker, queue or stream its destination
// object describes (internal/destination). The destination's credentials
// are write-only: stored sealed, never shown; a read shows the object
// without them.

// present reports whether a raw JSON member was given and is not null.
func present(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && !bytes.Equal(t, []byte("null"))
}

// endpointType is the type of a request, "" meaning http.
func endpointType(t string) destination.Type {
	if t == "" {
		return destination.HTTP
	}
	return destination.Type(t)
}

// addDestinationError adds the destination package's validation error to
// fe under the field it names.
func addDestinationError(fe *fieldErrors, err error) {
	var de *destination.FieldError
	if errors.As(err, &de) {
		fe.add(de.Field, de.Reason)
		return
	}
	fe.add("destination", err.Error())
}

// validateEndpointTarget checks what an endpoint of type t delivers to:
// url for http, which then has no destination object; the destination
// object for any other type (parsed when parse is set: an update's is
// parsed with the stored credentials), which then has no url.
func validateEndpointTarget(fe *fieldErrors, t destination.Type, url *string, raw json.RawMessage, parse bool) {
	if t == destination.HTTP {
		if url != nil {
			validateEndpointURL(fe, "url", *url)
		}
		if present(raw) {
			fe.add("destination", "must be left out for type http: its target is url")
		}
		return
	}
	if !t.Valid() {
		_, err := destination.Parse(t, raw)
		addDestinationError(fe, err)
		return
	}
	if url != nil && *url != "" {
		fe.add("url", fmt.Sprintf("must be left out for type %s: its target is destination", t))
	}
	if parse {
		if _, err := destination.Parse(t, raw); err != nil {
			addDestinationError(fe, err)
		}
	}
}

// parseDestination parses the destination object raw of type t. stored
// are the credentials the endpoint has (nil on create): a credential the
// object leaves out keeps its stored value, so an update need not repeat
// what a read never shows.
func parseDestination(t destination.Type, raw json.RawMessage, stored map[string]string) (destination.Config, error) {
	if len(stored) > 0 && present(raw) {
		var members map[string]json.RawMessage
		if err := json.Unmarshal(raw, &members); err == nil {
			for name, v := range stored {
				if _, ok := members[name]; !ok {
					b, _ := json.Marshal(v)
					members[name] = b
				}
			}
			if merged, err := json.Marshal(members); err == nil {
				raw = merged
			}
		}
	}
	c, err := destination.Parse(t, raw)
	if err != nil {
		var fe fieldErrors
		addDestinationError(&fe, err)
		return nil, fe.err()
	}
	return c, nil
}

// checkDestinationTargets applies the SSRF guard to every host of c at
// registration, as checkTarget does to a URL: a refused host is a 400
// naming its field (destination.brokers[1]).
func checkDestinationTargets(ctx context.Context, d Deps, c destination.Config) error {
	if d.AllowPrivateTargets {
		return nil
	}
	err := destination.CheckTargets(ctx, c, func(ctx context.Context, host string) error {
		var be *delivery.BlockedError
		if err := delivery.CheckHost(ctx, d.Resolver, host); errors.As(err, &be) {
			return errors.New(be.Explain())
		}
		return nil
	})
	if err != nil {
		var fe fieldErrors
		addDestinationError(&fe, err)
		return fe.err()
	}
	return nil
}

// storedDestination is c as the store keeps it: its config without
// credentials, and the credentials apart.
func storedDestination(c destination.Config) (store.EndpointDestination, error) {
	if c == nil {
		return store.EndpointDestination{Type: store.TypeHTTP}, nil
	}
	b, err := json.Marshal(c.Redacted())
	if err != nil {
		return store.EndpointDestination{}, fmt.Errorf("destination: %w", err)
	}
	creds := c.Credentials()
	if len(creds) == 0 {
		creds = nil
	}
	return store.EndpointDestination{Type: string(c.Type()), Config: b, Credentials: creds}, nil
}

// destinationResponse is the destination object a read shows: the
// stored config, which holds no credentials; null for http.
func destinationResponse(e store.Endpoint) json.RawMessage {
	if !present(e.Destination) {
		return json.RawMessage("null")
	}
	return e.Destination
}

// endpointTypeOf is the type of a stored endpoint.
func endpointTypeOf(e store.Endpoint) string {
	if e.Type == "" {
		return store.TypeHTTP
	}
	return e.Type
}

// A destination's message carries the Standard Webhooks names and the
// event type as its headers or attributes (docs/destinations.md); an
// endpoint's own headers go with HTTP requests only. A destination
// endpoint refuses them rather than keep headers it would never send.
func headersOnDestination(t destination.Type) string {
	return fmt.Sprintf("must be left out for type %s: an endpoint's headers are sent with HTTP requests only", t)
}

// checkUpdatedHeaders refuses an update that would leave a non-HTTP
// endpoint holding headers: headers given for one, or a change of type to
// one while the endpoint's headers are kept (clearing them, "headers":
// {}, in the same update is accepted).
func checkUpdatedHeaders(r *http.Request, d Deps, req updateEndpointRequest) error {
	clears := req.Headers != nil && len(*req.Headers) == 0
	toHTTP := req.Type != nil && endpointType(*req.Type) == destination.HTTP
	if clears || toHTTP || (req.Headers == nil && req.Type == nil) {
		return nil
	}
	current, err := d.Store.GetEndpoint(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		return err
	}
	t := destination.Type(endpointTypeOf(current))
	if req.Type != nil {
		t = endpointType(*req.Type)
	}
	switch {
	case t == destination.HTTP:
		return nil
	case req.Headers != nil:
		return invalid("headers", headersOnDestination(t))
	case len(current.Headers) > 0:
		return invalid("headers", fmt.Sprintf(`must be cleared ("headers": {}) to change to type %s: an endpoint's headers are sent with HTTP requests only`, t))
	}
	return nil
}

// updatedTarget checks an update's url, type and destination against the
// endpoint as stored and returns the destination to store (nil to keep
// it): a url only for an http endpoint, a destination object for any
// other type (required when the type changes), parsed with the stored
// credentials of the same type.
func updatedTarget(r *http.Request, d Deps, req updateEndpointRequest) (*store.EndpointDestination, error) {
	current, err := d.Store.GetEndpoint(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		return nil, err
	}
	was := destination.Type(endpointTypeOf(current))
	t := was
	if req.Type != nil {
		t = endpointType(*req.Type)
	}
	if t == destination.HTTP {
		if present(req.Destination) {
			return nil, invalid("destination", "must be left out for type http: its target is url")
		}
		if req.URL != nil {
			if err := checkTarget(r.Context(), d, *req.URL); err != nil {
				return nil, err
			}
		} else if was != destination.HTTP {
			return nil, invalid("url", "is required for type http")
		}
		if was == destination.HTTP {
			return nil, nil
		}
		return &store.EndpointDestination{Type: store.TypeHTTP}, nil
	}
	if req.URL != nil && *req.URL != "" {
		return nil, invalid("url", fmt.Sprintf("must be left out for type %s: its target is destination", t))
	}
	if !present(req.Destination) {
		if t != was {
			return nil, invalid("destination", fmt.Sprintf("required for type %s", t))
		}
		return nil, nil
	}
	var stored map[string]string
	if t == was {
		stored = current.DestinationCredentials
	}
	c, err := parseDestination(t, req.Destination, stored)
	if err != nil {
		return nil, err
	}
	if err := checkDestinationTargets(r.Context(), d, c); err != nil {
		return nil, err
	}
	target, err := storedDestination(c)
	if err != nil {
		return nil, err
	}
	return &target, nil
}
