package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/store"
)

// operations returns "METHOD /path" -> operation for every documented operation.
func operations(doc *openapi3.T) map[string]*openapi3.Operation {
	out := map[string]*openapi3.Operation{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			out[method+" "+path] = op
		}
	}
	return out
}

func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPIDocument())
	require.NoError(t, err)
	require.Equal(t, "3.1.0", doc.OpenAPI)
	require.True(t, doc.IsOpenAPI31OrLater())
	// Validate picks the 3.1 rules (JSON Schema 2020-12) from the version;
	// examples and defaults are validated against their schemas too.
	require.NoError(t, doc.Validate(loader.Context, openapi3.EnableExamplesValidation(), openapi3.EnableSchemaDefaultsValidation()))

	ids := map[string]bool{}
	for key, op := range operations(doc) {
		t.Run(key, func(t *testing.T) {
			require.NotEmpty(t, op.OperationID)
			require.False(t, ids[op.OperationID], "duplicate operationId")
			ids[op.OperationID] = true
			require.NotEmpty(t, op.Summary)
			require.Len(t, op.Tags, 1)
			require.NotNil(t, op.Security, "every operation states its security")
			_, path, _ := strings.Cut(key, " ")
			has401 := op.Responses.Status(http.StatusUnauthorized) != nil
			if strings.HasPrefix(path, "/v1/") {
				require.Equal(t, openapi3.SecurityRequirements{{"bearerAuth": {}}}, *op.Security)
				require.True(t, has401, "a /v1 route documents 401")
				require.NotNil(t, op.Responses.Status(http.StatusServiceUnavailable), "a /v1 route documents 503")
				require.NotNil(t, op.Responses.Status(http.StatusInternalServerError), "a /v1 route documents 500")
			} else {
				require.Empty(t, *op.Security, "%s needs no token", path)
				require.False(t, has401)
			}
			for code, ref := range op.Responses.Map() {
				status, err := strconv.Atoi(code)
				require.NoError(t, err, "no default or range responses: every status is spelled out")
				if status >= 400 {
					require.Contains(t, ref.Value.Content, "application/problem+json", "%d is a problem", status)
					require.Len(t, ref.Value.Content, 1)
				}
			}
			if op.RequestBody != nil {
				require.True(t, op.RequestBody.Value.Required || optionalBody[op.OperationID],
					"a body is required, but where the operation is known to take an optional one")
				for _, code := range []int{400, 413, 415} {
					require.NotNil(t, op.Responses.Status(code), "an operation with a body documents %d", code)
				}
			}
		})
	}
}

// optionalBody names the operations whose request body may be left out:
// a breaker reset or isolation, whose body only carries a reason, and a
// tuning pass, whose body only narrows its range.
var optionalBody = map[string]bool{"resetBreaker": true, "isolateBreaker": true, "tuneClass": true}

func TestOpenAPICoversRoutes(t *testing.T) {
	t.Parallel()
	doc, _ := loadDocument(t)
	registered := map[string]bool{}
	err := chi.Walk(api.NewRouter(api.Deps{}), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		registered[method+" "+route] = true
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, registered)
	documented := map[string]bool{}
	for key := range operations(doc) {
		documented[key] = true
	}
	for key := range registered {
		// The dashboard's pages, static assets and cookie login/logout
		// answer HTML, CSS, JS and redirects to browsers: they are not API
		// operations (docs/dashboard.md describes them). The JSON it reads
		// is the documented /v1 API.
		if _, path, _ := strings.Cut(key, " "); strings.HasPrefix(path, "/dashboard") {
			continue
		}
		// So do the tenant portal's page, assets and cookie exchange
		// (docs/portal.md); the admin route opening its sessions is /v1.
		if _, path, _ := strings.Cut(key, " "); strings.HasPrefix(path, "/portal") {
			continue
		}
		require.True(t, documented[key], "route %s is registered but not in openapi.json", key)
	}
	for key := range documented {
		require.True(t, registered[key], "openapi.json documents %s, which is not registered", key)
	}
}

// example is one example value of the document and the schema it illustrates.
type example struct {
	where  string
	value  any
	schema *openapi3.Schema
	opts   []openapi3.SchemaValidationOption
}

// examples collects every example of the document: of request bodies, of
// responses (in operations and components) and of schemas.
func examples(doc *openapi3.T) []example {
	var out []example
	media := func(where string, content openapi3.Content, direction openapi3.SchemaValidationOption) {
		for ct, mt := range content {
			if mt.Example != nil {
				out = append(out, example{where + " " + ct, mt.Example, mt.Schema.Value, []openapi3.SchemaValidationOption{direction}})
			}
			for name, ex := range mt.Examples {
				out = append(out, example{where + " " + ct + " " + name, ex.Value.Value, mt.Schema.Value, []openapi3.SchemaValidationOption{direction}})
			}
		}
	}
	for key, op := range operations(doc) {
		if op.RequestBody != nil {
			media(key+" request", op.RequestBody.Value.Content, openapi3.VisitAsRequest())
		}
		for code, ref := range op.Responses.Map() {
			media(key+" "+code, ref.Value.Content, openapi3.VisitAsResponse())
		}
	}
	for name, ref := range doc.Components.Responses {
		media("components.responses."+name, ref.Value.Content, openapi3.VisitAsResponse())
	}
	for name, ref := range doc.Components.Schemas {
		for i, v := range ref.Value.Examples {
			out = append(out, example{fmt.Sprintf("components.schemas.%s.examples[%d]", name, i), v, ref.Value, nil})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].where < out[j].where })
	return out
}

func TestOpenAPIExamplesMatchSchemas(t *testing.T) {
	t.Parallel()
	doc, _ := loadDocument(t)
	all := examples(doc)
	for _, ex := range all {
		t.Run(ex.where, func(t *testing.T) {
			t.Parallel()
			opts := append([]openapi3.SchemaValidationOption{openapi3.EnableJSONSchema2020(), openapi3.MultiErrors()}, ex.opts...)
			require.NoError(t, ex.schema.VisitJSON(ex.value, opts...))
		})
	}

	// Every request body, every JSON response and every error response has
	// at least one example.
	has := map[string]bool{}
	for _, ex := range all {
		if i := strings.LastIndex(ex.where, " "); i > 0 {
			has[ex.where[:i]] = true
		}
	}
	for key, op := range operations(doc) {
		if op.RequestBody != nil {
			require.True(t, has[key+" request application/json"], "%s: no request example", key)
		}
		for code, ref := range op.Responses.Map() {
			for ct := range ref.Value.Content {
				if ref.Ref == "" {
					require.True(t, has[key+" "+code+" "+ct], "%s %s: no example", key, code)
				}
			}
		}
	}
	for name := range doc.Components.Responses {
		require.True(t, has["components.responses."+name+" application/problem+json"], "response %s: no example", name)
	}

	// A deliberately wrong example is caught: the check is not vacuous.
	bad := doc.Components.Schemas["Endpoint"].Value
	require.Error(t, bad.VisitJSON(map[string]any{"id": "ep_nope"}, openapi3.EnableJSONSchema2020()))
}

// TestOpenAPIRequestExamplesAreAccepted sends every request example of the
// document to the server: an example the server refuses would mislead.
func TestOpenAPIRequestExamplesAreAccepted(t *testing.T) {
	t.Parallel()
	// The recovery examples name fixed times: a century's window keeps them
	// in range.
	_, b := setup(t, func(d *api.Deps) { d.MaxRecoverWindow = 100 * 365 * 24 * time.Hour })
	for key, op := range operations(b.doc) {
		if op.RequestBody == nil {
			continue
		}
		method, path, _ := strings.Cut(key, " ")
		for name, ex := range op.RequestBody.Value.Content["application/json"].Examples {
			t.Run(key+" "+name, func(t *testing.T) {
				p := path
				switch {
				case strings.HasPrefix(p, "/v1/operational-endpoints/{id}"):
					p = strings.ReplaceAll(p, "{id}", b.createOpsEndpoint(t, map[string]any{"url": "https://ops.example/hook"}).ID)
				case strings.Contains(p, "{id}"):
					require.True(t, strings.HasPrefix(p, "/v1/endpoints/"), "no fixture for %s", p)
					p = strings.ReplaceAll(p, "{id}", b.createEndpoint(t, "acme").ID)
				}
				if strings.HasPrefix(p, "/v1/event-types/{name}") {
					// An event type example changes a registered type.
					name := "example." + strings.ToLower(name)
					requireStatus(t, http.StatusCreated, b.do(t, "POST", "/v1/event-types", map[string]any{"name": name}))
					p = strings.ReplaceAll(p, "{name}", name)
				}
				p = strings.ReplaceAll(p, "{tenant_id}", "acme")
				if strings.HasPrefix(p, "/v1/traffic-classes/{name}/") {
					// A tuning example runs on a built-in.
					p = strings.ReplaceAll(p, "{name}", "medium")
				}
				if strings.Contains(p, "{name}") {
					// A traffic class example names the class it creates or replaces.
					className, ok := ex.Value.Value.(map[string]any)["name"].(string)
					require.True(t, ok, "%s: the example names no class", name)
					p = strings.ReplaceAll(p, "{name}", className)
				}
				r := b.do(t, method, p, ex.Value.Value)
				require.Less(t, r.Status, 300, "%s", r.Body)
			})
		}
	}
}

// TestOpenAPIDescribesEveryResponse drives every operation of the document
// through the real server into every status it documents (the server's
// requests and responses are checked against the document on the way, by
// testBundle.do), then checks that no documented status went unseen: the
// document promises nothing the handlers do not do, and the handlers answer
// nothing the document does not promise.
func TestOpenAPIDescribesEveryResponse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// ok is a healthy server with fixtures.
	_, ok := setup(t)
	acme := ok.createEndpoint(t, "acme")
	gone := ok.createEndpoint(t, "acme")
	msg := ok.sendMessage(t, "acme", "invoice.paid")
	require.Len(t, msg.Deliveries, 2)
	pending, failed := msg.Deliveries[0], msg.Deliveries[1]
	ok.markFailed(t, failed, 1, 8)
	ok.seedAttempts(t, pending, store.Attempt{AttemptNumber: 1, Classification: "failure"})
	// A FIFO endpoint of its own tenant, blocked by a failed delivery.
	_, blocked := ok.blockedDelivery(t, "hooli")
	skip := "/v1/deliveries/" + blocked.ID + "/skip"
	// An endpoint of its own tenant with a failed delivery to recover.
	recovering := "/v1/endpoints/" + ok.createEndpoint(t, "initech").ID + "/recover"
	ok.markFailed(t, ok.sendMessage(t, "initech", "invoice.paid").Deliveries[0], 1, 8)
	lastHour := map[string]any{"since": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)}

	// broken answers 500 from every route that reads the database (its tables
	// are gone), and its readiness check fails.
	_, broken := setup(t, func(d *api.Deps) {
		d.Ready = func(context.Context) error { return errors.New("migration 0002 is pending") }
	})
	_, err := broken.db.Pool.Exec(ctx, `DROP TABLE endpoints, messages, deliveries, idempotency_keys, delivery_attempts,
		traffic_classes, class_changes, breaker_states, breaker_transitions, api_tokens, event_types, portal_sessions CASCADE`)
	require.NoError(t, err)

	// noRand cannot generate secrets.
	_, noRand := setup(t, func(d *api.Deps) { d.Rand = failingReader{} })

	// down has no database at all: nothing listens on its port.
	downPool, err := pgxpool.New(ctx, "postgres://hookd@127.0.0.1:1/hookd?sslmode=disable&connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(downPool.Close)
	_, down := setup(t, func(d *api.Deps) { d.Store = store.New(downPool, nil) })

	newEndpoint := map[string]any{"tenant_id": "acme", "url": "https://acme.example/new"}
	newMessage := map[string]any{"tenant_id": "acme", "event_type": "invoice.paid", "payload": map[string]any{}}
	patch := map[string]any{"description": "patched"}
	big := map[string]any{"tenant_id": "acme", "url": "https://acme.example/big", "description": strings.Repeat("x", 70<<10)}
	bigMessage := map[string]any{"tenant_id": "acme", "event_type": "a", "payload": strings.Repeat("x", 1<<20)}
	ep, dlv, m := "/v1/endpoints/"+acme.ID, "/v1/deliveries/"+pending.ID, "/v1/messages/"+msg.ID
	noEp, noDlv, noMsg := "/v1/endpoints/"+missingID("ep"), "/v1/deliveries/"+missingID("dlv"), "/v1/messages/"+missingID("msg")
	explicit := "/v1/endpoints/" + ok.createEndpointIn(t, "acme", "medium").ID
	ok.createClass(t, map[string]any{"name": "doomed"})
	newClass := map[string]any{"name": "bulk", "failure_rate_threshold": 0.8, "min_throughput": 100}
	tuned := map[string]any{"failure_rate_threshold": 0.6, "open_backoff": 2, "max_open_duration": "2m"}
	why := map[string]any{"reason": "maintenance"}
	// Tuning: two classes with a proposal (one to apply, one to reject) and
	// one with a pass already queued.
	for _, name := range []string{"applying", "rejecting", "locked"} {
		ok.createClass(t, map[string]any{"name": name})
	}
	ok.propose(t, "applying")
	ok.propose(t, "rejecting")
	ok.queueTune(t, "locked")
	week := map[string]any{"since": "2026-11-02T00:00:00Z", "until": "2026-11-09T00:00:00Z"}
	// Tenant tokens: acme's read-only one, and one of another tenant.
	acmeRO, _ := ok.scopedToken(t, store.NewAPIToken{Scope: store.ScopeTenant, Name: "acme-ro", TenantID: "acme", ReadOnly: true})
	globexTok, _ := ok.scopedToken(t, store.NewAPIToken{Scope: store.ScopeTenant, Name: "globex", TenantID: "globex"})
	asRO, asGlobex := withHeader("Authorization", "Bearer "+acmeRO), withHeader("Authorization", "Bearer "+globexTok)
	_, doomedTok := ok.scopedToken(t, store.NewAPIToken{Scope: store.ScopeAdmin, Name: "doomed"})
	newToken := map[string]any{"name": "acme-portal", "tenant_id": "acme", "expires_in": "720h"}
	noTok := "/v1/tokens/" + missingID("tok")
	r := ok.do(t, "POST", "/v1/tenants/acme/portal-sessions", map[string]any{})
	requireStatus(t, http.StatusCreated, r)
	endedPortal := "/v1/portal-sessions/" + decodeJSON[portalSessionJSON](t, r).ID
	noPortal := "/v1/portal-sessions/" + missingID("ps")
	bigWhy := map[string]any{"reason": strings.Repeat("x", 70<<10)}
	bigClass := map[string]any{"name": "huge", "padding": strings.Repeat("x", 70<<10)}
	// Event types: invoice.paid names a message (deleting it archives it),
	// doomed.type none.
	_, strict := setup(t, func(d *api.Deps) { d.StrictEventTypes = true })
	newType := map[string]any{"name": "order.shipped", "schema": map[string]any{"type": "object"}}
	for _, name := range []string{"invoice.paid", "doomed.type"} {
		requireStatus(t, http.StatusCreated, ok.do(t, "POST", "/v1/event-types", map[string]any{"name": name}))
	}
	typePatch := map[string]any{"description": "paid in full"}
	// Operational endpoints: one to read and change, one to delete.
	newOps := map[string]any{"url": "https://ops.example/hook", "event_types": []string{"breaker.*"}}
	opsEp := "/v1/operational-endpoints/" + ok.createOpsEndpoint(t, newOps).ID
	opsGone := "/v1/operational-endpoints/" + ok.createOpsEndpoint(t, newOps).ID
	noOps := "/v1/operational-endpoints/" + missingID("ep")
	bigType := map[string]any{"name": "big.type", "description": strings.Repeat("x", 70<<10)}

	type req struct {
		method, path string
		body         any
		want         int
		opts         []callOpt
	}
	plain := func(want int, method, path string, body any, opts ...callOpt) req {
		return req{method, path, body, want, opts}
	}
	calls := map[*testBundle][]req{
		ok: {
			plain(200, "GET", "/healthz", nil, withoutAuth()),
			plain(200, "GET", "/readyz", nil, withoutAuth()),
			plain(200, "GET", "/openapi.json", nil, withoutAuth()),

			plain(201, "POST", "/v1/endpoints", newEndpoint),
			plain(400, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "ftp://acme.example"}),
			plain(401, "POST", "/v1/endpoints", newEndpoint, withoutAuth()),
			plain(413, "POST", "/v1/endpoints", big, docBlind(sizeLimit)),
			plain(415, "POST", "/v1/endpoints", "tenant_id=acme", withContentType("application/x-www-form-urlencoded")),

			plain(200, "GET", "/v1/endpoints?tenant_id=acme&limit=1", nil),
			plain(400, "GET", "/v1/endpoints?limit=251", nil),
			plain(401, "GET", "/v1/endpoints", nil, withoutAuth()),

			plain(200, "GET", ep, nil),
			plain(401, "GET", ep, nil, withoutAuth()),
			plain(404, "GET", noEp, nil),

			plain(200, "PATCH", ep, patch),
			plain(400, "PATCH", ep, map[string]any{"event_types": []string{"inv*"}}),
			plain(401, "PATCH", ep, patch, withoutAuth()),
			plain(404, "PATCH", noEp, patch),
			plain(413, "PATCH", ep, map[string]any{"description": strings.Repeat("x", 70<<10)}, docBlind(sizeLimit)),
			plain(415, "PATCH", ep, patch, withContentType("text/plain")),

			plain(200, "POST", ep+"/disable", nil),
			plain(401, "POST", ep+"/disable", nil, withoutAuth()),
			plain(404, "POST", noEp+"/disable", nil),
			plain(200, "POST", ep+"/enable", nil),
			plain(401, "POST", ep+"/enable", nil, withoutAuth()),
			plain(404, "POST", noEp+"/enable", nil),

			plain(200, "GET", ep+"/secret", nil),
			plain(401, "GET", ep+"/secret", nil, withoutAuth()),
			plain(403, "GET", ep+"/secret", nil, asRO),
			plain(404, "GET", noEp+"/secret", nil),
			plain(200, "POST", ep+"/secret/rotate", nil),
			plain(401, "POST", ep+"/secret/rotate", nil, withoutAuth()),
			plain(404, "POST", noEp+"/secret/rotate", nil),

			plain(200, "GET", ep+"/attempts?outcome=failure", nil),
			plain(400, "GET", ep+"/attempts?outcome=teapot", nil),
			plain(401, "GET", ep+"/attempts", nil, withoutAuth()),
			plain(404, "GET", noEp+"/attempts", nil),

			plain(200, "GET", ep+"/stats?minutes=5", nil),
			plain(400, "GET", ep+"/stats?minutes=0", nil),
			plain(401, "GET", ep+"/stats", nil, withoutAuth()),
			plain(404, "GET", noEp+"/stats", nil),

			plain(202, "POST", "/v1/messages", newMessage),
			plain(400, "POST", "/v1/messages", map[string]any{"tenant_id": "acme", "event_type": "a..b", "payload": 1}),
			plain(401, "POST", "/v1/messages", newMessage, withoutAuth()),
			plain(413, "POST", "/v1/messages", bigMessage, docBlind(sizeLimit)),
			plain(415, "POST", "/v1/messages", newMessage, withContentType("application/xml")),

			plain(200, "POST", "/v1/messages/batch", map[string]any{"messages": []any{newMessage, map[string]any{"tenant_id": "acme"}}}),
			plain(400, "POST", "/v1/messages/batch", map[string]any{"messages": []any{}}),
			plain(401, "POST", "/v1/messages/batch", map[string]any{"messages": []any{newMessage}}, withoutAuth()),
			plain(403, "POST", "/v1/messages/batch", map[string]any{"messages": []any{newMessage}}, asGlobex),
			plain(413, "POST", "/v1/messages/batch", map[string]any{"messages": []any{strings.Repeat("x", 11<<20)}}, docBlind(sizeLimit)),
			plain(415, "POST", "/v1/messages/batch", map[string]any{"messages": []any{newMessage}}, withContentType("text/plain")),

			plain(200, "GET", "/v1/messages?tenant_id=acme&event_type=invoice.paid&include=payload&limit=1", nil),
			plain(400, "GET", "/v1/messages?since=noon", nil),
			plain(401, "GET", "/v1/messages", nil, withoutAuth()),
			plain(403, "GET", "/v1/messages?tenant_id=acme", nil, asGlobex),
			plain(200, "GET", "/v1/deliveries?status=failed,pending&endpoint_id="+acme.ID+"&limit=1", nil),
			plain(400, "GET", "/v1/deliveries?status=lost", nil),
			plain(401, "GET", "/v1/deliveries", nil, withoutAuth()),
			plain(403, "GET", "/v1/deliveries?tenant_id=acme", nil, asGlobex),

			plain(200, "GET", m, nil),
			plain(401, "GET", m, nil, withoutAuth()),
			plain(404, "GET", noMsg, nil),

			plain(200, "GET", dlv, nil),
			plain(401, "GET", dlv, nil, withoutAuth()),
			plain(404, "GET", noDlv, nil),
			plain(200, "GET", dlv+"/attempts?limit=1", nil),
			plain(400, "GET", dlv+"/attempts?since=yesterday", nil),
			plain(401, "GET", dlv+"/attempts", nil, withoutAuth()),
			plain(404, "GET", noDlv+"/attempts", nil),

			plain(202, "POST", "/v1/deliveries/"+failed.ID+"/retry", nil),
			plain(202, "POST", "/v1/deliveries/retry", map[string]any{"ids": []string{failed.ID, pending.ID}}),
			plain(400, "POST", "/v1/deliveries/retry", map[string]any{"ids": []string{}}),
			plain(401, "POST", "/v1/deliveries/retry", map[string]any{"ids": []string{failed.ID}}, withoutAuth()),
			plain(403, "POST", "/v1/deliveries/retry", map[string]any{"ids": []string{failed.ID}}, asRO),
			plain(413, "POST", "/v1/deliveries/retry", map[string]any{"ids": []string{strings.Repeat("x", 70<<10)}}, docBlind(sizeLimit)),
			plain(415, "POST", "/v1/deliveries/retry", map[string]any{"ids": []string{failed.ID}}, withContentType("text/plain")),
			plain(401, "POST", dlv+"/retry", nil, withoutAuth()),
			plain(404, "POST", noDlv+"/retry", nil),
			plain(409, "POST", dlv+"/retry", nil),

			plain(200, "POST", skip, nil),
			plain(401, "POST", skip, nil, withoutAuth()),
			plain(403, "POST", dlv+"/skip", nil, asRO),
			plain(404, "POST", noDlv+"/skip", nil),
			plain(409, "POST", skip, nil),

			plain(202, "POST", recovering, lastHour),
			plain(400, "POST", recovering, map[string]any{"since": "yesterday"}),
			plain(401, "POST", recovering, lastHour, withoutAuth()),
			plain(404, "POST", noEp+"/recover", lastHour),
			plain(409, "POST", recovering, lastHour),
			plain(413, "POST", recovering, map[string]any{"since": strings.Repeat("x", 70<<10)}, docBlind(sizeLimit)),
			plain(415, "POST", recovering, lastHour, withContentType("text/plain")),

			plain(204, "DELETE", "/v1/endpoints/"+gone.ID, nil),
			plain(401, "DELETE", ep, nil, withoutAuth()),
			plain(404, "DELETE", "/v1/endpoints/"+gone.ID, nil),

			plain(200, "GET", ep+"/breaker", nil),
			plain(401, "GET", ep+"/breaker", nil, withoutAuth()),
			plain(404, "GET", noEp+"/breaker", nil),
			plain(200, "POST", ep+"/breaker/isolate", why),
			plain(400, "POST", ep+"/breaker/isolate", map[string]any{"reason": strings.Repeat("r", 501)}),
			plain(401, "POST", ep+"/breaker/isolate", why, withoutAuth()),
			plain(404, "POST", noEp+"/breaker/isolate", nil),
			plain(413, "POST", ep+"/breaker/isolate", bigWhy, docBlind(sizeLimit)),
			plain(415, "POST", ep+"/breaker/isolate", why, withContentType("text/plain")),
			plain(200, "POST", ep+"/breaker/reset", nil),
			plain(400, "POST", ep+"/breaker/reset", map[string]any{"Reason": "x"}),
			plain(401, "POST", ep+"/breaker/reset", why, withoutAuth()),
			plain(404, "POST", noEp+"/breaker/reset", why),
			plain(413, "POST", ep+"/breaker/reset", bigWhy, docBlind(sizeLimit)),
			plain(415, "POST", ep+"/breaker/reset", why, withContentType("application/xml")),
			plain(200, "GET", "/v1/breakers?state=closed&limit=1", nil),
			plain(400, "GET", "/v1/breakers?state=ajar", nil),
			plain(401, "GET", "/v1/breakers", nil, withoutAuth()),

			plain(200, "GET", ep+"/traffic", nil),
			plain(401, "GET", ep+"/traffic", nil, withoutAuth()),
			plain(404, "GET", noEp+"/traffic", nil),
			plain(200, "POST", ep+"/traffic/reclassify", nil),
			plain(401, "POST", ep+"/traffic/reclassify", nil, withoutAuth()),
			plain(404, "POST", noEp+"/traffic/reclassify", nil),
			plain(409, "POST", explicit+"/traffic/reclassify", nil),

			plain(200, "GET", "/v1/traffic-classes", nil),
			plain(401, "GET", "/v1/traffic-classes", nil, withoutAuth()),
			plain(201, "POST", "/v1/traffic-classes", newClass),
			plain(400, "POST", "/v1/traffic-classes", map[string]any{"name": "bad", "window": "0s"}),
			plain(401, "POST", "/v1/traffic-classes", newClass, withoutAuth()),
			plain(409, "POST", "/v1/traffic-classes", newClass),
			plain(413, "POST", "/v1/traffic-classes", bigClass, docBlind(sizeLimit)),
			plain(415, "POST", "/v1/traffic-classes", newClass, withContentType("text/plain")),
			plain(200, "GET", "/v1/traffic-classes/medium", nil),
			plain(401, "GET", "/v1/traffic-classes/medium", nil, withoutAuth()),
			plain(404, "GET", "/v1/traffic-classes/nope", nil),
			plain(200, "PUT", "/v1/traffic-classes/medium", tuned),
			plain(201, "PUT", "/v1/traffic-classes/fresh", tuned),
			plain(400, "PUT", "/v1/traffic-classes/medium", map[string]any{"half_open_trials": 0}),
			plain(401, "PUT", "/v1/traffic-classes/medium", tuned, withoutAuth()),
			plain(413, "PUT", "/v1/traffic-classes/medium", bigClass, docBlind(sizeLimit)),
			plain(415, "PUT", "/v1/traffic-classes/medium", tuned, withContentType("multipart/form-data; boundary=x")),
			plain(204, "DELETE", "/v1/traffic-classes/doomed", nil),
			plain(401, "DELETE", "/v1/traffic-classes/bulk", nil, withoutAuth()),
			plain(404, "DELETE", "/v1/traffic-classes/doomed", nil),
			plain(409, "DELETE", "/v1/traffic-classes/medium", nil),

			plain(200, "GET", "/v1/traffic-classes/medium/recommendation", nil),
			plain(401, "GET", "/v1/traffic-classes/medium/recommendation", nil, withoutAuth()),
			plain(404, "GET", "/v1/traffic-classes/nope/recommendation", nil),
			plain(202, "POST", "/v1/traffic-classes/medium/tune", nil),
			plain(202, "POST", "/v1/traffic-classes/low/tune", week),
			plain(400, "POST", "/v1/traffic-classes/medium/tune", map[string]any{"since": "noon"}),
			plain(401, "POST", "/v1/traffic-classes/medium/tune", nil, withoutAuth()),
			plain(404, "POST", "/v1/traffic-classes/nope/tune", nil),
			plain(409, "POST", "/v1/traffic-classes/locked/tune", nil),
			plain(413, "POST", "/v1/traffic-classes/medium/tune", bigWhy, docBlind(sizeLimit)),
			plain(415, "POST", "/v1/traffic-classes/medium/tune", week, withContentType("text/plain")),
			plain(200, "GET", "/v1/traffic-classes/locked/tune", nil),
			plain(401, "GET", "/v1/traffic-classes/locked/tune", nil, withoutAuth()),
			plain(404, "GET", "/v1/traffic-classes/nope/tune", nil),
			plain(200, "POST", "/v1/traffic-classes/applying/recommendation/apply", nil),
			plain(401, "POST", "/v1/traffic-classes/applying/recommendation/apply", nil, withoutAuth()),
			plain(404, "POST", "/v1/traffic-classes/nope/recommendation/apply", nil),
			plain(409, "POST", "/v1/traffic-classes/applying/recommendation/apply", nil),
			plain(200, "POST", "/v1/traffic-classes/rejecting/recommendation/reject", nil),
			plain(401, "POST", "/v1/traffic-classes/rejecting/recommendation/reject", nil, withoutAuth()),
			plain(404, "POST", "/v1/traffic-classes/nope/recommendation/reject", nil),
			plain(409, "POST", "/v1/traffic-classes/rejecting/recommendation/reject", nil),
			plain(200, "GET", "/v1/traffic-classes/applying/tunings", nil),
			plain(401, "GET", "/v1/traffic-classes/applying/tunings", nil, withoutAuth()),
			plain(404, "GET", "/v1/traffic-classes/nope/tunings", nil),

			plain(201, "POST", "/v1/event-types", newType),
			plain(400, "POST", "/v1/event-types", map[string]any{"name": "a..b"}),
			plain(401, "POST", "/v1/event-types", newType, withoutAuth()),
			plain(403, "POST", "/v1/event-types", newType, asGlobex),
			plain(409, "POST", "/v1/event-types", newType),
			plain(413, "POST", "/v1/event-types", bigType, docBlind(sizeLimit)),
			plain(415, "POST", "/v1/event-types", newType, withContentType("text/plain")),
			plain(200, "GET", "/v1/event-types?limit=1", nil),
			plain(200, "GET", "/v1/event-types", nil, asGlobex),
			plain(400, "GET", "/v1/event-types?limit=0", nil),
			plain(401, "GET", "/v1/event-types", nil, withoutAuth()),
			plain(200, "GET", "/v1/event-types/invoice.paid", nil, asRO),
			plain(401, "GET", "/v1/event-types/invoice.paid", nil, withoutAuth()),
			plain(404, "GET", "/v1/event-types/no.such", nil),
			plain(200, "PATCH", "/v1/event-types/order.shipped", typePatch),
			plain(400, "PATCH", "/v1/event-types/order.shipped", map[string]any{"archived": "yes"}),
			plain(401, "PATCH", "/v1/event-types/order.shipped", typePatch, withoutAuth()),
			plain(403, "PATCH", "/v1/event-types/order.shipped", typePatch, asGlobex),
			plain(404, "PATCH", "/v1/event-types/no.such", typePatch),
			plain(413, "PATCH", "/v1/event-types/order.shipped", map[string]any{"description": strings.Repeat("x", 70<<10)}, docBlind(sizeLimit)),
			plain(415, "PATCH", "/v1/event-types/order.shipped", typePatch, withContentType("text/plain")),
			plain(200, "DELETE", "/v1/event-types/invoice.paid", nil),
			plain(204, "DELETE", "/v1/event-types/doomed.type", nil),
			plain(401, "DELETE", "/v1/event-types/doomed.type", nil, withoutAuth()),
			plain(403, "DELETE", "/v1/event-types/order.shipped", nil, asRO),
			plain(404, "DELETE", "/v1/event-types/doomed.type", nil),

			plain(201, "POST", "/v1/tokens", newToken),
			plain(400, "POST", "/v1/tokens", map[string]any{"name": "bootstrap"}),
			plain(401, "POST", "/v1/tokens", newToken, withoutAuth()),
			plain(403, "POST", "/v1/tokens", newToken, asGlobex),
			plain(409, "POST", "/v1/tokens", map[string]any{"name": "globex"}),
			plain(413, "POST", "/v1/tokens", map[string]any{"name": "big", "padding": strings.Repeat("x", 70<<10)}, docBlind(sizeLimit)),
			plain(201, "POST", "/v1/tenants/acme/portal-sessions", map[string]any{"read_only": true, "theme": map[string]any{"brand_color": "#0b6e4f"}}),
			plain(400, "POST", "/v1/tenants/acme/portal-sessions", map[string]any{"theme": map[string]any{"brand_color": "red"}}),
			plain(401, "POST", "/v1/tenants/acme/portal-sessions", map[string]any{}, withoutAuth()),
			plain(403, "POST", "/v1/tenants/acme/portal-sessions", map[string]any{}, asGlobex),
			plain(413, "POST", "/v1/tenants/acme/portal-sessions", map[string]any{"padding": strings.Repeat("x", 70<<10)}, docBlind(sizeLimit)),
			plain(415, "POST", "/v1/tenants/acme/portal-sessions", map[string]any{}, withContentType("text/plain")),
			plain(200, "GET", "/v1/tenants/acme/portal-sessions?limit=1", nil),
			plain(400, "GET", "/v1/tenants/acme/portal-sessions?after=tok_x", nil),
			plain(401, "GET", "/v1/tenants/acme/portal-sessions", nil, withoutAuth()),
			plain(403, "GET", "/v1/tenants/acme/portal-sessions", nil, asGlobex),
			plain(401, "DELETE", endedPortal, nil, withoutAuth()),
			plain(403, "DELETE", endedPortal, nil, asGlobex),
			plain(204, "DELETE", endedPortal, nil),
			plain(404, "DELETE", endedPortal, nil),
			plain(404, "DELETE", noPortal, nil),
			plain(415, "POST", "/v1/tokens", newToken, withContentType("text/plain")),
			plain(200, "GET", "/v1/tokens?limit=1", nil),
			plain(400, "GET", "/v1/tokens?after=ep_x", nil),
			plain(401, "GET", "/v1/tokens", nil, withoutAuth()),
			plain(403, "GET", "/v1/tokens", nil, asRO),
			plain(204, "DELETE", "/v1/tokens/"+doomedTok.ID, nil),
			plain(401, "DELETE", "/v1/tokens/"+doomedTok.ID, nil, withoutAuth()),
			plain(403, "DELETE", noTok, nil, asGlobex),
			plain(404, "DELETE", "/v1/tokens/"+doomedTok.ID, nil),

			plain(201, "POST", "/v1/operational-endpoints", newOps),
			plain(400, "POST", "/v1/operational-endpoints", map[string]any{"url": "https://ops.example/x", "event_types": []string{"invoice.paid"}}),
			plain(401, "POST", "/v1/operational-endpoints", newOps, withoutAuth()),
			plain(403, "POST", "/v1/operational-endpoints", newOps, asGlobex),
			plain(413, "POST", "/v1/operational-endpoints", map[string]any{"url": "https://ops.example/x", "description": strings.Repeat("x", 70<<10)}, docBlind(sizeLimit)),
			plain(415, "POST", "/v1/operational-endpoints", newOps, withContentType("text/plain")),
			plain(200, "GET", "/v1/operational-endpoints?limit=1", nil),
			plain(400, "GET", "/v1/operational-endpoints?limit=0", nil),
			plain(401, "GET", "/v1/operational-endpoints", nil, withoutAuth()),
			plain(403, "GET", "/v1/operational-endpoints", nil, asGlobex),
			plain(200, "GET", opsEp, nil),
			plain(401, "GET", opsEp, nil, withoutAuth()),
			plain(403, "GET", opsEp, nil, asGlobex),
			plain(404, "GET", noOps, nil),
			plain(200, "PATCH", opsEp, map[string]any{"event_types": []string{}}),
			plain(400, "PATCH", opsEp, map[string]any{"event_types": []string{"delivery.lost"}}),
			plain(401, "PATCH", opsEp, patch, withoutAuth()),
			plain(403, "PATCH", opsEp, patch, asGlobex),
			plain(404, "PATCH", noOps, patch),
			plain(413, "PATCH", opsEp, map[string]any{"description": strings.Repeat("x", 70<<10)}, docBlind(sizeLimit)),
			plain(415, "PATCH", opsEp, patch, withContentType("text/plain")),
			plain(204, "DELETE", opsGone, nil),
			plain(401, "DELETE", opsGone, nil, withoutAuth()),
			plain(403, "DELETE", opsEp, nil, asGlobex),
			plain(404, "DELETE", opsGone, nil),
			plain(200, "GET", opsEp+"/secret", nil),
			plain(401, "GET", opsEp+"/secret", nil, withoutAuth()),
			plain(403, "GET", opsEp+"/secret", nil, asGlobex),
			plain(404, "GET", noOps+"/secret", nil),

			// What tenant tokens are refused: admin-only routes, changes
			// with a read-only token, and naming another tenant.
			plain(403, "POST", "/v1/endpoints", newEndpoint, asGlobex),
			plain(403, "GET", "/v1/endpoints?tenant_id=acme", nil, asGlobex),
			plain(403, "PATCH", ep, patch, asRO),
			plain(403, "DELETE", ep, nil, asRO),
			plain(403, "POST", ep+"/disable", nil, asRO),
			plain(403, "POST", ep+"/enable", nil, asRO),
			plain(403, "POST", ep+"/secret/rotate", nil, asRO),
			plain(403, "POST", ep+"/breaker/isolate", why, asGlobex),
			plain(403, "POST", ep+"/breaker/reset", nil, asRO),
			plain(403, "GET", "/v1/breakers?tenant_id=acme", nil, asGlobex),
			plain(403, "POST", ep+"/traffic/reclassify", nil, asGlobex),
			plain(403, "POST", "/v1/messages", newMessage, asRO),
			plain(403, "POST", "/v1/deliveries/"+failed.ID+"/retry", nil, asRO),
			plain(403, "POST", ep+"/recover", lastHour, asRO),
			plain(403, "GET", "/v1/traffic-classes", nil, asRO),
			plain(403, "POST", "/v1/traffic-classes", newClass, asGlobex),
			plain(403, "GET", "/v1/traffic-classes/medium", nil, asGlobex),
			plain(403, "PUT", "/v1/traffic-classes/medium", tuned, asGlobex),
			plain(403, "DELETE", "/v1/traffic-classes/medium", nil, asGlobex),
			plain(403, "GET", "/v1/traffic-classes/medium/recommendation", nil, asRO),
			plain(403, "POST", "/v1/traffic-classes/medium/tune", nil, asGlobex),
			plain(403, "GET", "/v1/traffic-classes/locked/tune", nil, asRO),
			plain(403, "POST", "/v1/traffic-classes/medium/recommendation/apply", nil, asGlobex),
			plain(403, "POST", "/v1/traffic-classes/medium/recommendation/reject", nil, asGlobex),
			plain(403, "GET", "/v1/traffic-classes/medium/tunings", nil, asRO),
		},
		broken: {
			plain(503, "GET", "/readyz", nil, withoutAuth()),
		},
		noRand: {
			plain(500, "POST", "/v1/endpoints", newEndpoint),
		},
		strict: {
			plain(422, "POST", "/v1/messages", newMessage, docBlind("which event types are registered is not in the document")),
		},
	}
	// Every /v1 operation answers 500 when its query fails and 503 when the
	// database cannot be reached.
	for _, bad := range []struct {
		b    *testBundle
		want int
	}{{broken, 500}, {down, 503}} {
		calls[bad.b] = append(calls[bad.b], []req{
			plain(bad.want, "GET", "/v1/endpoints", nil),
			plain(bad.want, "GET", noEp, nil),
			plain(bad.want, "PATCH", noEp, patch),
			plain(bad.want, "DELETE", noEp, nil),
			plain(bad.want, "POST", noEp+"/disable", nil),
			plain(bad.want, "POST", noEp+"/enable", nil),
			plain(bad.want, "GET", noEp+"/secret", nil),
			plain(bad.want, "POST", noEp+"/secret/rotate", nil),
			plain(bad.want, "GET", noEp+"/attempts", nil),
			plain(bad.want, "GET", noEp+"/stats", nil),
			plain(bad.want, "POST", "/v1/messages", newMessage),
			plain(bad.want, "GET", noMsg, nil),
			plain(bad.want, "GET", "/v1/messages", nil),
			plain(bad.want, "POST", "/v1/messages/batch", map[string]any{"messages": []any{newMessage}}),
			plain(bad.want, "GET", "/v1/deliveries", nil),
			plain(bad.want, "GET", noDlv, nil),
			plain(bad.want, "GET", noDlv+"/attempts", nil),
			plain(bad.want, "POST", noDlv+"/retry", nil),
			plain(bad.want, "POST", noDlv+"/skip", nil),
			plain(bad.want, "POST", "/v1/deliveries/retry", map[string]any{"ids": []string{missingID("dlv")}}),
			plain(bad.want, "POST", noEp+"/recover", lastHour),
			plain(bad.want, "GET", noEp+"/breaker", nil),
			plain(bad.want, "POST", noEp+"/breaker/reset", nil),
			plain(bad.want, "POST", noEp+"/breaker/isolate", why),
			plain(bad.want, "GET", "/v1/breakers", nil),
			plain(bad.want, "GET", noEp+"/traffic", nil),
			plain(bad.want, "POST", noEp+"/traffic/reclassify", nil),
			plain(bad.want, "GET", "/v1/traffic-classes", nil),
			plain(bad.want, "POST", "/v1/traffic-classes", newClass),
			plain(bad.want, "GET", "/v1/traffic-classes/medium", nil),
			plain(bad.want, "PUT", "/v1/traffic-classes/medium", tuned),
			plain(bad.want, "DELETE", "/v1/traffic-classes/bulk", nil),
			plain(bad.want, "GET", "/v1/traffic-classes/medium/recommendation", nil),
			plain(bad.want, "POST", "/v1/traffic-classes/medium/tune", nil),
			plain(bad.want, "GET", "/v1/traffic-classes/locked/tune", nil),
			plain(bad.want, "POST", "/v1/traffic-classes/medium/recommendation/apply", nil),
			plain(bad.want, "POST", "/v1/traffic-classes/medium/recommendation/reject", nil),
			plain(bad.want, "GET", "/v1/traffic-classes/medium/tunings", nil),
			plain(bad.want, "POST", "/v1/event-types", newType),
			plain(bad.want, "GET", "/v1/event-types", nil),
			plain(bad.want, "GET", "/v1/event-types/invoice.paid", nil),
			plain(bad.want, "PATCH", "/v1/event-types/invoice.paid", typePatch),
			plain(bad.want, "DELETE", "/v1/event-types/invoice.paid", nil),
			plain(bad.want, "POST", "/v1/tokens", newToken),
			plain(bad.want, "GET", "/v1/tokens", nil),
			plain(bad.want, "DELETE", noTok, nil),
			plain(bad.want, "POST", "/v1/tenants/acme/portal-sessions", map[string]any{}),
			plain(bad.want, "GET", "/v1/tenants/acme/portal-sessions", nil),
			plain(bad.want, "DELETE", noPortal, nil),
			plain(bad.want, "POST", "/v1/operational-endpoints", newOps),
			plain(bad.want, "GET", "/v1/operational-endpoints", nil),
			plain(bad.want, "GET", noOps, nil),
			plain(bad.want, "PATCH", noOps, patch),
			plain(bad.want, "DELETE", noOps, nil),
			plain(bad.want, "GET", noOps+"/secret", nil),
		}...)
	}
	calls[broken] = append(calls[broken], plain(500, "POST", "/v1/endpoints", newEndpoint))
	calls[down] = append(calls[down],
		plain(503, "POST", "/v1/endpoints", newEndpoint),
		plain(503, "GET", "/readyz", nil, withoutAuth()),
		plain(200, "GET", "/healthz", nil, withoutAuth()),
	)

	seen := map[string]bool{}
	for b, reqs := range calls {
		for _, r := range reqs {
			res := b.do(t, r.method, r.path, r.body, r.opts...)
			require.Equalf(t, r.want, res.Status, "%s %s: %s", r.method, r.path, res.Body)
			if res.Status == http.StatusServiceUnavailable && strings.HasPrefix(r.path, "/v1/") {
				require.Equal(t, "1", res.Header.Get("Retry-After"))
			}
		}
		maps.Copy(seen, b.seen)
	}

	var missing []string
	for _, op := range operations(ok.doc) {
		for code := range op.Responses.Map() {
			if key := op.OperationID + " " + code; !seen[key] {
				missing = append(missing, key)
			}
		}
	}
	slices.Sort(missing)
	require.Empty(t, missing, "documented responses never produced")
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("entropy exhausted") }

// TestOpenAPIValidationCatchesDrift makes sure the document and kin-openapi
// together do reject drifted responses (an extra or missing field, a null
// where none is allowed, a wrong type, enum or format, an undocumented
// status or content type, a missing required header), so the checks in
// testBundle.do are not vacuous under OpenAPI 3.1.
func TestOpenAPIValidationCatchesDrift(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	created := b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/hook"})
	requireStatus(t, http.StatusCreated, created)
	var good map[string]any
	require.NoError(t, json.Unmarshal(created.Body, &good))

	vreq, err := http.NewRequest("POST", "/v1/endpoints", nil)
	require.NoError(t, err)
	route, params, err := b.router.FindRoute(vreq)
	require.NoError(t, err)
	validate := func(status int, header http.Header, body any) error {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route},
			Status:                 status, Header: header, Options: filterOptions(),
		}
		in.SetBodyBytes(raw)
		return openapi3filter.ValidateResponse(context.Background(), in)
	}
	// What b.do checks bodies with (schemas compiled once) sees the same.
	checkBody := func(status int, header http.Header, body any) error {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		return b.responseBodyError(route.Operation, &response{Status: status, Header: header, Body: raw})
	}
	header := http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/endpoints/" + good["id"].(string)}}
	require.NoError(t, validate(201, header, good))
	require.NoError(t, checkBody(201, header, good))

	with := func(k string, v any) map[string]any {
		m := maps.Clone(good)
		m[k] = v
		return m
	}
	without := func(k string) map[string]any {
		m := maps.Clone(good)
		delete(m, k)
		return m
	}
	for name, body := range map[string]map[string]any{
		"extra field":               with("secret", "whsec_x"),
		"missing field":             without("metadata"),
		"missing nullable field":    without("disabled_reason"),
		"null array":                with("event_types", nil),
		"null string":               with("url", nil),
		"wrong type":                with("disabled_reason", 5),
		"not in enum":               with("status", "paused"),
		"bad date-time":             with("created_at", "yesterday"),
		"bad id":                    with("id", "ep_1"),
		"non-string metadata value": with("metadata", map[string]any{"a": 1}),
	} {
		t.Run(name, func(t *testing.T) {
			require.Error(t, validate(201, header, body))
			require.Error(t, checkBody(201, header, body))
		})
	}
	require.NoError(t, validate(201, header, with("disabled_reason", "manual")), "a nullable field takes a string")
	require.NoError(t, checkBody(201, header, with("disabled_reason", "manual")))
	require.Error(t, checkBody(201, http.Header{"Content-Type": {"text/plain"}}, good), "wrong content type")
	require.Error(t, validate(http.StatusTeapot, header, good), "undocumented status")
	require.Error(t, validate(201, http.Header{"Content-Type": {"application/json"}}, good), "missing Location")
	require.Error(t, validate(201, http.Header{"Content-Type": {"text/plain"}, "Location": {"/x"}}, good), "wrong content type")
	problem := map[string]any{"type": "https://hookd.dev/problems/validation", "title": "Bad Request", "status": 400}
	problemHeader := http.Header{"Content-Type": {"application/problem+json"}}
	require.Error(t, validate(400, problemHeader, problem), "a 400 names its fields")
	require.Error(t, checkBody(400, problemHeader, problem))
	problem["errors"] = []any{map[string]any{"field": "url", "message": "bad"}}
	require.NoError(t, validate(400, problemHeader, problem))
	require.NoError(t, checkBody(400, problemHeader, problem))
	problem["status"] = 422
	require.Error(t, validate(400, problemHeader, problem), "status matches")
	require.Error(t, checkBody(400, problemHeader, problem))

	// And the request side: a body the document refuses.
	ct := "application/json"
	require.NoError(t, b.requestBodyError(route.Operation, ct, []byte(`{"tenant_id": "acme", "url": "https://acme.example/hook"}`), true))
	require.Error(t, b.requestBodyError(route.Operation, ct, []byte(`{"tenant_id": "acme"}`), true), "missing url")
	require.Error(t, b.requestBodyError(route.Operation, ct, []byte(`{"tenant_id": "acme", "url": 5}`), true), "wrong type")
	require.Error(t, b.requestBodyError(route.Operation, ct, nil, false), "a required body")
	require.Error(t, b.requestBodyError(route.Operation, "text/plain", []byte(`{}`), true), "wrong content type")
}

// TestOpenAPIBreakerAndClassDrift does for the breaker, traffic and
// traffic-class responses what TestOpenAPIValidationCatchesDrift does for
// an endpoint: real answers pass, and each kind of drift is caught.
func TestOpenAPIBreakerAndClassDrift(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	e := b.createEndpoint(t, "acme")
	requireStatus(t, http.StatusOK, b.do(t, "POST", "/v1/endpoints/"+e.ID+"/breaker/isolate", map[string]any{"reason": "x"}))
	header := http.Header{"Content-Type": {"application/json"}}
	// good returns the server's answer to a GET, and a check of a body
	// against the document as that GET's 200.
	good := func(t *testing.T, path string) (map[string]any, func(body any) error) {
		r := b.do(t, "GET", path, nil)
		requireStatus(t, http.StatusOK, r)
		var v map[string]any
		require.NoError(t, json.Unmarshal(r.Body, &v))
		vreq, err := http.NewRequest("GET", path, nil)
		require.NoError(t, err)
		route, params, err := b.router.FindRoute(vreq)
		require.NoError(t, err)
		return v, func(body any) error {
			raw, err := json.Marshal(body)
			require.NoError(t, err)
			in := &openapi3filter.ResponseValidationInput{
				RequestValidationInput: &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route},
				Status:                 200, Header: header, Options: filterOptions(),
			}
			in.SetBodyBytes(raw)
			return openapi3filter.ValidateResponse(context.Background(), in)
		}
	}
	with := func(m map[string]any, k string, v any) map[string]any {
		m = maps.Clone(m)
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	null := json.RawMessage("null")

	detail, validDetail := good(t, "/v1/endpoints/"+e.ID+"/breaker")
	require.NoError(t, validDetail(detail))
	list, validList := good(t, "/v1/breakers")
	require.NoError(t, validList(list))
	item := list["data"].([]any)[0].(map[string]any)
	class, validClass := good(t, "/v1/traffic-classes/medium")
	require.NoError(t, validClass(class))
	traffic, validTraffic := good(t, "/v1/endpoints/"+e.ID+"/traffic")
	require.NoError(t, validTraffic(traffic))
	transition := detail["transitions"].([]any)[0].(map[string]any)

	for name, err := range map[string]error{
		"breaker: unknown state":                validDetail(with(detail, "state", "ajar")),
		"breaker: missing now":                  validDetail(with(detail, "now", nil)),
		"breaker: null state":                   validDetail(with(detail, "state", null)),
		"breaker: empty transitions":            validDetail(with(detail, "transitions", []any{})),
		"breaker: rate over 1":                  validDetail(with(detail, "failure_rate", 1.5)),
		"breaker: class named auto":             validDetail(with(detail, "traffic_class", "auto")),
		"breaker: a window that is no duration": validDetail(with(detail, "window", "30")),
		"transition: unknown reason":            validDetail(with(detail, "transitions", []any{with(transition, "reason", "bored")})),
		"transition: missing note":              validDetail(with(detail, "transitions", []any{with(transition, "note", nil)})),
		"list: an item with transitions":        validList(with(list, "data", []any{with(item, "transitions", []any{transition})})),
		"list: bad cursor":                      validList(with(list, "next_cursor", "7")),
		"class: missing builtin":                validClass(with(class, "builtin", nil)),
		"class: a number for a duration":        validClass(with(class, "open_duration", 30)),
		"class: zero trials":                    validClass(with(class, "half_open_trials", 0)),
		"class: extra member":                   validClass(with(class, "traffic_class", "medium")),
		"traffic: implied auto":                 validTraffic(with(traffic, "implied_class", "auto")),
		"traffic: negative volume":              validTraffic(with(traffic, "quiet_rps", -1)),
		"traffic: missing changed":              validTraffic(with(traffic, "changed", nil)),
	} {
		require.Error(t, err, name)
	}
	require.NoError(t, validTraffic(with(traffic, "healthy_error_rate", 0.01)), "a nullable figure takes a number")
	require.NoError(t, validDetail(with(detail, "transitions", nil)), "a breaker that never moved has no transitions")
}

func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	r := b.do(t, "GET", "/openapi.json", nil, withoutAuth())
	requireStatus(t, http.StatusOK, r)
	require.Equal(t, "application/json", r.Header.Get("Content-Type"))
	require.Equal(t, api.OpenAPIDocument(), r.Body)
}
