package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEndpointRateLimit: rate_limit is set on create, kept by a PATCH that
// leaves it out, changed by one that sends it and removed by null.
func TestEndpointRateLimit(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	r := b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/h", "rate_limit": 20})
	requireStatus(t, http.StatusCreated, r)
	ep := decodeJSON[endpointJSON](t, r)
	require.NotNil(t, ep.RateLimit)
	require.Equal(t, 20, *ep.RateLimit)

	patch := func(body map[string]any) *int {
		t.Helper()
		r := b.do(t, "PATCH", "/v1/endpoints/"+ep.ID, body)
		requireStatus(t, http.StatusOK, r)
		return decodeJSON[endpointJSON](t, r).RateLimit
	}
	require.Equal(t, 20, *patch(map[string]any{"description": "kept"}))
	require.Equal(t, 5, *patch(map[string]any{"rate_limit": 5}))
	require.Nil(t, patch(map[string]any{"rate_limit": nil}))
	require.Nil(t, patch(map[string]any{"description": "still none"}))

	none := b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/n", "rate_limit": nil})
	requireStatus(t, http.StatusCreated, none)
	require.Nil(t, decodeJSON[endpointJSON](t, none).RateLimit)
}

// TestEndpointRateLimitRefusesBadValues: anything but an integer from 1 up
// (or null) answers 400 naming rate_limit, and changes nothing.
func TestEndpointRateLimitRefusesBadValues(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ep := b.createEndpoint(t, "acme")
	before := b.counts(t)
	for _, bad := range []any{0, -1, 1.5, "20", true, 100001, map[string]any{}} {
		requireFieldError(t, http.StatusBadRequest,
			b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/b", "rate_limit": bad}), "rate_limit")
		requireFieldError(t, http.StatusBadRequest,
			b.do(t, "PATCH", "/v1/endpoints/"+ep.ID, map[string]any{"rate_limit": bad}), "rate_limit")
	}
	require.Equal(t, before, b.counts(t))
	got := decodeJSON[endpointJSON](t, b.do(t, "GET", "/v1/endpoints/"+ep.ID, nil))
	require.Nil(t, got.RateLimit)
}
