package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/store"
)

// isolation is a server holding two tenants' objects: initech's (the ones
// a globex token must not reach; the name appears nowhere in the OpenAPI
// document or the dashboard's assets) and globex's own.
type isolation struct {
	b *testBundle
	// initech's endpoint, message, a failed delivery (so a retry would
	// succeed), its secret and an admin token's record.
	initechEndpoint endpointJSON
	initechMessage  messageJSON
	initechDelivery deliveryJSON
	initechSecret   string
	initechToken    store.APIToken
	// initechPortal is a portal session of initech's, opened by the admin.
	initechPortal string
	// globex's own endpoint and message.
	globexEndpoint endpointJSON
	globexMessage  messageJSON
	// opsEndpoint is the admin's operational endpoint.
	opsEndpoint opsEndpointJSON
	// globex and globexRO are tokens of tenant globex, read-write and
	// read-only.
	globex, globexRO string
}

func setupIsolation(t *testing.T) *isolation {
	t.Helper()
	_, b := setup(t)
	in := &isolation{b: b}
	in.initechEndpoint = b.createEndpoint(t, "initech")
	in.initechMessage = b.sendMessage(t, "initech", "invoice.paid")
	require.Len(t, in.initechMessage.Deliveries, 1)
	in.initechDelivery = in.initechMessage.Deliveries[0]
	b.seedAttempts(t, in.initechDelivery, store.Attempt{AttemptNumber: 1, Classification: "failure", ResponseExcerpt: "initech-excerpt"})
	b.markFailed(t, in.initechDelivery, 1, 1)
	r := b.do(t, "GET", "/v1/endpoints/"+in.initechEndpoint.ID+"/secret", nil)
	requireStatus(t, http.StatusOK, r)
	in.initechSecret = looseJSON[struct {
		Secret string `json:"secret"`
	}](t, r).Secret
	_, in.initechToken = b.storedToken(t, "initech-ops")
	r = b.do(t, "POST", "/v1/tenants/initech/portal-sessions", map[string]any{})
	requireStatus(t, http.StatusCreated, r)
	in.initechPortal = decodeJSON[portalSessionJSON](t, r).ID

	in.globexEndpoint = b.createEndpoint(t, "globex")
	in.globexMessage = b.sendMessage(t, "globex", "invoice.paid")
	in.globex, _ = b.scopedToken(t, store.NewAPIToken{Scope: store.ScopeTenant, Name: "globex-app", TenantID: "globex"})
	in.globexRO, _ = b.scopedToken(t, store.NewAPIToken{Scope: store.ScopeTenant, Name: "globex-ro", TenantID: "globex", ReadOnly: true})
	in.opsEndpoint = b.createOpsEndpoint(t, map[string]any{"url": "https://ops.example/hook"})
	return in
}

// markers are strings only initech's data holds.
func (in *isolation) markers() []string {
	return []string{"initech", in.initechEndpoint.ID, in.initechMessage.ID, in.initechDelivery.ID, in.initechSecret, in.initechToken.ID, "initech-ops", "initech-excerpt",
		in.initechPortal}
}

// digestIgnores are the columns of a table that a request may change
// without changing anything: a token's last_used_at, which any
// authenticated request may stamp.
var digestIgnores = map[string][]string{"api_tokens": {"last_used_at"}}

// digestTables are tables the fingerprint must hold, whatever the catalog
// says: a walk whose fingerprint missed one of them would not see a change
// to it.
var digestTables = []string{"endpoints", "messages", "message_payloads", "deliveries", "delivery_attempts", "idempotency_keys",
	"traffic_classes", "breaker_states", "breaker_transitions", "class_changes", "endpoint_events", "auth_streaks",
	"event_types", "api_tokens", "portal_sessions", "dashboard_sessions", "river_job"}

// digest fingerprints every table of the schema, read from the catalog (a
// partitioned table as a whole, with its partitions), by table: a request
// that changes any row of any table changes it, digestIgnores aside.
func (in *isolation) digest(t *testing.T) map[string]string {
	t.Helper()
	ctx := context.Background()
	rows, err := in.b.db.Pool.Query(ctx, `SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY 1`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Subset(t, tables, digestTables)
	out := make(map[string]string, len(tables))
	for _, table := range tables {
		ignore := digestIgnores[table]
		if ignore == nil {
			ignore = []string{}
		}
		var sum string
		q := `SELECT md5(coalesce(string_agg(r, '|' ORDER BY r), '')) FROM (SELECT (to_jsonb(t) - $1::text[])::text AS r FROM ` +
			pgx.Identifier{table}.Sanitize() + ` t) rows`
		require.NoError(t, in.b.db.Pool.QueryRow(ctx, q, ignore).Scan(&sum), table)
		out[table] = sum
	}
	return out
}

// pathFor fills a route pattern with initech's objects (or, with missing,
// with ids that name nothing).
func (in *isolation) pathFor(t *testing.T, pattern string, missing bool) string {
	t.Helper()
	p := pattern
	id := ""
	switch {
	case strings.HasPrefix(p, "/v1/endpoints/{id}"), strings.HasPrefix(p, "/dashboard/endpoints/{id}"):
		id = in.initechEndpoint.ID
		if missing {
			id = missingID("ep")
		}
	case strings.HasPrefix(p, "/v1/operational-endpoints/{id}"):
		id = in.opsEndpoint.ID
		if missing {
			id = missingID("ep")
		}
	case strings.HasPrefix(p, "/v1/messages/{id}"):
		id = in.initechMessage.ID
		if missing {
			id = missingID("msg")
		}
	case strings.HasPrefix(p, "/v1/deliveries/{id}"):
		id = in.initechDelivery.ID
		if missing {
			id = missingID("dlv")
		}
	case strings.HasPrefix(p, "/v1/tokens/{id}"):
		id = in.initechToken.ID
		if missing {
			id = missingID("tok")
		}
	case strings.HasPrefix(p, "/v1/portal-sessions/{id}"):
		id = in.initechPortal
		if missing {
			id = missingID("ps")
		}
	case strings.Contains(p, "{id}"):
		t.Fatalf("%s: no fixture for {id}: add the object this route names", pattern)
	}
	p = strings.ReplaceAll(p, "{id}", id)
	p = strings.ReplaceAll(p, "/traffic-classes/{name}", "/traffic-classes/medium")
	p = strings.ReplaceAll(p, "/event-types/{name}", "/event-types/invoice.paid")
	p = strings.ReplaceAll(p, "/assets/{name}", "/assets/app.js")
	p = strings.ReplaceAll(p, "/tenants/{tenant_id}/", "/tenants/initech/")
	require.NotContains(t, p, "{", "%s: no fixture for a path parameter", pattern)
	return p
}

// walkBodies are the bodies sent to routes that take one: each names
// initech's tenant where the route takes a tenant_id. A route missing here is
// sent no body.
var walkBodies = map[string]any{
	"POST /v1/endpoints":                           map[string]any{"tenant_id": "initech", "url": "https://initech.example/new"},
	"POST /v1/operational-endpoints":               map[string]any{"url": "https://initech.example/ops"},
	"PATCH /v1/operational-endpoints/{id}":         map[string]any{"url": "https://initech.example/ops"},
	"PATCH /v1/endpoints/{id}":                     map[string]any{"description": "taken over"},
	"POST /v1/endpoints/{id}/breaker/reset":        map[string]any{"reason": "x"},
	"POST /v1/endpoints/{id}/breaker/isolate":      map[string]any{"reason": "x"},
	"POST /v1/endpoints/{id}/recover":              map[string]any{"since": time.Now().Add(-time.Hour).Format(time.RFC3339)},
	"POST /v1/messages":                            map[string]any{"tenant_id": "initech", "event_type": "invoice.paid", "payload": map[string]any{}},
	"POST /v1/messages/batch":                      map[string]any{"messages": []any{map[string]any{"tenant_id": "initech", "event_type": "invoice.paid", "payload": map[string]any{}}}},
	"POST /v1/traffic-classes":                     map[string]any{"name": "mine"},
	"PUT /v1/traffic-classes/{name}":               map[string]any{"failure_rate_threshold": 0.9},
	"POST /v1/tokens":                              map[string]any{"name": "mine", "tenant_id": "initech"},
	"POST /v1/event-types":                         map[string]any{"name": "mine"},
	"POST /v1/tenants/{tenant_id}/portal-sessions": map[string]any{},
	"PATCH /v1/event-types/{name}":                 map[string]any{"archived": true},
}

// leaks returns the initech markers an answer holds, the request's own path
// (echoed in a problem's instance) aside.
func (in *isolation) leaks(a rawAnswer, path string) []string {
	body := bytes.ReplaceAll(a.body, []byte(path), nil)
	var out []string
	for _, m := range in.markers() {
		if bytes.Contains(body, []byte(m)) {
			out = append(out, m)
		}
	}
	if loc := a.header.Get("Location"); loc != "" {
		out = append(out, "Location: "+loc)
	}
	return out
}

// withoutInstance drops a problem's instance (the request path), so
// answers to different paths compare.
func withoutInstance(t *testing.T, body []byte) string {
	t.Helper()
	var p map[string]any
	require.NoError(t, json.Unmarshal(body, &p), "%s", body)
	delete(p, "instance")
	out, err := json.Marshal(p)
	require.NoError(t, err)
	return string(out)
}

// TestTenantTokenIsolationOnEveryRoute walks every route of the router with
// a token of tenant globex against tenant initech's objects, and fails on any
// answer that leaks initech's data or changes anything:
//   - every /v1 route has a scope rule (a route added without one fails here);
//   - no answer holds an initech id, secret, token, excerpt or tenant name;
//   - no change succeeds, and the database is unchanged after the walk;
//   - a route naming an initech object answers 404 or 403 exactly as it does
//     for an id that names nothing, so existence does not leak;
//   - any other route is admin-only (403) unless it is a tenant's list;
//   - routes outside /v1 answer the token as they answer no token at all;
//   - every tenant's list, run with each of its filters naming initech's
//     objects, answers globex's rows alone;
//   - no table changed: the fingerprint covers every table of the schema.
func TestTenantTokenIsolationOnEveryRoute(t *testing.T) {
	t.Parallel()
	in := setupIsolation(t)
	b := in.b
	rules := api.ScopeRules()
	before := in.digest(t)
	auth := "Bearer " + in.globex

	var routes []string
	require.NoError(t, chi.Walk(api.NewRouter(api.Deps{}), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routes = append(routes, method+" "+route)
		return nil
	}))
	require.Greater(t, len(routes), 30)
	for _, key := range routes {
		method, pattern, _ := strings.Cut(key, " ")
		t.Run(key, func(t *testing.T) {
			path := in.pathFor(t, pattern, false)
			body := walkBodies[method+" "+strings.TrimPrefix(pattern, "/v1")]
			if body == nil {
				body = walkBodies[key]
			}
			if bulk := bulkRoutes[key]; bulk != "" {
				// A bulk route names initech's object in its body, and
				// answers each item: the item's id echoed is the caller's
				// own input, and the item is refused as not found.
				a := b.raw(t, method, path, auth, map[string]any{bulk: []string{in.initechDelivery.ID}})
				echo := rawAnswer{status: a.status, header: a.header, body: bytes.ReplaceAll(a.body, []byte(in.initechDelivery.ID), nil)}
				require.Empty(t, in.leaks(echo, path), "%s %s answered %d: %s", method, path, a.status, a.body)
				require.Contains(t, rules, key)
				require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
				var res struct {
					Queued  []string `json:"queued"`
					Refused []struct {
						Problem api.Problem `json:"problem"`
					} `json:"refused"`
				}
				require.NoError(t, json.Unmarshal(a.body, &res))
				require.Empty(t, res.Queued)
				require.Len(t, res.Refused, 1)
				require.Equal(t, http.StatusNotFound, res.Refused[0].Problem.Status)
				return
			}
			a := b.raw(t, method, path, auth, body)
			require.Empty(t, in.leaks(a, path), "%s %s answered %d: %s", method, path, a.status, a.body)

			if !strings.HasPrefix(pattern, "/v1/") {
				// The token grants nothing outside /v1.
				anon := b.raw(t, method, path, "", body)
				require.Equal(t, anon.status, a.status, "%s", a.body)
				require.Equal(t, string(anon.body), string(a.body))
				return
			}
			require.Contains(t, rules, key, "every /v1 route is registered with a scope rule (routes.go)")
			if !safeMethod(method) || strings.Contains(pattern, "{") {
				require.Contains(t, []int{http.StatusForbidden, http.StatusNotFound}, a.status,
					"a change, or a route naming initech's object, is refused: %s", a.body)
			} else if tenantLists[key] || globalReads[key] {
				require.Equal(t, http.StatusOK, a.status, "a tenant's list is filtered, not refused: %s", a.body)
			} else {
				require.Equal(t, http.StatusForbidden, a.status, "a read that is neither a tenant's list nor of an object is admin-only: %s", a.body)
			}
			if strings.Contains(pattern, "{") {
				// The same answer as for an object that does not exist.
				mpath := in.pathFor(t, pattern, true)
				m := b.raw(t, method, mpath, auth, body)
				require.Equal(t, m.status, a.status, "existence leaks: %s vs %s", a.body, m.body)
				require.Equal(t, withoutInstance(t, m.body), withoutInstance(t, a.body))
			}
			if a.status == http.StatusForbidden {
				require.Equal(t, "application/problem+json", a.header.Get("Content-Type"))
			}
		})
	}
	in.walkListFilters(t, func(path string) rawAnswer { return b.raw(t, "GET", path, auth, nil) })
	require.Equal(t, before, in.digest(t), "nothing changed")
	for key := range rules {
		require.Contains(t, routes, key, "a rule for a route that is not registered")
	}
}

// tenantLists are the routes that answer a tenant token with its own
// tenant's part of a list: every other route without an object in its path
// is admin-only, so a new one answering a tenant token fails the walk
// until it is listed here.
var tenantLists = map[string]bool{"GET /v1/endpoints": true, "GET /v1/breakers": true, "GET /v1/messages": true, "GET /v1/deliveries": true}

// bulkRoutes name objects by id in the body member given: they answer a
// tenant token item by item, another tenant's object refused as not found.
var bulkRoutes = map[string]string{"POST /v1/deliveries/retry": "ids"}

// globalReads answer every token the same global data (the event type
// catalogue): nothing in them is a tenant's.
var globalReads = map[string]bool{"GET /v1/event-types": true}

func safeMethod(m string) bool { return m == "GET" || m == "HEAD" || m == "OPTIONS" }

// TestTenantTokenReachesItsOwnTenant: a tenant token does reach its
// tenant's objects, and lists show them alone.
func TestTenantTokenReachesItsOwnTenant(t *testing.T) {
	t.Parallel()
	in := setupIsolation(t)
	b := in.b
	as := withHeader("Authorization", "Bearer "+in.globex)
	ep := "/v1/endpoints/" + in.globexEndpoint.ID

	for _, list := range []string{"/v1/endpoints", "/v1/endpoints?tenant_id=globex", "/v1/breakers", "/v1/breakers?tenant_id=globex"} {
		r := b.do(t, "GET", list, nil, as)
		requireStatus(t, http.StatusOK, r)
		page := looseJSON[struct {
			Data []struct {
				TenantID string `json:"tenant_id"`
			} `json:"data"`
		}](t, r)
		require.Len(t, page.Data, 1, list)
		require.Equal(t, "globex", page.Data[0].TenantID, list)
	}
	// The admin's lists hold both tenants.
	r := b.do(t, "GET", "/v1/endpoints", nil)
	requireStatus(t, http.StatusOK, r)
	require.Len(t, looseJSON[struct {
		Data []endpointJSON `json:"data"`
	}](t, r).Data, 2)

	for _, path := range []string{ep, ep + "/secret", ep + "/attempts", ep + "/stats", ep + "/breaker", ep + "/traffic",
		"/v1/messages/" + in.globexMessage.ID, "/v1/deliveries/" + in.globexMessage.Deliveries[0].ID,
		"/v1/deliveries/" + in.globexMessage.Deliveries[0].ID + "/attempts"} {
		requireStatus(t, http.StatusOK, b.do(t, "GET", path, nil, as))
	}
	requireStatus(t, http.StatusOK, b.do(t, "PATCH", ep, map[string]any{"description": "mine"}, as))
	requireStatus(t, http.StatusOK, b.do(t, "POST", ep+"/disable", nil, as))
	requireStatus(t, http.StatusOK, b.do(t, "POST", ep+"/enable", nil, as))
	requireStatus(t, http.StatusOK, b.do(t, "POST", ep+"/secret/rotate", nil, as))
	requireStatus(t, http.StatusAccepted, b.do(t, "POST", "/v1/messages", map[string]any{"tenant_id": "globex", "event_type": "a", "payload": 1}, as))
	r = b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "globex", "url": "https://globex.example/2"}, as)
	requireStatus(t, http.StatusCreated, r)
	requireStatus(t, http.StatusNoContent, b.do(t, "DELETE", "/v1/endpoints/"+decodeJSON[endpointJSON](t, r).ID, nil, as))

	// Naming another tenant is refused, naming the field.
	for _, c := range []struct{ method, path string }{{"POST", "/v1/endpoints"}, {"POST", "/v1/messages"}} {
		body := map[string]any{"tenant_id": "initech", "url": "https://initech.example/x"}
		if c.path == "/v1/messages" {
			body = map[string]any{"tenant_id": "initech", "event_type": "a", "payload": 1}
		}
		requireFieldError(t, http.StatusForbidden, b.do(t, c.method, c.path, body, as), "tenant_id")
	}
	for _, list := range []string{"/v1/endpoints?tenant_id=initech", "/v1/breakers?tenant_id=initech"} {
		requireFieldError(t, http.StatusForbidden, b.do(t, "GET", list, nil, as), "tenant_id")
	}
}

// TestAdminOnlyRoutesRefuseTenantTokens: traffic classes, breaker
// operations (on the token's own endpoints too), reclassification and
// tokens answer 403 to a tenant token, and the same to the admin's
// read-only tokens when they change something or reveal a secret.
func TestAdminOnlyRoutesRefuseTenantTokens(t *testing.T) {
	t.Parallel()
	in := setupIsolation(t)
	b := in.b
	own := "/v1/endpoints/" + in.globexEndpoint.ID
	adminRO, _ := b.scopedToken(t, store.NewAPIToken{Scope: store.ScopeAdmin, Name: "grafana", ReadOnly: true})
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/v1/traffic-classes", nil},
		{"POST", "/v1/traffic-classes", map[string]any{"name": "mine"}},
		{"GET", "/v1/traffic-classes/medium", nil},
		{"PUT", "/v1/traffic-classes/medium", map[string]any{"failure_rate_threshold": 0.9}},
		{"DELETE", "/v1/traffic-classes/medium", nil},
		{"POST", own + "/breaker/reset", nil},
		{"POST", own + "/breaker/isolate", map[string]any{"reason": "x"}},
		{"POST", own + "/traffic/reclassify", nil},
		{"POST", "/v1/tokens", map[string]any{"name": "mine"}},
		{"GET", "/v1/tokens", nil},
		{"DELETE", "/v1/tokens/" + in.initechToken.ID, nil},
		{"POST", "/v1/operational-endpoints", map[string]any{"url": "https://globex.example/ops"}},
		{"GET", "/v1/operational-endpoints", nil},
		{"GET", "/v1/operational-endpoints/" + in.opsEndpoint.ID, nil},
		{"PATCH", "/v1/operational-endpoints/" + in.opsEndpoint.ID, map[string]any{"description": "mine"}},
		{"DELETE", "/v1/operational-endpoints/" + in.opsEndpoint.ID, nil},
		{"GET", "/v1/operational-endpoints/" + in.opsEndpoint.ID + "/secret", nil},
	} {
		a := b.raw(t, c.method, c.path, "Bearer "+in.globex, c.body)
		require.Equal(t, http.StatusForbidden, a.status, "%s %s: %s", c.method, c.path, a.body)
		var p api.Problem
		require.NoError(t, json.Unmarshal(a.body, &p))
		require.Equal(t, "this route needs an admin token", p.Detail)

		ro := b.raw(t, c.method, c.path, "Bearer "+adminRO, c.body)
		if c.method == "GET" && !strings.HasSuffix(c.path, "/secret") {
			require.Equal(t, http.StatusOK, ro.status, "an admin's read-only token reads: %s", ro.body)
		} else {
			require.Equal(t, http.StatusForbidden, ro.status, "%s %s: %s", c.method, c.path, ro.body)
		}
	}
}

// TestReadOnlyTenantTokenChangesNothing: a read-only tenant token reads
// its tenant's objects and is refused every change with 403, and its
// endpoints' secrets.
func TestReadOnlyTenantTokenChangesNothing(t *testing.T) {
	t.Parallel()
	in := setupIsolation(t)
	b := in.b
	before := in.digest(t)
	auth := "Bearer " + in.globexRO
	ep := "/v1/endpoints/" + in.globexEndpoint.ID
	dlv := "/v1/deliveries/" + in.globexMessage.Deliveries[0].ID
	b.markFailed(t, in.globexMessage.Deliveries[0], 1, 1)
	before = in.digest(t)

	var walked int
	require.NoError(t, chi.Walk(api.NewRouter(api.Deps{}), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if !strings.HasPrefix(route, "/v1/") || safeMethod(method) {
			return nil
		}
		walked++
		path := strings.ReplaceAll(route, "/v1/endpoints/{id}", ep)
		path = strings.ReplaceAll(path, "/v1/deliveries/{id}", dlv)
		path = strings.ReplaceAll(path, "{name}", "medium")
		path = strings.ReplaceAll(path, "{id}", missingID("tok"))
		// The bodies name the token's own tenant, so that only the token's
		// being read-only can refuse them.
		body := walkBodies[method+" "+route]
		if m, ok := body.(map[string]any); ok && m["tenant_id"] != nil {
			m = map[string]any{"tenant_id": "globex", "url": "https://globex.example/x", "event_type": "a", "payload": 1}
			if route == "/v1/tokens" {
				m = map[string]any{"name": "mine"}
			}
			body = m
		}
		if route == "/v1/messages/batch" {
			body = map[string]any{"messages": []any{map[string]any{"tenant_id": "globex", "event_type": "a", "payload": 1}}}
		}
		a := b.raw(t, method, path, auth, body)
		require.Equal(t, http.StatusForbidden, a.status, "%s %s: %s", method, path, a.body)
		return nil
	}))
	require.Greater(t, walked, 15)
	require.Equal(t, before, in.digest(t), "nothing changed")
	for _, path := range []string{"/v1/endpoints", ep, dlv} {
		require.Equal(t, http.StatusOK, b.raw(t, "GET", path, auth, nil).status, path)
	}
	require.Equal(t, http.StatusForbidden, b.raw(t, "GET", ep+"/secret", auth, nil).status)
}

// TestExpiredAndRevokedTokensAreRefusedWithinTheCacheTTL: a token that
// expires, or is revoked through DELETE /v1/tokens/{id}, is still served
// from the cache until TokenCacheTTL has passed and refused (401) from then.
func TestExpiredAndRevokedTokensAreRefusedWithinTheCacheTTL(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Now()}
	_, b := setup(t, func(d *api.Deps) { d.Now = clock.Now })
	ctx := context.Background()

	r := b.do(t, "POST", "/v1/tokens", map[string]any{"name": "expiring", "tenant_id": "globex", "expires_in": "1h"})
	requireStatus(t, http.StatusCreated, r)
	expiring := looseJSON[struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}](t, r)
	r = b.do(t, "POST", "/v1/tokens", map[string]any{"name": "revoked", "tenant_id": "globex"})
	requireStatus(t, http.StatusCreated, r)
	revoked := looseJSON[struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}](t, r)
	for _, tok := range []string{expiring.Token, revoked.Token} {
		require.Equal(t, http.StatusOK, b.raw(t, "GET", "/v1/endpoints", "Bearer "+tok, nil).status)
	}

	// The expiry comes due (by the database clock) and the other token is
	// revoked through the API.
	_, err := b.db.Pool.Exec(ctx, `UPDATE api_tokens SET created_at = now() - interval '2 hours', expires_at = now() - interval '1 second' WHERE id = $1`, expiring.ID)
	require.NoError(t, err)
	requireStatus(t, http.StatusNoContent, b.do(t, "DELETE", "/v1/tokens/"+revoked.ID, nil))
	requireProblem(t, http.StatusNotFound, b.do(t, "DELETE", "/v1/tokens/"+revoked.ID, nil))

	clock.Advance(api.TokenCacheTTL - time.Millisecond)
	for _, tok := range []string{expiring.Token, revoked.Token} {
		require.Equal(t, http.StatusOK, b.raw(t, "GET", "/v1/endpoints", "Bearer "+tok, nil).status, "trusted from the cache")
	}
	clock.Advance(time.Millisecond)
	for _, tok := range []string{expiring.Token, revoked.Token} {
		require.Equal(t, http.StatusUnauthorized, b.raw(t, "GET", "/v1/endpoints", "Bearer "+tok, nil).status, "refused once the TTL has passed")
	}
}

// TestTokensAPI: an admin creates, lists and revokes tokens; bad input is
// refused naming the field and writes nothing.
func TestTokensAPI(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	r := b.do(t, "POST", "/v1/tokens", map[string]any{"name": "initech-portal", "tenant_id": "initech", "expires_in": "720h", "read_only": true})
	requireStatus(t, http.StatusCreated, r)
	require.Equal(t, "no-store", r.Header.Get("Cache-Control"))
	created := decodeJSON[map[string]any](t, r)
	token := created["token"].(string)
	require.Regexp(t, `^hkd_[A-Za-z0-9_-]{43}$`, token)
	require.Equal(t, "tenant", created["scope"])
	require.Equal(t, "initech", created["tenant_id"])
	require.Equal(t, true, created["read_only"])
	expires, err := time.Parse(time.RFC3339Nano, created["expires_at"].(string))
	require.NoError(t, err)
	createdAt, err := time.Parse(time.RFC3339Nano, created["created_at"].(string))
	require.NoError(t, err)
	require.Equal(t, 720*time.Hour, expires.Sub(createdAt).Round(time.Second))

	// The new token works, as a read-only initech token.
	require.Equal(t, http.StatusOK, b.raw(t, "GET", "/v1/endpoints", "Bearer "+token, nil).status)
	require.Equal(t, http.StatusForbidden, b.raw(t, "POST", "/v1/endpoints", "Bearer "+token, map[string]any{"tenant_id": "initech", "url": "https://initech.example/x"}).status)

	r = b.do(t, "POST", "/v1/tokens", map[string]any{"name": "ci"})
	requireStatus(t, http.StatusCreated, r)
	admin := decodeJSON[map[string]any](t, r)
	require.Equal(t, "admin", admin["scope"])
	require.Nil(t, admin["tenant_id"])
	require.Nil(t, admin["expires_at"])

	r = b.do(t, "GET", "/v1/tokens?limit=1", nil)
	requireStatus(t, http.StatusOK, r)
	page := looseJSON[struct {
		Data       []map[string]any `json:"data"`
		NextCursor *string          `json:"next_cursor"`
	}](t, r)
	require.Len(t, page.Data, 1)
	require.NotNil(t, page.NextCursor)
	require.NotContains(t, string(r.Body), token, "a list never shows a token")
	r = b.do(t, "GET", "/v1/tokens?after="+url.QueryEscape(*page.NextCursor), nil)
	requireStatus(t, http.StatusOK, r)
	require.Len(t, looseJSON[struct {
		Data []map[string]any `json:"data"`
	}](t, r).Data, 1)

	before := b.counts(t)
	var n int
	count := func() int {
		require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM api_tokens`).Scan(&n))
		return n
	}
	tokens := count()
	for field, body := range map[string]map[string]any{
		"name":       {"name": "bad name"},
		"tenant_id":  {"name": "x", "tenant_id": ""},
		"expires_in": {"name": "x", "expires_in": "30s"},
		"read_only":  {"name": "x", "read_only": "yes"},
		"scope":      {"name": "x", "scope": "admin"},
	} {
		requireFieldError(t, http.StatusBadRequest, b.do(t, "POST", "/v1/tokens", body, lenientIf(field == "expires_in")...), field)
	}
	for _, bad := range []string{"1h-", "5", "100000h", "0"} {
		requireFieldError(t, http.StatusBadRequest, b.do(t, "POST", "/v1/tokens", map[string]any{"name": "x", "expires_in": bad}, docBlind("the duration's bounds have no schema")), "expires_in")
	}
	requireProblem(t, http.StatusConflict, b.do(t, "POST", "/v1/tokens", map[string]any{"name": "ci"}))
	require.Equal(t, tokens, count(), "nothing written")
	require.Equal(t, before, b.counts(t))

	requireStatus(t, http.StatusNoContent, b.do(t, "DELETE", "/v1/tokens/"+admin["id"].(string), nil))
	requireProblem(t, http.StatusNotFound, b.do(t, "DELETE", "/v1/tokens/tok_nope", nil))
}

func lenientIf(docBlindToo bool) []callOpt {
	if docBlindToo {
		return []callOpt{docBlind("the duration's bounds have no schema")}
	}
	return nil
}

// looseJSON decodes the fields of T from a response body, ignoring others.
func looseJSON[T any](t *testing.T, r *response) T {
	t.Helper()
	var v T
	require.NoErrorf(t, json.Unmarshal(r.Body, &v), "decode %T from %s", v, r.Body)
	return v
}

// listFilterValues are the values a filter walk gives each query parameter
// of a tenant's list, naming initech's objects wherever a parameter names
// one; after is the list's own cursor, an initech id of its kind.
func (in *isolation) listFilterValues(route string) map[string]string {
	after := map[string]string{
		"/v1/endpoints": in.initechEndpoint.ID, "/v1/breakers": in.initechEndpoint.ID,
		"/v1/messages": in.initechMessage.ID, "/v1/deliveries": in.initechDelivery.ID,
	}[route]
	return map[string]string{
		"tenant_id": "initech", "endpoint_id": in.initechEndpoint.ID, "message_id": in.initechMessage.ID,
		"event_type": "invoice.paid", "status": "failed,pending", "state": "closed", "include": "payload", "limit": "5",
		"since": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "until": time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
		"after": after,
	}
}

// walkListFilters runs every tenant's list with each query parameter the
// OpenAPI document gives it, one at a time and all at once, each naming
// initech's objects, as send (a globex principal): no answer holds
// initech's data; naming initech's tenant_id is refused (403 naming
// tenant_id), and any other filter answers globex's rows alone.
func (in *isolation) walkListFilters(t *testing.T, send func(path string) rawAnswer) {
	t.Helper()
	for route := range tenantLists {
		_, pattern, _ := strings.Cut(route, " ")
		op := in.b.doc.Paths.Find(pattern).GetOperation("GET")
		require.NotNil(t, op, route)
		values := in.listFilterValues(pattern)
		all := url.Values{}
		var queries []url.Values
		for _, p := range op.Parameters {
			if p.Value.In != "query" {
				continue
			}
			v, ok := values[p.Value.Name]
			require.True(t, ok && v != "", "%s: no filter value for %s: add one to listFilterValues", route, p.Value.Name)
			queries = append(queries, url.Values{p.Value.Name: {v}})
			if p.Value.Name != "tenant_id" {
				all.Set(p.Value.Name, v)
			}
		}
		require.NotEmpty(t, queries, route)
		for _, q := range append(queries, all) {
			path := pattern + "?" + q.Encode()
			a := send(path)
			require.Empty(t, in.leaks(a, path), "%s answered %d: %s", path, a.status, a.body)
			if q.Has("tenant_id") {
				require.Equal(t, http.StatusForbidden, a.status, "%s: %s", path, a.body)
				require.Contains(t, string(a.body), `"field":"tenant_id"`)
				continue
			}
			require.Equal(t, http.StatusOK, a.status, "%s: %s", path, a.body)
			var page struct {
				Data []struct {
					TenantID string `json:"tenant_id"`
				} `json:"data"`
			}
			require.NoError(t, json.Unmarshal(a.body, &page), "%s", a.body)
			for _, row := range page.Data {
				require.Equal(t, "globex", row.TenantID, path)
			}
		}
	}
}

// TestDigestSeesEveryTable: the walks' fingerprint changes when a row of
// any table changes (here tables an earlier fingerprint left out), and
// only that table's part does; a token's last use does not change it.
func TestDigestSeesEveryTable(t *testing.T) {
	t.Parallel()
	in := setupIsolation(t)
	ctx := context.Background()
	r := in.b.do(t, "POST", "/v1/messages", map[string]any{"tenant_id": "globex", "event_type": "a", "payload": 1, "idempotency_key": "k1"})
	requireStatus(t, http.StatusAccepted, r)
	for table, stmt := range map[string]string{
		"auth_streaks":       `INSERT INTO auth_streaks (endpoint_id, failures) VALUES ('ep_x', 1)`,
		"event_types":        `INSERT INTO event_types (name) VALUES ('digest.check')`,
		"portal_sessions":    `UPDATE portal_sessions SET read_only = NOT read_only`,
		"idempotency_keys":   `UPDATE idempotency_keys SET key = key || '-'`,
		"message_payloads":   `UPDATE message_payloads SET payload = '{"changed": true}'`,
		"dashboard_sessions": `INSERT INTO dashboard_sessions (id, name, expires_at) VALUES ('s', 'ops', now() + interval '1 hour')`,
	} {
		before := in.digest(t)
		tag, err := in.b.db.Pool.Exec(ctx, stmt)
		require.NoError(t, err, table)
		require.NotZero(t, tag.RowsAffected(), table)
		after := in.digest(t)
		require.NotEqual(t, before[table], after[table], table)
		delete(before, table)
		delete(after, table)
		require.Equal(t, before, after, "only %s changed", table)
	}
	before := in.digest(t)
	_, err := in.b.db.Pool.Exec(ctx, `UPDATE api_tokens SET last_used_at = now()`)
	require.NoError(t, err)
	require.Equal(t, before, in.digest(t), "a token's last use is no change")
}
