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
// Retry-After while another token carries on. (A run that a window
// boundary passed through is made again, as below.)
func TestRateLimitPerToken(t *testing.T) {
	t.Parallel()
	// 1 request per second over a 1 minute window: 60 requests in any
	// window.
	const window = time.Minute
	for try := 1; !rateLimitPerTokenRun(t, window); try++ {
		require.Less(t, try, 5, "every run saw a window boundary")
	}
}

func rateLimitPerTokenRun(t *testing.T, window time.Duration) bool {
	_, b := setup(t, func(d *api.Deps) { d.RateLimit, d.RateWindow = 1, window })
	alice, _ := b.storedToken(t, "alice")
	bob, _ := b.storedToken(t, "bob")
	start := time.Now().UTC().Truncate(window)
	var within []rawAnswer
	for range 60 {
		within = append(within, b.raw(t, "GET", "/v1/endpoints", "Bearer "+alice, nil))
	}
	overGet := b.raw(t, "GET", "/v1/endpoints", "Bearer "+alice, nil)
	overPost := b.raw(t, "POST", "/v1/endpoints", "Bearer "+alice, map[string]any{"tenant_id": "acme", "url": "https://acme.example/h"})
	// Another token, and the bootstrap token, have their own budgets.
	other := b.raw(t, "GET", "/v1/endpoints", "Bearer "+bob, nil)
	bootstrap := b.raw(t, "GET", "/v1/endpoints", "Bearer "+testToken, nil)
	if !time.Now().UTC().Truncate(window).Equal(start) {
		return false
	}
	for i, a := range within {
		require.Equal(t, http.StatusOK, a.status, "request %d: %s", i+1, a.body)
		require.Equal(t, "60", a.header.Get("X-RateLimit-Limit"))
		require.Equal(t, strconv.Itoa(59-i), a.header.Get("X-RateLimit-Remaining"))
	}
	requireRateLimited(t, overGet, 60)
	requireRateLimited(t, overPost, 60)
	require.Zero(t, b.counts(t)["endpoints"], "a limited request writes nothing")
	require.Equal(t, http.StatusOK, other.status)
	require.Equal(t, http.StatusOK, bootstrap.status)

	// Health routes are not limited.
	require.Equal(t, http.StatusOK, b.raw(t, "GET", "/healthz", "Bearer "+alice, nil).status)
	return true
}

// TestRateLimitWithoutAValidToken: requests without a valid token count
// against their client IP; past the limit they get 429 instead of 401, and
// the IP is refused before any token is checked until the window passes.
//
// The limiter's windows are aligned to the clock, and a boundary passing
// during the run lowers the sliding count below what the run sent: such a
// run says nothing, and is made again on a fresh server.
func TestRateLimitWithoutAValidToken(t *testing.T) {
	t.Parallel()
	const window = 2 * time.Minute // 1 request per second: 120 in a window
	for try := 1; !rateLimitWithoutTokenRun(t, window); try++ {
		require.Less(t, try, 5, "every run saw a window boundary")
	}
}

// rateLimitWithoutTokenRun checks one run and reports whether it was
// conclusive (no window boundary passed during it).
func rateLimitWithoutTokenRun(t *testing.T, window time.Duration) bool {
	_, b := setup(t, func(d *api.Deps) { d.RateLimit, d.RateWindow = 1, window })
	alice, _ := b.storedToken(t, "alice")
	carol, _ := b.storedToken(t, "carol")
	budget := int(window.Seconds())
	start := time.Now().UTC().Truncate(window)
	var authenticated, guesses []rawAnswer
	// Authenticated requests do not use up the IP's budget.
	for range 6 {
		authenticated = append(authenticated, b.raw(t, "GET", "/v1/endpoints", "Bearer "+alice, nil))
	}
	for range budget {
		guesses = append(guesses, b.raw(t, "GET", "/v1/endpoints", "Bearer wrong", nil))
	}
	over := b.raw(t, "GET", "/v1/endpoints", "Bearer wrong", nil)
	none := b.raw(t, "GET", "/v1/endpoints", "", nil)
	// The IP is over its limit: a token this api has not verified yet is
	// refused before any lookup, so guesses cost no queries...
	unverified := b.raw(t, "GET", "/v1/endpoints", "Bearer "+carol, nil)
	// ...but one it verified is checked and admitted all the same.
	verified := b.raw(t, "GET", "/v1/endpoints", "Bearer "+alice, nil)
	bootstrap := b.raw(t, "GET", "/v1/endpoints", "Bearer "+testToken, nil)
	if !time.Now().UTC().Truncate(window).Equal(start) {
		return false
	}
	for _, a := range authenticated {
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	}
	for i, a := range guesses {
		require.Equal(t, http.StatusUnauthorized, a.status, "guess %d", i+1)
	}
	requireRateLimited(t, over, budget)
	requireRateLimited(t, none, budget)
	requireRateLimited(t, unverified, budget)
	require.Equal(t, http.StatusOK, verified.status)
	require.Equal(t, http.StatusOK, bootstrap.status)
	return true
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
