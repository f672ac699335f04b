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

// inFirstWindow runs run on a fresh server (run calls setup) until a run
// ends inside its limiter's first window, then calls the checks run
// returned. httprate aligns a limiter's windows to the instant it is made,
// so until its first window ends no earlier window's count weighs in and
// the counts a run sees are exact; a run slower than the window (a busy
// machine) says nothing about them and is made again. Only what depends on
// the count goes in the checks.
func inFirstWindow(t *testing.T, window time.Duration, run func() (checks func())) {
	t.Helper()
	for try := 1; ; try++ {
		made := time.Now() // before the server, hence before its limiter
		checks := run()
		if time.Since(made) < window {
			checks()
			return
		}
		require.Less(t, try, 5, "every run outlasted the limiter's first window (%s)", window)
	}
}

// TestRateLimitPerToken: each token gets its own budget of RateLimit x
// RateWindow requests per sliding window; the one over it gets 429 with
// Retry-After while another token carries on.
func TestRateLimitPerToken(t *testing.T) {
	t.Parallel()
	// 1 request per second over a 1 minute window: 60 requests in any
	// window.
	const window = time.Minute
	inFirstWindow(t, window, func() func() {
		_, b := setup(t, func(d *api.Deps) { d.RateLimit, d.RateWindow = 1, window })
		alice, _ := b.storedToken(t, "alice")
		bob, _ := b.storedToken(t, "bob")
		var within []rawAnswer
		for range 60 {
			within = append(within, b.raw(t, "GET", "/v1/endpoints", "Bearer "+alice, nil))
		}
		overGet := b.raw(t, "GET", "/v1/endpoints", "Bearer "+alice, nil)
		overPost := b.raw(t, "POST", "/v1/endpoints", "Bearer "+alice, map[string]any{"tenant_id": "acme", "url": "https://acme.example/h"})
		// Another token, and the bootstrap token, have their own budgets.
		other := b.raw(t, "GET", "/v1/endpoints", "Bearer "+bob, nil)
		bootstrap := b.raw(t, "GET", "/v1/endpoints", "Bearer "+testToken, nil)
		// Health routes are not limited.
		require.Equal(t, http.StatusOK, b.raw(t, "GET", "/healthz", "Bearer "+alice, nil).status)
		return func() {
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
		}
	})
}

// TestRateLimitWithoutAValidToken: requests without a valid token count
// against their client IP; past the limit they get 429 instead of 401, and
// the IP is refused before any token is checked until the window passes.
func TestRateLimitWithoutAValidToken(t *testing.T) {
	t.Parallel()
	const window = 2 * time.Minute // 1 request per second: 120 in a window
	budget := int(window.Seconds())
	inFirstWindow(t, window, func() func() {
		_, b := setup(t, func(d *api.Deps) { d.RateLimit, d.RateWindow = 1, window })
		alice, _ := b.storedToken(t, "alice")
		carol, _ := b.storedToken(t, "carol")
		// Authenticated requests do not use up the IP's budget.
		for range 6 {
			a := b.raw(t, "GET", "/v1/endpoints", "Bearer "+alice, nil)
			require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		}
		for i := range budget {
			require.Equal(t, http.StatusUnauthorized, b.raw(t, "GET", "/v1/endpoints", "Bearer wrong", nil).status, "guess %d", i+1)
		}
		over := b.raw(t, "GET", "/v1/endpoints", "Bearer wrong", nil)
		none := b.raw(t, "GET", "/v1/endpoints", "", nil)
		// The IP is over its limit: a token this api has not verified yet
		// is refused before any lookup, so guesses cost no queries...
		unverified := b.raw(t, "GET", "/v1/endpoints", "Bearer "+carol, nil)
		// ...but one it verified is checked and admitted all the same.
		verified := b.raw(t, "GET", "/v1/endpoints", "Bearer "+alice, nil)
		bootstrap := b.raw(t, "GET", "/v1/endpoints", "Bearer "+testToken, nil)
		return func() {
			requireRateLimited(t, over, budget)
			requireRateLimited(t, none, budget)
			requireRateLimited(t, unverified, budget)
			require.Equal(t, http.StatusOK, verified.status)
			require.Equal(t, http.StatusOK, bootstrap.status)
		}
	})
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
