package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/store"
)

// TestDashboardSessionsFollowStoredTokens: the login form takes a stored
// token, the session acts under its name, and revoking the token ends the
// session within TokenCacheTTL (the page goes back to the login form, /v1
// answers 401), while the bootstrap token's sessions carry on.
func TestDashboardSessionsFollowStoredTokens(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Now()}
	srv, b := setup(t, func(d *api.Deps) { d.Now = clock.Now })
	tok, rec := b.storedToken(t, "oncall-bob")
	br := newBrowser(t, srv.URL)

	r := br.login(tok)
	requireStatus(t, http.StatusSeeOther, r)
	c := sessionOf(t, r)
	page := br.send("GET", "/dashboard", nil, c)
	requireStatus(t, http.StatusOK, page)
	require.Contains(t, string(page.Body), "oncall-bob")
	csrf := string(csrfMetaRE.FindSubmatch(page.Body)[1])
	e := b.createEndpoint(t, "acme")
	requireStatus(t, http.StatusOK, br.send("POST", "/v1/endpoints/"+e.ID+"/breaker/isolate", nil, c, api.CSRFHeader, csrf))
	trs, err := b.store.ListTransitions(context.Background(), e.ID, nil, 1)
	require.NoError(t, err)
	require.Equal(t, "oncall-bob", trs[0].Actor)

	boot, _ := br.loggedIn()

	_, err = b.store.RevokeAPIToken(context.Background(), store.TokenRef{ID: rec.ID})
	require.NoError(t, err)
	clock.Advance(api.TokenCacheTTL)

	requireProblem(t, http.StatusUnauthorized, br.send("GET", "/v1/endpoints", nil, c))
	page = br.send("GET", "/dashboard", nil, c)
	requireStatus(t, http.StatusSeeOther, page)
	require.Equal(t, "/dashboard/login?next=%2Fdashboard", page.Header.Get("Location"))
	requireProblem(t, http.StatusUnauthorized, br.login(tok))

	requireStatus(t, http.StatusOK, br.send("GET", "/v1/endpoints", nil, boot))
}

// TestLoginGuessesAreRateLimited: failed logins count against the client
// IP like bad bearer tokens; past the limit the form answers 429 to
// guesses and to tokens the api has not verified, while a known token (the
// bootstrap one here) still logs in.
func TestLoginGuessesAreRateLimited(t *testing.T) {
	t.Parallel()
	const window = 30 * time.Second
	inFirstWindow(t, window, func() func() {
		srv, b := setup(t, func(d *api.Deps) { d.RateLimit, d.RateWindow = 1, window })
		unseen, _ := b.storedToken(t, "unseen")
		br := newBrowser(t, srv.URL)
		for range 30 {
			requireProblem(t, http.StatusUnauthorized, br.login("guess"))
		}
		over := br.login("guess")
		overUnseen := br.login(unseen)
		known := br.login(testToken)
		requireStatus(t, http.StatusSeeOther, known)
		require.Empty(t, known.Header.Get("Retry-After"))
		return func() {
			requireProblem(t, http.StatusTooManyRequests, over)
			require.Equal(t, "30", over.Header.Get("Retry-After"))
			requireProblem(t, http.StatusTooManyRequests, overUnseen)
		}
	})
}

// TestSessionRequestsAreRateLimited: a session's /v1 requests share its
// token's budget.
func TestSessionRequestsAreRateLimited(t *testing.T) {
	t.Parallel()
	const window = time.Minute
	inFirstWindow(t, window, func() func() {
		srv, b := setup(t, func(d *api.Deps) { d.RateLimit, d.RateWindow = 1, window })
		br := newBrowser(t, srv.URL)
		c, _ := br.loggedIn()
		for range 60 {
			requireStatus(t, http.StatusOK, br.send("GET", "/v1/breakers", nil, c))
		}
		over := br.send("GET", "/v1/breakers", nil, c)
		// The bearer token of the same name shares the budget.
		bearer := b.raw(t, "GET", "/v1/endpoints", "Bearer "+testToken, nil)
		return func() {
			requireProblem(t, http.StatusTooManyRequests, over)
			require.Equal(t, "60", over.Header.Get("Retry-After"))
			require.Equal(t, http.StatusTooManyRequests, bearer.status)
		}
	})
}

// TestDashboardLoginTakesWritableAdminTokensOnly: sessions act as admins,
// so a tenant or read-only token is refused at the login (403, no cookie),
// and a session whose admin token was revoked does not come back when a
// tenant token later takes the same name.
func TestDashboardLoginTakesWritableAdminTokensOnly(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Now()}
	srv, b := setup(t, func(d *api.Deps) { d.Now = clock.Now })
	br := newBrowser(t, srv.URL)
	tenant, _ := b.scopedToken(t, store.NewAPIToken{Scope: store.ScopeTenant, Name: "acme-app", TenantID: "acme"})
	readOnly, _ := b.scopedToken(t, store.NewAPIToken{Scope: store.ScopeAdmin, Name: "grafana", ReadOnly: true})
	for _, tok := range []string{tenant, readOnly} {
		r := br.login(tok)
		p := requireProblem(t, http.StatusForbidden, r)
		require.Equal(t, "the dashboard needs a writable admin token", p.Detail)
		require.Empty(t, r.Header.Values("Set-Cookie"))
	}

	admin, rec := b.storedToken(t, "shared-name")
	r := br.login(admin)
	requireStatus(t, http.StatusSeeOther, r)
	c := sessionOf(t, r)
	requireStatus(t, http.StatusOK, br.send("GET", "/v1/traffic-classes", nil, c))
	_, err := b.store.RevokeAPIToken(context.Background(), store.TokenRef{ID: rec.ID})
	require.NoError(t, err)
	b.scopedToken(t, store.NewAPIToken{Scope: store.ScopeTenant, Name: "shared-name", TenantID: "acme"})
	clock.Advance(api.TokenCacheTTL)
	requireProblem(t, http.StatusUnauthorized, br.send("GET", "/v1/traffic-classes", nil, c))
}
