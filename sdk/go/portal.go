package hookd

import (
	"context"
	"iter"

	"github.com/hookd/hookd/sdk/go/api"
)

// The portal session types.
type (
	// CreatePortalSessionRequest opens a portal session.
	CreatePortalSessionRequest = api.CreatePortalSessionRequest
	// PortalSession is an opened session: its URL carries a one-time code.
	PortalSession = api.PortalSession
	// PortalSessionSummary is a session as the list shows it: never its
	// code or cookie.
	PortalSessionSummary = api.PortalSessionSummary
	// PortalSessionFilter narrows PortalSessions.All; its After is set by
	// the iterator.
	PortalSessionFilter = api.ListPortalSessionsParams
)

// PortalSessionsService opens, lists and ends tenant portal sessions
// (admin tokens only).
type PortalSessionsService struct{ c *Client }

// Create opens a session of the tenant portal for tenantID: hand its URL
// to the tenant's browser, which opens it once.
func (s *PortalSessionsService) Create(ctx context.Context, tenantID string, req CreatePortalSessionRequest) (*PortalSession, error) {
	r, err := s.c.raw.CreatePortalSessionWithResponse(ctx, tenantID, req)
	if err != nil {
		return nil, err
	}
	return result(r.JSON201, r.HTTPResponse, r.Body)
}

// All iterates over tenantID's portal sessions, newest first (filter may
// be nil).
func (s *PortalSessionsService) All(ctx context.Context, tenantID string, filter *PortalSessionFilter) iter.Seq2[PortalSessionSummary, error] {
	params := copyOf(filter)
	return pages(ctx, func(ctx context.Context, after *string) (page[PortalSessionSummary], error) {
		params.After = after
		r, err := s.c.raw.ListPortalSessionsWithResponse(ctx, tenantID, &params)
		if err != nil {
			return page[PortalSessionSummary]{}, err
		}
		list, err := result(r.JSON200, r.HTTPResponse, r.Body)
		if err != nil {
			return page[PortalSessionSummary]{}, err
		}
		return page[PortalSessionSummary]{items: list.Data, next: list.NextCursor}, nil
	})
}

// End ends a live portal session at once: its cookie stops working.
func (s *PortalSessionsService) End(ctx context.Context, id string) error {
	r, err := s.c.raw.EndPortalSessionWithResponse(ctx, id)
	if err != nil {
		return err
	}
	return noContent(r.HTTPResponse, r.Body)
}
