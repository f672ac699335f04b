package api_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
)

// requireRateLimited checks a 429 problem+json with Retry-After.
func requireRateLimited(t *testing.T, a rawAnswer, retryAfter int) {
	t.Helper()
	require.Equal(t, http.StatusTooManyRequests, a.status, "%s", a.body)
	require.Equal(t, "application/problem+json", a.header.Get("Content-Type"))
	require.Equal(t, strconv.Itoa(retryAfter), a.header.Get("Retry-After"))
	var p api.Problem
	require.NoError(t, json.Unmarshal(a.body, &p))
	require.Equal(t, api.ProblemTypeBase+"rate-limited", p.Type)
	require.Equal(t, "Too Many Requests", p.Title)
	require.Equal(t, http.StatusTooManyRequests, p.Status)
	require.NotEmpty(t, p.Detail)
}

// TestRateLimitPerToken: each token gets its own budget of RateLimit x
// RateWindow requests per sliding window; the one over it gets 429 with
// Retry-After while another token carries on.
func TestRateLimitPerToken(t *testing.T) {
	t.Parallel()
	// 1 request per second over a 1 minute window: 60 requests in any
	// window (windows start when the server does). A long window keeps the
	// test independent of how fast it runs.
	_, b := setup(t, func(d *api.Deps) { d.RateLimit, d.RateWindow = 1, time.Minute })
	alice, _ := b.storedToken(t, "alice")
	bob, _ := b.storedToken(t, "bob")

	for i := range 60 {
		a := b.raw(t, "GET", "/v1/endpoints", "Bearer "+alice, nil)
		require.Equal(t, http.StatusOK, a.status, "request %d: %s", i+1, a.body)
		require.Equal(t, "60", a.header.Get("X-RateLimit-Limit"))
		require.Equal(t, strconv.Itoa(59-i), a.header.Get("X-RateLimit-Remaining"))
	}
	requireRateLimited(t, b.raw(t, "GET", "/v1/endpoints", "Bearer "+alice, nil), 60)
	requireRateLimited(t, b.raw(t, "POST", "/v1/endpoints", "Bearer "+alice, map[string]any{"tenant_id": "acme", "url": "https://acme.example/h"}), 60)
	require.Zero(t, b.counts(t)["endpoints"], "a limited request writes nothing")

	// Another token, and the bootstrap token, have their own budgets.
	require.Equal(t, http.StatusOK, b.raw(t, "GET", "/v1/endpoints", "Bearer "+bob, nil).status)
	require.Equal(t, http.StatusOK, b.raw(t, "GET", "/v1/endpoints", "Bearer "+testToken, nil).status)

	// Health routes are not limited.
	require.Equal(t, http.StatusOK, b.raw(t, "GET", "/healthz", "Bearer "+alice, nil).status)
}

// TestRateLimitWithoutAValidToken: requests without a valid token count
// against their client IP; past the limit they get 429 instead of 401, and
// the IP is refused before any token is checked until the window passes.
func TestRateLimitWithoutAValidToken(t *testing.T) {
	t.Parallel()
	_, b := setup(t, func(d *api.Deps) { d.RateLimit, d.RateWindow = 1, 30*time.Second })
	alice, _ := b.storedToken(t, "alice")
	// Authenticated requests do not use up the IP's budget.
	for range 6 {
		require.Equal(t, http.StatusOK, b.raw(t, "GET", "/v1/endpoints", "Bearer "+alice, nil).status)
	}
	for i := range 30 {
		a := b.raw(t, "GET", "/v1/endpoints", "Bearer wrong", nil)
		require.Equal(t, http.StatusUnauthorized, a.status, "guess %d", i+1)
	}
	requireRateLimited(t, b.raw(t, "GET", "/v1/endpoints", "Bearer wrong", nil), 30)
	requireRateLimited(t, b.raw(t, "GET", "/v1/endpoints", "", nil), 30)
	// The IP is over its limit: a token this api has not verified yet is
	// refused before any lookup, so guesses cost no queries...
	carol, _ := b.storedToken(t, "carol")
	requireRateLimited(t, b.raw(t, "GET", "/v1/endpoints", "Bearer "+carol, nil), 30)
	// ...but one it verified is checked and admitted all the same.
	require.Equal(t, http.StatusOK, b.raw(t, "GET", "/v1/endpoints", "Bearer "+alice, nil).status)
	require.Equal(t, http.StatusOK, b.raw(t, "GET", "/v1/endpoints", "Bearer "+testToken, nil).status)
}

// TestRateLimitZeroDisables: RateLimit 0 (the Deps default) limits nothing.
func TestRateLimitZeroDisables(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	for range 300 {
		a := b.raw(t, "GET", "/v1/endpoints", "Bearer "+testToken, nil)
		require.Equal(t, http.StatusOK, a.status)
		require.Empty(t, a.header.Get("X-RateLimit-Limit"))
	}
	for range 50 {
		require.Equal(t, http.StatusUnauthorized, b.raw(t, "GET", "/v1/endpoints", "Bearer wrong", nil).status)
	}
}
