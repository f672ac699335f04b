package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/store"
)

// portalSessionListedJSON is a portal session as GET
// /v1/tenants/{tenant_id}/portal-sessions lists it.
type portalSessionListedJSON struct {
	ID            string     `json:"id"`
	TenantID      string     `json:"tenant_id"`
	ReadOnly      bool       `json:"read_only"`
	Status        string     `json:"status"`
	CreatedBy     string     `json:"created_by"`
	CreatedAt     time.Time  `json:"created_at"`
	ExpiresAt     time.Time  `json:"expires_at"`
	CodeExpiresAt time.Time  `json:"code_expires_at"`
	LoggedInAt    *time.Time `json:"logged_in_at"`
	EndedAt       *time.Time `json:"ended_at"`
}

// portalStatuses lists tenant's portal sessions, id -> status.
func (b *testBundle) portalStatuses(t *testing.T, tenant string) map[string]string {
	t.Helper()
	r := b.do(t, "GET", "/v1/tenants/"+tenant+"/portal-sessions", nil)
	requireStatus(t, http.StatusOK, r)
	require.NotRegexp(t, secretPattern, string(r.Body), "a list shows no code nor cookie")
	out := map[string]string{}
	for _, ps := range decodeJSON[struct {
		Data       []portalSessionListedJSON `json:"data"`
		NextCursor *string                   `json:"next_cursor"`
	}](t, r).Data {
		require.Equal(t, tenant, ps.TenantID)
		out[ps.ID] = ps.Status
	}
	return out
}

// openPortalAs opens a portal session for tenant with auth ("" for the
// test token) and returns its id and code.
func (b *testBundle) openPortalAs(t *testing.T, tenant, auth string) (id, code string) {
	t.Helper()
	opts := []callOpt{}
	if auth != "" {
		opts = append(opts, withHeader("Authorization", auth))
	}
	r := b.do(t, "POST", "/v1/tenants/"+tenant+"/portal-sessions", map[string]any{}, opts...)
	requireStatus(t, http.StatusCreated, r)
	ps := decodeJSON[portalSessionJSON](t, r)
	_, code, _ = strings.Cut(ps.URL, "/portal#code=")
	return ps.ID, code
}

// loggedInPortal exchanges code in a new browser and returns the client.
func (b *testBundle) loggedInPortal(t *testing.T, code string) portalClient {
	t.Helper()
	br := newBrowser(t, b.srv.URL)
	r := br.exchange(code)
	requireStatus(t, http.StatusOK, r)
	return portalClient{br: br, c: portalCookieOf(t, r), csrf: decodeJSON[portalInfoJSON](t, r).CSRF}
}

// TestPortalLogoutEndsTheSession: the portal's logout needs the session's
// CSRF token, ends the session on the server and clears the cookie: the
// cookie, a copy of it included, reaches nothing afterwards, and the
// admin's list shows the session ended. The page has the button.
func TestPortalLogoutEndsTheSession(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	e := b.createEndpoint(t, "acme")
	id, code := b.openPortalAs(t, "acme", "")
	pc := b.loggedInPortal(t, code)
	require.Equal(t, http.StatusOK, pc.send(t, "GET", "/v1/endpoints/"+e.ID, nil).status)
	require.Equal(t, map[string]string{id: "active"}, b.portalStatuses(t, "acme"))

	p := requireProblem(t, http.StatusForbidden, pc.br.send("POST", "/portal/logout", nil, pc.c))
	require.Equal(t, api.ProblemTypeBase+"csrf", p.Type, "another site cannot log the tenant out")
	r := pc.br.send("POST", "/portal/logout", nil, pc.c, api.CSRFHeader, pc.csrf)
	requireStatus(t, http.StatusNoContent, r)
	cleared := portalCookieOf(t, r)
	require.Empty(t, cleared.Value)
	require.Negative(t, cleared.MaxAge)

	// The copy the browser held is refused: the session ended on the server.
	for _, path := range []string{"/v1/endpoints/" + e.ID, "/v1/endpoints"} {
		require.Equal(t, http.StatusUnauthorized, pc.send(t, "GET", path, nil).status, path)
	}
	requireProblem(t, http.StatusUnauthorized, pc.br.send("GET", "/portal/session", nil, pc.c))
	require.Equal(t, map[string]string{id: "ended"}, b.portalStatuses(t, "acme"))
	// Without a session, the logout only clears the cookie.
	requireStatus(t, http.StatusNoContent, pc.br.send("POST", "/portal/logout", nil, nil))

	page := newBrowser(t, b.srv.URL).send("GET", "/portal", nil, nil)
	require.Contains(t, string(page.Body), `id="logout"`)
	js := newBrowser(t, b.srv.URL).send("GET", "/portal/assets/portal.js", nil, nil)
	require.Contains(t, string(js.Body), `call("POST", "/portal/logout")`)
}

// TestAdminListsAndEndsPortalSessions: an admin lists a tenant's portal
// sessions (never a code or cookie) with their status, and ends one: its
// cookie is refused at once and its unused code opens nothing; ending it
// again is 404. Tenant tokens reach neither route.
func TestAdminListsAndEndsPortalSessions(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	active, activeCode := b.openPortalAs(t, "acme", "")
	pending, pendingCode := b.openPortalAs(t, "acme", "")
	globex, _ := b.openPortalAs(t, "globex", "")
	pc := b.loggedInPortal(t, activeCode)
	require.Equal(t, map[string]string{active: "active", pending: "pending"}, b.portalStatuses(t, "acme"))
	require.Equal(t, map[string]string{globex: "pending"}, b.portalStatuses(t, "globex"))

	tok, _ := b.scopedToken(t, store.NewAPIToken{Scope: store.ScopeTenant, Name: "acme-app", TenantID: "acme"})
	requireProblem(t, http.StatusForbidden, b.do(t, "GET", "/v1/tenants/acme/portal-sessions", nil, withHeader("Authorization", "Bearer "+tok)))
	requireProblem(t, http.StatusForbidden, b.do(t, "DELETE", "/v1/portal-sessions/"+active, nil, withHeader("Authorization", "Bearer "+tok)))
	require.Equal(t, http.StatusForbidden, pc.send(t, "DELETE", "/v1/portal-sessions/"+active, nil).status, "a session cannot end others")

	requireStatus(t, http.StatusNoContent, b.do(t, "DELETE", "/v1/portal-sessions/"+active, nil))
	require.Equal(t, http.StatusUnauthorized, pc.send(t, "GET", "/v1/endpoints", nil).status)
	requireStatus(t, http.StatusNoContent, b.do(t, "DELETE", "/v1/portal-sessions/"+pending, nil))
	requireProblem(t, http.StatusUnauthorized, newBrowser(t, b.srv.URL).exchange(pendingCode))
	require.Equal(t, map[string]string{active: "ended", pending: "ended"}, b.portalStatuses(t, "acme"))
	requireProblem(t, http.StatusNotFound, b.do(t, "DELETE", "/v1/portal-sessions/"+active, nil))
	requireProblem(t, http.StatusNotFound, b.do(t, "DELETE", "/v1/portal-sessions/ps_nope", nil))
	require.Equal(t, map[string]string{globex: "pending"}, b.portalStatuses(t, "globex"), "another tenant's are untouched")
}

// TestRevokingATokenEndsItsPortalSessions: revoking a token ends every
// portal session it opened at once (through the API, and through the
// command line's store call), and no session another token opened.
func TestRevokingATokenEndsItsPortalSessions(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ops, rec := b.storedToken(t, "ops")
	_, byOpsCode := b.openPortalAs(t, "acme", "Bearer "+ops)
	byOpsPending, _ := b.openPortalAs(t, "acme", "Bearer "+ops)
	_, bootCode := b.openPortalAs(t, "acme", "")
	byOps, byBoot := b.loggedInPortal(t, byOpsCode), b.loggedInPortal(t, bootCode)
	require.Equal(t, http.StatusOK, byOps.send(t, "GET", "/v1/endpoints", nil).status)

	requireStatus(t, http.StatusNoContent, b.do(t, "DELETE", "/v1/tokens/"+rec.ID, nil))
	require.Equal(t, http.StatusUnauthorized, byOps.send(t, "GET", "/v1/endpoints", nil).status, "the revoked token's session ended")
	require.Equal(t, http.StatusOK, byBoot.send(t, "GET", "/v1/endpoints", nil).status, "another token's lives on")
	require.Equal(t, "ended", b.portalStatuses(t, "acme")[byOpsPending])

	// The command line revokes through the same store call.
	cli, cliRec := b.storedToken(t, "cli")
	_, code := b.openPortalAs(t, "acme", "Bearer "+cli)
	pc := b.loggedInPortal(t, code)
	_, err := b.store.RevokeAPIToken(context.Background(), store.TokenRef{Name: cliRec.Name})
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, pc.send(t, "GET", "/v1/endpoints", nil).status)
}

// TestDashboardSessionsAreBoundToTheTokenID: a dashboard session follows
// the token it was opened with, by id: once that token is revoked, a new
// admin token of the same name does not revive the session.
func TestDashboardSessionsAreBoundToTheTokenID(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Now()}
	srv, b := setup(t, func(d *api.Deps) { d.Now = clock.Now })
	tok, rec := b.storedToken(t, "oncall")
	br := newBrowser(t, srv.URL)
	r := br.login(tok)
	requireStatus(t, http.StatusSeeOther, r)
	c := sessionOf(t, r)
	requireStatus(t, http.StatusOK, br.send("GET", "/v1/endpoints", nil, c))

	_, err := b.store.RevokeAPIToken(context.Background(), store.TokenRef{ID: rec.ID})
	require.NoError(t, err)
	again, _ := b.storedToken(t, "oncall")
	clock.Advance(api.TokenCacheTTL)
	requireProblem(t, http.StatusUnauthorized, br.send("GET", "/v1/endpoints", nil, c))
	page := br.send("GET", "/dashboard", nil, c)
	requireStatus(t, http.StatusSeeOther, page)
	requireStatus(t, http.StatusOK, br.send("GET", "/dashboard/login", nil, c)) // the form, not a redirect loop

	// The new token opens sessions of its own.
	r = br.login(again)
	requireStatus(t, http.StatusSeeOther, r)
	requireStatus(t, http.StatusOK, br.send("GET", "/v1/endpoints", nil, sessionOf(t, r)))
}

// TestDashboardLogoutEndsTheSessionServerSide: after a logout, a copy of
// the session cookie reaches nothing (the API answers 401, the pages send
// it to the login form), while other sessions of the same token carry on.
func TestDashboardLogoutEndsTheSessionServerSide(t *testing.T) {
	t.Parallel()
	srv, _ := setup(t)
	br := newBrowser(t, srv.URL)
	c, csrf := br.loggedIn()
	other, _ := br.loggedIn()
	copied := &http.Cookie{Name: c.Name, Value: c.Value}

	requireStatus(t, http.StatusSeeOther, br.send("POST", "/dashboard/logout", nil, c, api.CSRFHeader, csrf))
	requireProblem(t, http.StatusUnauthorized, br.send("GET", "/v1/endpoints", nil, copied))
	r := br.send("GET", "/dashboard", nil, copied)
	requireStatus(t, http.StatusSeeOther, r)
	require.Equal(t, "/dashboard/login?next=%2Fdashboard", r.Header.Get("Location"))
	requireStatus(t, http.StatusOK, br.send("GET", "/dashboard/login", nil, copied)) // the form, not a redirect loop
	requireStatus(t, http.StatusOK, br.send("GET", "/v1/endpoints", nil, other))     // another session lives on
}
