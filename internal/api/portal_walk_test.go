package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
)

// portalClient is a browser logged in to the portal: its cookie and the
// session's CSRF token, sent with every request.
type portalClient struct {
	br   *browser
	c    *http.Cookie
	csrf string
}

func (b *testBundle) portalClient(t *testing.T, tenant string, body map[string]any) portalClient {
	t.Helper()
	br := newBrowser(t, b.srv.URL)
	r := br.exchange(b.openPortal(t, tenant, body))
	requireStatus(t, http.StatusOK, r)
	return portalClient{br: br, c: portalCookieOf(t, r), csrf: decodeJSON[portalInfoJSON](t, r).CSRF}
}

func (p portalClient) send(t *testing.T, method, path string, body any) rawAnswer {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(buf)
	} else {
		rd = bytes.NewReader(nil)
	}
	r := p.br.send(method, path, rd, p.c, api.CSRFHeader, p.csrf, "Content-Type", "application/json")
	return rawAnswer{status: r.Status, header: r.Header, body: r.Body}
}

// TestPortalSessionSeesNothingOfAnotherTenant walks every /v1 route with a
// read-write portal session of globex (cookie and CSRF token, as the
// portal page sends them) against initech's objects, and every tenant's
// list with each of its filters: no answer holds initech's data, every
// change and every route naming initech's object is refused (403 or 404),
// and nothing in the database changes.
func TestPortalSessionSeesNothingOfAnotherTenant(t *testing.T) {
	t.Parallel()
	in := setupIsolation(t)
	b := in.b
	pc := b.portalClient(t, "globex", map[string]any{})
	before := in.digest(t)

	walked := 0
	require.NoError(t, chi.Walk(api.NewRouter(api.Deps{}), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if !strings.HasPrefix(route, "/v1/") {
			return nil
		}
		walked++
		key := method + " " + route
		path := in.pathFor(t, route, false)
		body := walkBodies[key]
		if bulk := bulkRoutes[key]; bulk != "" {
			a := pc.send(t, method, path, map[string]any{bulk: []string{in.initechDelivery.ID}})
			echo := rawAnswer{status: a.status, header: a.header, body: bytes.ReplaceAll(a.body, []byte(in.initechDelivery.ID), nil)}
			require.Empty(t, in.leaks(echo, path), "%s answered %d: %s", key, a.status, a.body)
			var res struct {
				Queued []string `json:"queued"`
			}
			require.NoError(t, json.Unmarshal(a.body, &res), "%s: %s", key, a.body)
			require.Empty(t, res.Queued, key)
			return nil
		}
		a := pc.send(t, method, path, body)
		require.Empty(t, in.leaks(a, path), "%s answered %d: %s", key, a.status, a.body)
		switch {
		case !safeMethod(method) || strings.Contains(route, "{"):
			require.Contains(t, []int{http.StatusForbidden, http.StatusNotFound}, a.status, "%s: %s", key, a.body)
		case tenantLists[key] || globalReads[key]:
			require.Equal(t, http.StatusOK, a.status, "%s: %s", key, a.body)
		default:
			require.Equal(t, http.StatusForbidden, a.status, "%s: %s", key, a.body)
		}
		return nil
	}))
	require.Greater(t, walked, 30)
	in.walkListFilters(t, func(path string) rawAnswer { return pc.send(t, "GET", path, nil) })
	require.Equal(t, before, in.digest(t), "nothing changed")

	// The session does see its own tenant.
	list := pc.send(t, "GET", "/v1/endpoints", nil)
	require.Equal(t, http.StatusOK, list.status)
	require.Contains(t, string(list.body), in.globexEndpoint.ID)
}

// TestReadOnlyPortalRefusesEveryChange walks every /v1 route that changes
// something with a read-only portal session of globex, on globex's own
// objects and with the session's CSRF token: each answers 403 and the
// database is unchanged; the session still reads its tenant.
func TestReadOnlyPortalRefusesEveryChange(t *testing.T) {
	t.Parallel()
	in := setupIsolation(t)
	b := in.b
	ep := "/v1/endpoints/" + in.globexEndpoint.ID
	dlv := "/v1/deliveries/" + in.globexMessage.Deliveries[0].ID
	b.markFailed(t, in.globexMessage.Deliveries[0], 1, 1)
	pc := b.portalClient(t, "globex", map[string]any{"read_only": true})
	before := in.digest(t)

	walked := 0
	require.NoError(t, chi.Walk(api.NewRouter(api.Deps{}), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if !strings.HasPrefix(route, "/v1/") || safeMethod(method) {
			return nil
		}
		walked++
		path := strings.ReplaceAll(route, "/v1/endpoints/{id}", ep)
		path = strings.ReplaceAll(path, "/v1/deliveries/{id}", dlv)
		path = strings.ReplaceAll(path, "/tenants/{tenant_id}/", "/tenants/globex/")
		path = strings.ReplaceAll(path, "{name}", "medium")
		path = strings.ReplaceAll(path, "{id}", missingID("tok"))
		body := walkBodies[method+" "+route]
		if m, ok := body.(map[string]any); ok && m["tenant_id"] != nil {
			body = map[string]any{"tenant_id": "globex", "url": "https://globex.example/x", "event_type": "a", "payload": 1}
		}
		if bulk := bulkRoutes[method+" "+route]; bulk != "" {
			body = map[string]any{bulk: []string{in.globexMessage.Deliveries[0].ID}}
		}
		a := pc.send(t, method, path, body)
		require.Equal(t, http.StatusForbidden, a.status, "%s %s: %s", method, path, a.body)
		require.Equal(t, "application/problem+json", a.header.Get("Content-Type"))
		return nil
	}))
	require.Greater(t, walked, 15)
	require.Equal(t, before, in.digest(t), "nothing changed")
	for _, path := range []string{"/v1/endpoints", ep, dlv} {
		require.Equal(t, http.StatusOK, pc.send(t, "GET", path, nil).status, path)
	}
}

// TestPortalRecoverWhileReleasingIsConflict: a portal session recovers its
// endpoint's failed deliveries; a second recovery while the first is still
// releasing them answers 409 problem+json, which the portal page puts in
// words, and queues nothing more.
func TestPortalRecoverWhileReleasingIsConflict(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	e := b.createEndpoint(t, "acme")
	for range 2 {
		b.markFailed(t, b.sendMessage(t, "acme", "invoice.paid").Deliveries[0], 1, 8)
	}
	pc := b.portalClient(t, "acme", map[string]any{})
	path := "/v1/endpoints/" + e.ID + "/recover"
	body := map[string]any{"since": time.Now().Add(-time.Hour).Format(time.RFC3339)}

	first := pc.send(t, "POST", path, body)
	require.Equal(t, http.StatusAccepted, first.status, "%s", first.body)
	require.JSONEq(t, `{"queued": 2, "payload_expired": 0}`, string(first.body))
	// One more failure, which the second recovery would otherwise take.
	b.markFailed(t, b.sendMessage(t, "acme", "invoice.paid").Deliveries[0], 1, 8)

	again := pc.send(t, "POST", path, body)
	require.Equal(t, http.StatusConflict, again.status, "%s", again.body)
	require.Equal(t, "application/problem+json", again.header.Get("Content-Type"))
	var p api.Problem
	require.NoError(t, json.Unmarshal(again.body, &p))
	require.Equal(t, http.StatusConflict, p.Status)
	var waiting, failed int
	require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE status = 'waiting'), count(*) FILTER (WHERE status = 'failed')
		FROM deliveries WHERE endpoint_id = $1`, e.ID).Scan(&waiting, &failed))
	require.Equal(t, []int{2, 1}, []int{waiting, failed}, "the refused recovery queued nothing")

	// The page turns this status into words rather than a bare error.
	js := newBrowser(t, b.srv.URL).send("GET", "/portal/assets/portal.js", nil, nil)
	requireStatus(t, http.StatusOK, js)
	require.Contains(t, string(js.Body), `e.status === 409`)
	require.Contains(t, string(js.Body), "A recovery of this endpoint is still releasing its deliveries")
}

// TestExpiredPortalSessionIsRefused: once a portal session's expiry has
// passed, its cookie reaches nothing: 401 on the API and on the page's
// session info, with no cache in between.
func TestExpiredPortalSessionIsRefused(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	e := b.createEndpoint(t, "acme")
	pc := b.portalClient(t, "acme", map[string]any{})
	require.Equal(t, http.StatusOK, pc.send(t, "GET", "/v1/endpoints/"+e.ID, nil).status)

	_, err := b.db.Pool.Exec(t.Context(), `UPDATE portal_sessions SET created_at = now() - interval '2 hours', expires_at = now() - interval '1 second' WHERE tenant_id = 'acme'`)
	require.NoError(t, err)
	for _, path := range []string{"/v1/endpoints/" + e.ID, "/v1/endpoints"} {
		a := pc.send(t, "GET", path, nil)
		require.Equal(t, http.StatusUnauthorized, a.status, "%s: %s", path, a.body)
	}
	require.Equal(t, http.StatusUnauthorized, pc.send(t, "POST", "/v1/endpoints/"+e.ID+"/disable", nil).status)
	requireProblem(t, http.StatusUnauthorized, pc.br.send("GET", "/portal/session", nil, pc.c))
	got, err := b.store.GetEndpoint(t.Context(), e.ID)
	require.NoError(t, err)
	require.Equal(t, "enabled", got.Status)
}
