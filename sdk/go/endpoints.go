package hookd

import (
	"context"
	"iter"

	"github.com/hookd/hookd/sdk/go/api"
)

// The endpoint types.
type (
	// Endpoint is a registered webhook endpoint.
	Endpoint = api.Endpoint
	// EnabledEndpoint is an endpoint just enabled, with Releasing, the
	// held deliveries the dispatchers release in the background.
	EnabledEndpoint = api.EnabledEndpoint
	// CreateEndpointRequest registers an endpoint.
	CreateEndpointRequest = api.CreateEndpointRequest
	// UpdateEndpointRequest changes the fields it sets.
	UpdateEndpointRequest = api.UpdateEndpointRequest
	// EndpointFilter narrows Endpoints.All; its After is set by the
	// iterator.
	EndpointFilter = api.ListEndpointsParams
	// EndpointSecret is what verifies an endpoint's signatures.
	EndpointSecret = api.EndpointSecret
	// Attempt is one delivery attempt.
	Attempt = api.Attempt
	// EndpointAttemptFilter narrows Endpoints.Attempts.
	EndpointAttemptFilter = api.ListEndpointAttemptsParams
	// RecoverRequest names the failed deliveries Endpoints.Recover
	// queues again.
	RecoverRequest = api.RecoverRequest
	// Recovery is what Endpoints.Recover queued.
	Recovery = api.Recovery
	// Signing is how an endpoint's deliveries are signed.
	Signing = api.Signing
)

// The signing schemes: Standard Webhooks "v1," HMAC-SHA256 signatures with
// a whsec_ secret (the default), or "v1a," Ed25519 signatures whose whpk_
// public key Endpoints.Secret reads.
const (
	SigningHMAC    = api.Hmac
	SigningEd25519 = api.Ed25519
)

// EndpointsService registers and manages webhook endpoints.
type EndpointsService struct{ c *Client }

// Create registers an endpoint.
func (s *EndpointsService) Create(ctx context.Context, req CreateEndpointRequest) (*Endpoint, error) {
	r, err := s.c.raw.CreateEndpointWithResponse(ctx, req)
	if err != nil {
		return nil, err
	}
	return result(r.JSON201, r.HTTPResponse, r.Body)
}

// Get reads an endpoint.
func (s *EndpointsService) Get(ctx context.Context, id string) (*Endpoint, error) {
	r, err := s.c.raw.GetEndpointWithResponse(ctx, id)
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// Update changes the fields req sets.
func (s *EndpointsService) Update(ctx context.Context, id string, req UpdateEndpointRequest) (*Endpoint, error) {
	r, err := s.c.raw.UpdateEndpointWithResponse(ctx, id, req)
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// Delete deletes an endpoint.
func (s *EndpointsService) Delete(ctx context.Context, id string) error {
	r, err := s.c.raw.DeleteEndpointWithResponse(ctx, id)
	if err != nil {
		return err
	}
	return noContent(r.HTTPResponse, r.Body)
}

// Disable stops deliveries to an endpoint; they are held until Enable.
func (s *EndpointsService) Disable(ctx context.Context, id string) (*Endpoint, error) {
	r, err := s.c.raw.DisableEndpointWithResponse(ctx, id)
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// Enable resumes deliveries to a disabled endpoint; its held deliveries
// are released in the background (Releasing counts them).
func (s *EndpointsService) Enable(ctx context.Context, id string) (*EnabledEndpoint, error) {
	r, err := s.c.raw.EnableEndpointWithResponse(ctx, id)
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// Secret reads what verifies the endpoint's signatures: its whsec_ secret,
// or the whpk_ public key of an ed25519 endpoint.
func (s *EndpointsService) Secret(ctx context.Context, id string) (*EndpointSecret, error) {
	r, err := s.c.raw.GetEndpointSecretWithResponse(ctx, id)
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// RotateSecret replaces the endpoint's secret (or key pair); the previous
// one keeps signing alongside it for 24 hours.
func (s *EndpointsService) RotateSecret(ctx context.Context, id string) (*Endpoint, error) {
	r, err := s.c.raw.RotateEndpointSecretWithResponse(ctx, id)
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// Recover gives the endpoint's failed deliveries created in req's range a
// new series of attempts, released at a pace once the endpoint answers.
func (s *EndpointsService) Recover(ctx context.Context, id string, req RecoverRequest) (*Recovery, error) {
	r, err := s.c.raw.RecoverEndpointWithResponse(ctx, id, req)
	if err != nil {
		return nil, err
	}
	return result(r.JSON202, r.HTTPResponse, r.Body)
}

// All iterates over the endpoints filter selects, page by page (filter may
// be nil).
func (s *EndpointsService) All(ctx context.Context, filter *EndpointFilter) iter.Seq2[Endpoint, error] {
	params := copyOf(filter)
	return pages(ctx, func(ctx context.Context, after *string) (page[Endpoint], error) {
		params.After = after
		r, err := s.c.raw.ListEndpointsWithResponse(ctx, &params)
		if err != nil {
			return page[Endpoint]{}, err
		}
		list, err := result(r.JSON200, r.HTTPResponse, r.Body)
		if err != nil {
			return page[Endpoint]{}, err
		}
		return page[Endpoint]{items: list.Data, next: list.NextCursor}, nil
	})
}

// Attempts iterates over the endpoint's delivery attempts, newest first.
func (s *EndpointsService) Attempts(ctx context.Context, id string, filter *EndpointAttemptFilter) iter.Seq2[Attempt, error] {
	params := copyOf(filter)
	return pages(ctx, func(ctx context.Context, after *string) (page[Attempt], error) {
		params.After = after
		r, err := s.c.raw.ListEndpointAttemptsWithResponse(ctx, id, &params)
		if err != nil {
			return page[Attempt]{}, err
		}
		list, err := result(r.JSON200, r.HTTPResponse, r.Body)
		if err != nil {
			return page[Attempt]{}, err
		}
		return page[Attempt]{items: list.Data, next: list.NextCursor}, nil
	})
}

// copyOf returns a copy of *p, or the zero value when p is nil: an
// iterator's filter, whose After it sets without touching the caller's.
func copyOf[T any](p *T) T {
	var v T
	if p != nil {
		v = *p
	}
	return v
}
