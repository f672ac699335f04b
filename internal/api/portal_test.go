package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/store"
)

type portalSessionJSON struct {
	ID            string `json:"id"`
	TenantID      string `json:"tenant_id"`
	ReadOnly      bool   `json:"read_only"`
	URL           string `json:"url"`
	ExpiresAt     string `json:"expires_at"`
	CodeExpiresAt string `json:"code_expires_at"`
}

type portalInfoJSON struct {
	TenantID  string            `json:"tenant_id"`
	ReadOnly  bool              `json:"read_only"`
	Theme     map[string]string `json:"theme"`
	CSRF      string            `json:"csrf"`
	ExpiresAt string            `json:"expires_at"`
}

// openPortal opens a portal session for tenant and returns its code.
func (b *testBundle) openPortal(t *testing.T, tenant string, body map[string]any) string {
	t.Helper()
	r := b.do(t, "POST", "/v1/tenants/"+tenant+"/portal-sessions", body)
	requireStatus(t, http.StatusCreated, r)
	require.Equal(t, "no-store", r.Header.Get("Cache-Control"))
	ps := decodeJSON[portalSessionJSON](t, r)
	require.Equal(t, tenant, ps.TenantID)
	base, code, ok := strings.Cut(ps.URL, "/portal#code=")
	require.True(t, ok, ps.URL)
	require.Equal(t, b.srv.URL, base)
	return code
}

func (br *browser) exchange(code string) *response {
	return br.send("POST", "/portal/session", strings.NewReader(`{"code":"`+code+`"}`), nil,
		"Content-Type", "application/json", "Origin", br.base)
}

func portalCookieOf(t *testing.T, r *response) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: r.Header}).Cookies() {
		if c.Name == api.PortalCookie {
			return c
		}
	}
	t.Fatalf("no %s cookie in %v", api.PortalCookie, r.Header)
	return nil
}

// TestPortalCodeOpensOneSession: the URL's code is exchanged once for an
// HttpOnly SameSite=Strict cookie; a second exchange is refused; the cookie
// acts as a tenant token of the session's tenant, and changes need its
// CSRF token.
func TestPortalCodeOpensOneSession(t *testing.T) {
	t.Parallel()
	srv, b := setup(t)
	mine, theirs := b.createEndpoint(t, "acme"), b.createEndpoint(t, "globex")
	code := b.openPortal(t, "acme", map[string]any{"theme": map[string]any{"brand_color": "#0b6e4f", "name": "Acme Webhooks", "logo_url": "https://cdn.example.com/l.svg"}})
	br := newBrowser(t, srv.URL)

	r := br.exchange(code)
	requireStatus(t, http.StatusOK, r)
	info := decodeJSON[portalInfoJSON](t, r)
	require.Equal(t, "acme", info.TenantID)
	require.Equal(t, "#0b6e4f", info.Theme["brand_color"])
	c := portalCookieOf(t, r)
	require.True(t, c.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, c.SameSite)
	require.False(t, c.Secure, "plain http here")

	requireProblem(t, http.StatusUnauthorized, br.exchange(code))
	requireProblem(t, http.StatusUnauthorized, newBrowser(t, srv.URL).exchange(code))

	list := br.send("GET", "/v1/endpoints", nil, c)
	requireStatus(t, http.StatusOK, list)
	require.Contains(t, string(list.Body), mine.ID)
	require.NotContains(t, string(list.Body), theirs.ID, "nothing of another tenant")
	requireProblem(t, http.StatusNotFound, br.send("GET", "/v1/endpoints/"+theirs.ID, nil, c))
	requireProblem(t, http.StatusForbidden, br.send("GET", "/v1/traffic-classes", nil, c))

	requireProblem(t, http.StatusForbidden, br.send("POST", "/v1/endpoints/"+mine.ID+"/disable", nil, c))
	requireStatus(t, http.StatusOK, br.send("POST", "/v1/endpoints/"+mine.ID+"/disable", nil, c, api.CSRFHeader, info.CSRF))

	again := br.send("GET", "/portal/session", nil, c)
	requireStatus(t, http.StatusOK, again)
	require.Equal(t, info.CSRF, decodeJSON[portalInfoJSON](t, again).CSRF)
	requireProblem(t, http.StatusUnauthorized, br.send("GET", "/portal/session", nil, nil))
}

// TestReadOnlyPortalChangesNothing: a read-only session reads its tenant's
// endpoints and is refused every change, CSRF token or not.
func TestReadOnlyPortalChangesNothing(t *testing.T) {
	t.Parallel()
	srv, b := setup(t)
	e := b.createEndpoint(t, "acme")
	br := newBrowser(t, srv.URL)
	r := br.exchange(b.openPortal(t, "acme", map[string]any{"read_only": true}))
	requireStatus(t, http.StatusOK, r)
	info := decodeJSON[portalInfoJSON](t, r)
	require.True(t, info.ReadOnly)
	c := portalCookieOf(t, r)
	requireStatus(t, http.StatusOK, br.send("GET", "/v1/endpoints/"+e.ID, nil, c))
	for _, p := range []string{"/disable", "/secret/rotate"} {
		requireProblem(t, http.StatusForbidden, br.send("POST", "/v1/endpoints/"+e.ID+p, nil, c, api.CSRFHeader, info.CSRF))
	}
	requireProblem(t, http.StatusForbidden, br.send("DELETE", "/v1/endpoints/"+e.ID, nil, c, api.CSRFHeader, info.CSRF))
	got, err := b.store.GetEndpoint(t.Context(), e.ID)
	require.NoError(t, err)
	require.Equal(t, store.EndpointEnabled, got.Status)
}

// TestPortalSessionBadInput: each bad field is named; only admins open
// sessions.
func TestPortalSessionBadInput(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	tenantTok, _ := b.scopedToken(t, store.NewAPIToken{Scope: store.ScopeTenant, Name: "acme", TenantID: "acme"})
	tests := []struct {
		path  string
		body  any
		field string
	}{
		{"/v1/tenants/acme/portal-sessions", map[string]any{"expires_in": "1m"}, "expires_in"},
		{"/v1/tenants/acme/portal-sessions", map[string]any{"expires_in": "soon"}, "expires_in"},
		{"/v1/tenants/acme/portal-sessions", map[string]any{"theme": map[string]any{"brand_color": "red"}}, "theme.brand_color"},
		{"/v1/tenants/acme/portal-sessions", map[string]any{"theme": map[string]any{"logo_url": "http://cdn.example.com/l.svg"}}, "theme.logo_url"},
		{"/v1/tenants/acme/portal-sessions", map[string]any{"theme": map[string]any{"logo_url": "javascript:alert(1)"}}, "theme.logo_url"},
		{"/v1/tenants/acme/portal-sessions", map[string]any{"theme": map[string]any{"name": strings.Repeat("n", 65)}}, "theme.name"},
		{"/v1/tenants/-bad/portal-sessions", map[string]any{}, "tenant_id"},
	}
	for _, tt := range tests {
		requireFieldError(t, http.StatusBadRequest, b.do(t, "POST", tt.path, tt.body, docBlind("expires_in's bounds are not in its pattern")), tt.field)
	}
	requireProblem(t, http.StatusForbidden, b.do(t, "POST", "/v1/tenants/acme/portal-sessions", map[string]any{}, withHeader("Authorization", "Bearer "+tenantTok)))
	var n int
	require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM portal_sessions`).Scan(&n))
	require.Zero(t, n, "nothing is written on bad input")
}

// TestPortalFraming: by default nothing may frame the portal; configured
// ancestors go into its CSP, and its cookie is then SameSite=None; Secure.
func TestPortalFraming(t *testing.T) {
	t.Parallel()
	srv, _ := setup(t)
	page := newBrowser(t, srv.URL).send("GET", "/portal", nil, nil)
	requireStatus(t, http.StatusOK, page)
	require.Contains(t, page.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	require.Equal(t, "DENY", page.Header.Get("X-Frame-Options"))

	srv2, b2 := setup(t, func(d *api.Deps) { d.PortalFrameAncestors = "https://app.example.com" })
	page = newBrowser(t, srv2.URL).send("GET", "/portal", nil, nil)
	require.Contains(t, page.Header.Get("Content-Security-Policy"), "frame-ancestors https://app.example.com")
	require.Empty(t, page.Header.Get("X-Frame-Options"))
	r := newBrowser(t, srv2.URL).exchange(b2.openPortal(t, "acme", map[string]any{}))
	requireStatus(t, http.StatusOK, r)
	c := portalCookieOf(t, r)
	require.Equal(t, http.SameSiteNoneMode, c.SameSite)
	require.True(t, c.Secure)
}

func TestValidateFrameAncestors(t *testing.T) {
	t.Parallel()
	for v, ok := range map[string]bool{
		"'none'": true, "'self'": true, "https://app.example.com https://*.example.org:8443": true, "'self' http://localhost:3000": true,
		"": false, "'none' 'self'": false, "*": false, "https://a.example.com/path": false, "javascript:": false,
	} {
		require.Equal(t, ok, api.ValidateFrameAncestors(v) == nil, v)
	}
}
