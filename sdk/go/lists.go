package hookd

import (
	"context"
	"iter"

	"github.com/hookd/hookd/sdk/go/api"
)

// The types of the other paged lists.
type (
	// Breaker is an endpoint's circuit breaker.
	Breaker = api.Breaker
	// BreakerFilter narrows Breakers.All.
	BreakerFilter = api.ListBreakersParams
	// EventType is an entry of the event type catalogue.
	EventType = api.EventTypeEntry
	// EventTypeFilter narrows EventTypes.All.
	EventTypeFilter = api.ListEventTypesParams
	// Token is a stored API token, without its secret.
	Token = api.Token
	// TokenFilter narrows Tokens.All.
	TokenFilter = api.ListTokensParams
	// CreateTokenRequest creates a token.
	CreateTokenRequest = api.CreateTokenRequest
	// CreatedToken is a new token with its secret, shown once.
	CreatedToken = api.CreatedToken
	// OperationalEndpoint receives hookd's operational events.
	OperationalEndpoint = api.OperationalEndpoint
	// OperationalEndpointFilter narrows OperationalEndpoints.All.
	OperationalEndpointFilter = api.ListOperationalEndpointsParams
)

// BreakersService reads and operates the endpoints' circuit breakers.
type BreakersService struct{ c *Client }

// Get reads the breaker of an endpoint, with its recent transitions.
func (s *BreakersService) Get(ctx context.Context, endpointID string) (*Breaker, error) {
	r, err := s.c.raw.GetBreakerWithResponse(ctx, endpointID)
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// Reset closes an endpoint's breaker (an isolated one too), so its
// deliveries flow again (admin tokens only); reason is recorded with the
// transition and may be empty.
func (s *BreakersService) Reset(ctx context.Context, endpointID, reason string) (*Breaker, error) {
	r, err := s.c.raw.ResetBreakerWithResponse(ctx, endpointID, operateRequest(reason))
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// Isolate holds an endpoint's breaker open until a Reset (admin tokens
// only).
func (s *BreakersService) Isolate(ctx context.Context, endpointID, reason string) (*Breaker, error) {
	r, err := s.c.raw.IsolateBreakerWithResponse(ctx, endpointID, operateRequest(reason))
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

func operateRequest(reason string) api.OperateBreakerRequest {
	if reason == "" {
		return api.OperateBreakerRequest{}
	}
	return api.OperateBreakerRequest{Reason: &reason}
}

// All iterates over the breakers filter selects (filter may be nil).
func (s *BreakersService) All(ctx context.Context, filter *BreakerFilter) iter.Seq2[Breaker, error] {
	params := copyOf(filter)
	return pages(ctx, func(ctx context.Context, after *string) (page[Breaker], error) {
		params.After = after
		r, err := s.c.raw.ListBreakersWithResponse(ctx, &params)
		if err != nil {
			return page[Breaker]{}, err
		}
		list, err := result(r.JSON200, r.HTTPResponse, r.Body)
		if err != nil {
			return page[Breaker]{}, err
		}
		return page[Breaker]{items: list.Data, next: list.NextCursor}, nil
	})
}

// EventTypesService reads the event type catalogue.
type EventTypesService struct{ c *Client }

// Get reads one event type.
func (s *EventTypesService) Get(ctx context.Context, name string) (*EventType, error) {
	r, err := s.c.raw.GetEventTypeWithResponse(ctx, name)
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// All iterates over the catalogue in name order (filter may be nil).
func (s *EventTypesService) All(ctx context.Context, filter *EventTypeFilter) iter.Seq2[EventType, error] {
	params := copyOf(filter)
	return pages(ctx, func(ctx context.Context, after *string) (page[EventType], error) {
		params.After = after
		r, err := s.c.raw.ListEventTypesWithResponse(ctx, &params)
		if err != nil {
			return page[EventType]{}, err
		}
		list, err := result(r.JSON200, r.HTTPResponse, r.Body)
		if err != nil {
			return page[EventType]{}, err
		}
		return page[EventType]{items: list.Data, next: list.NextCursor}, nil
	})
}

// TokensService lists, creates and revokes API tokens.
type TokensService struct{ c *Client }

// Create stores a new token; its secret is in the answer only.
func (s *TokensService) Create(ctx context.Context, req CreateTokenRequest) (*CreatedToken, error) {
	r, err := s.c.raw.CreateTokenWithResponse(ctx, req)
	if err != nil {
		return nil, err
	}
	return result(r.JSON201, r.HTTPResponse, r.Body)
}

// Revoke revokes a token.
func (s *TokensService) Revoke(ctx context.Context, id string) error {
	r, err := s.c.raw.RevokeTokenWithResponse(ctx, id)
	if err != nil {
		return err
	}
	return noContent(r.HTTPResponse, r.Body)
}

// All iterates over the stored tokens (filter may be nil).
func (s *TokensService) All(ctx context.Context, filter *TokenFilter) iter.Seq2[Token, error] {
	params := copyOf(filter)
	return pages(ctx, func(ctx context.Context, after *string) (page[Token], error) {
		params.After = after
		r, err := s.c.raw.ListTokensWithResponse(ctx, &params)
		if err != nil {
			return page[Token]{}, err
		}
		list, err := result(r.JSON200, r.HTTPResponse, r.Body)
		if err != nil {
			return page[Token]{}, err
		}
		return page[Token]{items: list.Data, next: list.NextCursor}, nil
	})
}

// OperationalEndpointsService lists the operational endpoints.
type OperationalEndpointsService struct{ c *Client }

// All iterates over the operational endpoints (filter may be nil).
func (s *OperationalEndpointsService) All(ctx context.Context, filter *OperationalEndpointFilter) iter.Seq2[OperationalEndpoint, error] {
	params := copyOf(filter)
	return pages(ctx, func(ctx context.Context, after *string) (page[OperationalEndpoint], error) {
		params.After = after
		r, err := s.c.raw.ListOperationalEndpointsWithResponse(ctx, &params)
		if err != nil {
			return page[OperationalEndpoint]{}, err
		}
		list, err := result(r.JSON200, r.HTTPResponse, r.Body)
		if err != nil {
			return page[OperationalEndpoint]{}, err
		}
		return page[OperationalEndpoint]{items: list.Data, next: list.NextCursor}, nil
	})
}
