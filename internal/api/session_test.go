package api_test

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
)

// fakeClock is a settable clock for session expiry.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// browser sends requests as a browser would: no bearer token, cookies as
// given, redirects not followed.
type browser struct {
	t      *testing.T
	base   string
	client *http.Client
}

func newBrowser(t *testing.T, base string) *browser {
	return &browser{t: t, base: base, client: &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// send makes one request; header pairs are name, value, ...
func (b *browser) send(method, path string, body io.Reader, cookie *http.Cookie, header ...string) *response {
	b.t.Helper()
	req, err := http.NewRequest(method, b.base+path, body)
	require.NoError(b.t, err)
	if cookie != nil {
		req.AddCookie(cookie)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	res, err := b.client.Do(req)
	require.NoError(b.t, err)
	defer res.Body.Close()
	got, err := io.ReadAll(res.Body)
	require.NoError(b.t, err)
	return &response{Status: res.StatusCode, Header: res.Header, Body: got}
}

// login posts the login form and returns the answer.
func (b *browser) login(token string, header ...string) *response {
	b.t.Helper()
	form := url.Values{"token": {token}, "next": {"/dashboard"}}
	return b.send("POST", "/dashboard/login", strings.NewReader(form.Encode()), nil,
		append([]string{"Content-Type", "application/x-www-form-urlencoded"}, header...)...)
}

// sessionOf returns the session cookie a response sets.
func sessionOf(t *testing.T, r *response) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: r.Header}).Cookies() {
		if c.Name == api.SessionCookie {
			return c
		}
	}
	t.Fatalf("no %s cookie in %v", api.SessionCookie, r.Header.Values("Set-Cookie"))
	return nil
}

var csrfMetaRE = regexp.MustCompile(`<meta name="hookd-csrf" content="([^"]+)">`)

// loggedIn logs in with the test token and returns the session cookie and
// the CSRF token of the dashboard page.
func (b *browser) loggedIn() (*http.Cookie, string) {
	b.t.Helper()
	r := b.login(testToken)
	requireStatus(b.t, http.StatusSeeOther, r)
	c := sessionOf(b.t, r)
	page := b.send("GET", "/dashboard", nil, c)
	requireStatus(b.t, http.StatusOK, page)
	m := csrfMetaRE.FindSubmatch(page.Body)
	require.NotNil(b.t, m, "the page holds the CSRF token: %s", page.Body)
	return &http.Cookie{Name: c.Name, Value: c.Value}, string(m[1])
}

func TestLoginSetsASessionCookie(t *testing.T) {
	t.Parallel()
	srv, _ := setup(t)
	b := newBrowser(t, srv.URL)

	r := b.login(testToken)
	requireStatus(t, http.StatusSeeOther, r)
	require.Equal(t, "/dashboard", r.Header.Get("Location"))
	require.Equal(t, "no-store", r.Header.Get("Cache-Control"))
	c := sessionOf(t, r)
	require.True(t, c.HttpOnly, "scripts cannot read the session")
	require.Equal(t, http.SameSiteStrictMode, c.SameSite)
	require.Equal(t, "/", c.Path, "sent to /v1 and /dashboard")
	require.False(t, c.Secure, "plain HTTP: a Secure cookie would never come back")
	require.Equal(t, int(api.SessionTTL/time.Second), c.MaxAge)
	require.NotContains(t, c.Value, testToken, "the cookie never holds the token")
	raw := r.Header.Get("Set-Cookie")
	require.Contains(t, raw, "HttpOnly")
	require.Contains(t, raw, "SameSite=Strict")

	// Behind a TLS-terminating proxy the cookie is Secure.
	r = b.login(testToken, "X-Forwarded-Proto", "https")
	requireStatus(t, http.StatusSeeOther, r)
	require.True(t, sessionOf(t, r).Secure)

	// Two logins are two sessions.
	require.NotEqual(t, c.Value, sessionOf(t, b.login(testToken)).Value)

	// next goes to a dashboard page only.
	for next, want := range map[string]string{
		"/dashboard/endpoints/ep_01KKNTQ1T8VQ9FF8Q7A3NCTRXR": "/dashboard/endpoints/ep_01KKNTQ1T8VQ9FF8Q7A3NCTRXR",
		"/dashboard/messages":                                "/dashboard/messages",
		"/dashboard/deliveries":                              "/dashboard/deliveries",
		"/dashboard/classes":                                 "/dashboard/classes",
		"https://evil.example/":                              "/dashboard",
		"//evil.example/dashboard":                           "/dashboard",
		"/v1/endpoints":                                      "/dashboard",
		"/dashboard/../v1":                                   "/dashboard",
	} {
		form := url.Values{"token": {testToken}, "next": {next}}
		r := b.send("POST", "/dashboard/login", strings.NewReader(form.Encode()), nil, "Content-Type", "application/x-www-form-urlencoded")
		requireStatus(t, http.StatusSeeOther, r)
		require.Equal(t, want, r.Header.Get("Location"), "next %q", next)
	}
}

func TestLoginRejectsABadTokenWithoutAHint(t *testing.T) {
	t.Parallel()
	srv, _ := setup(t)
	b := newBrowser(t, srv.URL)
	var first *api.Problem
	for name, token := range map[string]string{
		"empty":     "",
		"wrong":     "not-the-token",
		"suffix":    testToken + "x",
		"truncated": testToken[:len(testToken)-1],
		"case":      strings.ToUpper(testToken),
		"bearer":    "Bearer " + testToken,
	} {
		t.Run(name, func(t *testing.T) {
			r := b.login(token)
			p := requireProblem(t, http.StatusUnauthorized, r)
			require.Empty(t, r.Header.Values("Set-Cookie"), "no cookie")
			require.Empty(t, p.Errors)
			if first == nil {
				first = &p
			}
			require.Equal(t, *first, p, "the same answer whatever was wrong")
		})
	}
	require.Equal(t, api.Problem{Type: api.ProblemTypeBase + "unauthorized", Title: "Unauthorized", Status: 401,
		Detail: "a valid bearer token is required", Instance: "/dashboard/login"}, *first)

	// No token field at all, or not a form: the same 401.
	r := b.send("POST", "/dashboard/login", strings.NewReader(`{"token":"`+testToken+`"}`), nil, "Content-Type", "application/json")
	require.Equal(t, *first, requireProblem(t, http.StatusUnauthorized, r))
	r = b.send("POST", "/dashboard/login", nil, nil)
	require.Equal(t, *first, requireProblem(t, http.StatusUnauthorized, r))
}

func TestLoginRefusesAnotherOrigin(t *testing.T) {
	t.Parallel()
	srv, _ := setup(t)
	b := newBrowser(t, srv.URL)
	for _, h := range [][]string{
		{"Origin", "https://evil.example"},
		{"Origin", "null"},
		{"Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-site"},
	} {
		r := b.login(testToken, h...)
		p := requireProblem(t, http.StatusForbidden, r)
		require.Equal(t, api.ProblemTypeBase+"csrf", p.Type)
		require.Empty(t, r.Header.Values("Set-Cookie"))
	}
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	requireStatus(t, http.StatusSeeOther, b.login(testToken, "Origin", "http://"+u.Host, "Sec-Fetch-Site", "same-origin"))
}

// TestLoginUsesTheAuthenticator: a token check plugged in through Deps.Auth
// admits its own tokens, and the session's name is the actor of changes
// made with it.
func TestLoginUsesTheAuthenticator(t *testing.T) {
	t.Parallel()
	srv, bundle := setup(t, func(d *api.Deps) { d.Auth = staticTokens{"tok-alice": "alice"} })
	b := newBrowser(t, srv.URL)
	requireProblem(t, http.StatusUnauthorized, b.login(testToken))
	r := b.login("tok-alice")
	requireStatus(t, http.StatusSeeOther, r)
	c := sessionOf(t, r)
	page := b.send("GET", "/dashboard", nil, c)
	requireStatus(t, http.StatusOK, page)
	require.Contains(t, string(page.Body), "alice")
	csrf := string(csrfMetaRE.FindSubmatch(page.Body)[1])

	// Bearer tokens go through the same Authenticator.
	created := bundle.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/hook"},
		withHeader("Authorization", "Bearer tok-alice"))
	requireStatus(t, http.StatusCreated, created)
	e := decodeJSON[endpointJSON](t, created)
	requireProblem(t, http.StatusUnauthorized, bundle.do(t, "GET", "/v1/endpoints", nil))
	r = b.send("POST", "/v1/endpoints/"+e.ID+"/breaker/isolate", strings.NewReader(`{"reason":"maintenance"}`), c,
		"Content-Type", "application/json", api.CSRFHeader, csrf)
	requireStatus(t, http.StatusOK, r)
	trs, err := bundle.store.ListTransitions(context.Background(), e.ID, nil, 1)
	require.NoError(t, err)
	require.Len(t, trs, 1)
	require.Equal(t, "alice", trs[0].Actor)
	require.Equal(t, "maintenance", trs[0].Note)
}

type staticTokens map[string]string

func (s staticTokens) Authenticate(_ context.Context, token string) (string, bool) {
	name, ok := s[token]
	return name, ok
}

func TestBootstrapToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name, ok := api.BootstrapToken("s3cret").Authenticate(ctx, "s3cret")
	require.True(t, ok)
	require.Equal(t, api.BootstrapTokenName, name)
	for _, tok := range []string{"", "s3cre", "s3cret ", "S3CRET"} {
		_, ok := api.BootstrapToken("s3cret").Authenticate(ctx, tok)
		require.False(t, ok, tok)
	}
	_, ok = api.BootstrapToken("").Authenticate(ctx, "")
	require.False(t, ok, "no configured token admits nobody")
}

func TestSessionCookieAuthorizesTheAPI(t *testing.T) {
	t.Parallel()
	srv, bundle := setup(t)
	b := newBrowser(t, srv.URL)
	c, csrf := b.loggedIn()
	e := bundle.createEndpoint(t, "acme")

	for _, path := range []string{"/v1/endpoints", "/v1/breakers", "/v1/endpoints/" + e.ID + "/breaker", "/v1/endpoints/" + e.ID + "/stats"} {
		requireStatus(t, http.StatusOK, b.send("GET", path, nil, c))
		requireProblem(t, http.StatusUnauthorized, b.send("GET", path, nil, nil))
	}
	r := b.send("POST", "/v1/endpoints/"+e.ID+"/disable", nil, c, api.CSRFHeader, csrf)
	requireStatus(t, http.StatusOK, r)
	require.Equal(t, "disabled", decodeJSON[endpointJSON](t, r).Status)

	// A bearer header takes precedence over the cookie: a wrong one is 401.
	requireProblem(t, http.StatusUnauthorized, b.send("GET", "/v1/endpoints", nil, c, "Authorization", "Bearer wrong"))
}

func TestCSRFIsRequiredForCookieChanges(t *testing.T) {
	t.Parallel()
	srv, bundle := setup(t)
	b := newBrowser(t, srv.URL)
	c, csrf := b.loggedIn()
	_, otherCSRF := b.loggedIn()
	require.NotEqual(t, csrf, otherCSRF, "each session has its own token")
	e := bundle.createEndpoint(t, "acme")
	before := bundle.counts(t)

	path := "/v1/endpoints/" + e.ID + "/disable"
	for name, header := range map[string][]string{
		"missing":                 nil,
		"empty":                   {api.CSRFHeader, ""},
		"another session's token": {api.CSRFHeader, otherCSRF},
		"garbled":                 {api.CSRFHeader, "%%%"},
		"truncated":               {api.CSRFHeader, csrf[:len(csrf)-2]},
		"the session cookie":      {api.CSRFHeader, c.Value},
	} {
		t.Run(name, func(t *testing.T) {
			r := b.send("POST", path, nil, c, header...)
			p := requireProblem(t, http.StatusForbidden, r)
			require.Equal(t, api.ProblemTypeBase+"csrf", p.Type)
			require.Equal(t, "Forbidden", p.Title)
			require.Equal(t, path, p.Instance)
		})
	}
	for _, method := range []string{"DELETE", "PATCH"} {
		requireProblem(t, http.StatusForbidden, b.send(method, "/v1/endpoints/"+e.ID, strings.NewReader(`{"description":"x"}`), c, "Content-Type", "application/json"))
	}
	requireProblem(t, http.StatusForbidden, b.send("POST", "/v1/messages", strings.NewReader(`{"tenant_id":"acme","event_type":"a","payload":1}`), c, "Content-Type", "application/json"))
	require.Equal(t, before, bundle.counts(t), "nothing written without the CSRF token")
	got, err := bundle.store.GetEndpoint(context.Background(), e.ID)
	require.NoError(t, err)
	require.Equal(t, "enabled", got.Status)

	// Reads need none; the right token passes; a bearer request needs none.
	requireStatus(t, http.StatusOK, b.send("GET", "/v1/endpoints/"+e.ID, nil, c))
	requireStatus(t, http.StatusOK, b.send("POST", path, nil, c, api.CSRFHeader, csrf))
	requireStatus(t, http.StatusOK, b.send("POST", "/v1/endpoints/"+e.ID+"/enable", nil, nil, "Authorization", "Bearer "+testToken))
}

func TestSessionExpires(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{now: time.Now()}
	srv, _ := setup(t, func(d *api.Deps) { d.Now = clk.Now })
	b := newBrowser(t, srv.URL)
	c, _ := b.loggedIn()

	clk.Advance(api.SessionTTL - time.Minute)
	requireStatus(t, http.StatusOK, b.send("GET", "/v1/endpoints", nil, c))
	requireStatus(t, http.StatusOK, b.send("GET", "/dashboard", nil, c))

	clk.Advance(time.Minute)
	requireProblem(t, http.StatusUnauthorized, b.send("GET", "/v1/endpoints", nil, c))
	r := b.send("GET", "/dashboard/endpoints/ep_01KKNTQ1T8VQ9FF8Q7A3NCTRXR", nil, c)
	requireStatus(t, http.StatusSeeOther, r)
	require.Equal(t, "/dashboard/login?next=%2Fdashboard%2Fendpoints%2Fep_01KKNTQ1T8VQ9FF8Q7A3NCTRXR", r.Header.Get("Location"))
	// The login form, not a redirect loop.
	requireStatus(t, http.StatusOK, b.send("GET", "/dashboard/login", nil, c))
}

func TestSessionCookieCannotBeForged(t *testing.T) {
	t.Parallel()
	key := []byte(strings.Repeat("k", 32))
	srv, bundle := setup(t, func(d *api.Deps) { d.SessionKey = key })
	b := newBrowser(t, srv.URL)
	c, _ := b.loggedIn()
	requireStatus(t, http.StatusOK, b.send("GET", "/v1/endpoints", nil, c))

	payload, sig, ok := strings.Cut(c.Value, ".")
	require.True(t, ok)
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	require.NoError(t, err)
	forged := strings.Replace(string(raw), `"e":`, `"e":9`, 1) // a later expiry
	require.NotEqual(t, string(raw), forged)
	for name, value := range map[string]string{
		"changed payload": base64.RawURLEncoding.EncodeToString([]byte(forged)) + "." + sig,
		"no signature":    payload,
		"empty signature": payload + ".",
		"garbage":         "x.y",
		"empty":           "",
	} {
		t.Run(name, func(t *testing.T) {
			requireProblem(t, http.StatusUnauthorized, b.send("GET", "/v1/endpoints", nil, &http.Cookie{Name: api.SessionCookie, Value: value}))
		})
	}

	// A server with another key does not accept it; one with the same key
	// does. All are replicas of one database, which holds the session.
	replica := func(key []byte) func(*api.Deps) {
		return func(d *api.Deps) { d.SessionKey, d.Store = key, bundle.store }
	}
	other, _ := setup(t, replica([]byte(strings.Repeat("o", 32))))
	requireProblem(t, http.StatusUnauthorized, newBrowser(t, other.URL).send("GET", "/v1/endpoints", nil, c))
	same, _ := setup(t, replica(key))
	requireStatus(t, http.StatusOK, newBrowser(t, same.URL).send("GET", "/v1/endpoints", nil, c))
	random, _ := setup(t, replica(nil))
	// A random key per process.
	requireProblem(t, http.StatusUnauthorized, newBrowser(t, random.URL).send("GET", "/v1/endpoints", nil, c))
}

func TestLogout(t *testing.T) {
	t.Parallel()
	srv, _ := setup(t)
	b := newBrowser(t, srv.URL)
	c, csrf := b.loggedIn()

	p := requireProblem(t, http.StatusForbidden, b.send("POST", "/dashboard/logout", nil, c))
	require.Equal(t, api.ProblemTypeBase+"csrf", p.Type)

	r := b.send("POST", "/dashboard/logout", nil, c, api.CSRFHeader, csrf)
	requireStatus(t, http.StatusSeeOther, r)
	require.Equal(t, "/dashboard/login", r.Header.Get("Location"))
	cleared := sessionOf(t, r)
	require.Empty(t, cleared.Value)
	require.Negative(t, cleared.MaxAge, "the browser drops the cookie")
	require.True(t, cleared.HttpOnly)

	// Without a session, logout just clears.
	requireStatus(t, http.StatusSeeOther, b.send("POST", "/dashboard/logout", nil, nil))
}

func TestDashboardPages(t *testing.T) {
	t.Parallel()
	srv, _ := setup(t)
	b := newBrowser(t, srv.URL)

	r := b.send("GET", "/dashboard", nil, nil)
	requireStatus(t, http.StatusSeeOther, r)
	require.Equal(t, "/dashboard/login?next=%2Fdashboard", r.Header.Get("Location"))

	r = b.send("GET", "/dashboard/login?next=/dashboard/endpoints/ep_1", nil, nil)
	requireStatus(t, http.StatusOK, r)
	require.Equal(t, "text/html; charset=utf-8", r.Header.Get("Content-Type"))
	require.Contains(t, r.Header.Get("Content-Security-Policy"), "script-src 'self'")
	require.Contains(t, r.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	require.Equal(t, "nosniff", r.Header.Get("X-Content-Type-Options"))
	require.Equal(t, "DENY", r.Header.Get("X-Frame-Options"))
	require.Contains(t, string(r.Body), `name="token"`)
	require.Contains(t, string(r.Body), `value="/dashboard/endpoints/ep_1"`)
	r = b.send("GET", "/dashboard/login?next=https://evil.example", nil, nil)
	require.Contains(t, string(r.Body), `name="next" value="/dashboard"`)

	c, csrf := b.loggedIn()
	r = b.send("GET", "/dashboard/login", nil, c)
	requireStatus(t, http.StatusSeeOther, r)
	require.Equal(t, "/dashboard", r.Header.Get("Location"), "logged in already")
	for _, path := range []string{"/dashboard", "/dashboard/endpoints/ep_01KKNTQ1T8VQ9FF8Q7A3NCTRXR", "/dashboard/messages", "/dashboard/deliveries", "/dashboard/classes"} {
		r = b.send("GET", path, nil, c)
		requireStatus(t, http.StatusOK, r)
		require.Equal(t, "no-store", r.Header.Get("Cache-Control"))
		require.Contains(t, string(r.Body), csrf)
		require.NotContains(t, string(r.Body), "<script>", "no inline script: the CSP forbids it")
	}

	for name, ct := range map[string]string{
		"app.js": "text/javascript; charset=utf-8", "chart.js": "text/javascript; charset=utf-8", "login.js": "text/javascript; charset=utf-8",
		"style.css": "text/css; charset=utf-8", "favicon.svg": "image/svg+xml",
	} {
		r := b.send("GET", "/dashboard/assets/"+name, nil, nil)
		requireStatus(t, http.StatusOK, r)
		require.Equal(t, ct, r.Header.Get("Content-Type"), name)
		require.NotEmpty(t, r.Body)
		etag := r.Header.Get("ETag")
		require.NotEmpty(t, etag)
		requireStatus(t, http.StatusNotModified, b.send("GET", "/dashboard/assets/"+name, nil, nil, "If-None-Match", etag))
	}
	requireStatus(t, http.StatusNotFound, b.send("GET", "/dashboard/assets/nope.js", nil, nil))
	requireStatus(t, http.StatusNotFound, b.send("GET", "/dashboard/assets/", nil, nil))
}
