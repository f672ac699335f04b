package hookd

import (
	"context"

	"github.com/hookd/hookd/sdk/go/api"
)

// The portal session types.
type (
	// CreatePortalSessionRequest opens a portal session.
	CreatePortalSessionRequest = api.CreatePortalSessionRequest
	// PortalSession is an opened session: its URL carries a one-time code.
	PortalSession = api.PortalSession
)

// PortalSessionsService opens tenant portal sessions (admin tokens only).
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
