package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
)

type opsEndpointJSON struct {
	ID             string    `json:"id"`
	URL            string    `json:"url"`
	Description    string    `json:"description"`
	EventTypes     []string  `json:"event_types"`
	Status         string    `json:"status"`
	DisabledReason *string   `json:"disabled_reason"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// createOpsEndpoint registers an operational endpoint through the API.
func (b *testBundle) createOpsEndpoint(t *testing.T, body map[string]any) opsEndpointJSON {
	t.Helper()
	r := b.do(t, "POST", "/v1/operational-endpoints", body)
	requireStatus(t, http.StatusCreated, r)
	return decodeJSON[opsEndpointJSON](t, r)
}

// opsEvent is one stored operational message: its event type, its body
// and the endpoints it was fanned out to.
type opsEvent struct {
	ID        string
	Type      string
	Body      map[string]any
	Endpoints []string
}

// opsEvents returns the messages of the operational tenant, oldest first.
func (b *testBundle) opsEvents(t *testing.T) []opsEvent {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `
		SELECT m.id, m.event_type, p.payload::text,
			coalesce((SELECT array_agg(d.endpoint_id ORDER BY d.endpoint_id) FROM deliveries d WHERE d.message_id = m.id AND d.job_id IS NOT NULL), '{}')
		FROM messages m JOIN message_payloads p ON p.message_id = m.id
		WHERE m.tenant_id = $1 ORDER BY m.created_at, m.id`, store.OperationalTenant)
	require.NoError(t, err)
	defer rows.Close()
	var out []opsEvent
	for rows.Next() {
		var ev opsEvent
		var body string
		require.NoError(t, rows.Scan(&ev.ID, &ev.Type, &body, &ev.Endpoints))
		require.NoError(t, json.Unmarshal([]byte(body), &ev.Body))
		out = append(out, ev)
	}
	require.NoError(t, rows.Err())
	return out
}

func TestOperationalEndpointsCRUD(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	customer := b.createEndpoint(t, "acme")

	ops := b.createOpsEndpoint(t, map[string]any{"url": "https://ops.example/hook", "description": "pager", "event_types": []string{"breaker.*", "endpoint.disabled"}})
	require.Equal(t, "https://ops.example/hook", ops.URL)
	require.Equal(t, []string{"breaker.*", "endpoint.disabled"}, ops.EventTypes)
	require.Equal(t, store.EndpointEnabled, ops.Status)
	r := b.do(t, "GET", "/v1/operational-endpoints/"+ops.ID+"/secret", nil)
	requireStatus(t, http.StatusOK, r)
	require.True(t, strings.HasPrefix(looseJSON[struct {
		Secret string `json:"secret"`
	}](t, r).Secret, "whsec_"), "a generated secret")

	const chosen = "whsec_msjf7v0OfquvHIs+UdGF3AHaYnvD2u/JR0ut+az8E3U="
	all := b.createOpsEndpoint(t, map[string]any{"url": "https://ops.example/all", "secret": chosen})
	require.Equal(t, []string{}, all.EventTypes, "no event_types: every event")
	r = b.do(t, "GET", "/v1/operational-endpoints/"+all.ID+"/secret", nil)
	requireStatus(t, http.StatusOK, r)
	require.Equal(t, chosen, looseJSON[struct {
		Secret string `json:"secret"`
	}](t, r).Secret)

	r = b.do(t, "GET", "/v1/operational-endpoints?limit=1", nil)
	requireStatus(t, http.StatusOK, r)
	page := decodeJSON[listJSON[opsEndpointJSON]](t, r)
	require.Len(t, page.Data, 1)
	require.Equal(t, ops.ID, page.Data[0].ID)
	require.NotNil(t, page.NextCursor)
	r = b.do(t, "GET", "/v1/operational-endpoints?after="+*page.NextCursor, nil)
	requireStatus(t, http.StatusOK, r)
	require.Len(t, decodeJSON[listJSON[opsEndpointJSON]](t, r).Data, 1)

	// The two kinds never mix: the customer routes do not see operational
	// endpoints, the operational routes do not see customer ones.
	r = b.do(t, "GET", "/v1/endpoints", nil)
	requireStatus(t, http.StatusOK, r)
	listed := decodeJSON[listJSON[endpointJSON]](t, r).Data
	require.Len(t, listed, 1)
	require.Equal(t, customer.ID, listed[0].ID)
	r = b.do(t, "GET", "/v1/breakers", nil)
	requireStatus(t, http.StatusOK, r)
	require.NotContains(t, string(r.Body), ops.ID)
	for _, path := range []string{"", "/secret", "/stats", "/breaker", "/attempts"} {
		requireStatus(t, http.StatusNotFound, b.do(t, "GET", "/v1/endpoints/"+ops.ID+path, nil))
	}
	requireStatus(t, http.StatusNotFound, b.do(t, "PATCH", "/v1/endpoints/"+ops.ID, map[string]any{"description": "x"}))
	requireStatus(t, http.StatusNotFound, b.do(t, "DELETE", "/v1/endpoints/"+ops.ID, nil))
	requireStatus(t, http.StatusNotFound, b.do(t, "GET", "/v1/operational-endpoints/"+customer.ID, nil))
	requireStatus(t, http.StatusNotFound, b.do(t, "PATCH", "/v1/operational-endpoints/"+customer.ID, map[string]any{"description": "x"}))
	requireStatus(t, http.StatusNotFound, b.do(t, "DELETE", "/v1/operational-endpoints/"+customer.ID, nil))
	requireStatus(t, http.StatusNotFound, b.do(t, "GET", "/v1/operational-endpoints/"+customer.ID+"/secret", nil))

	r = b.do(t, "PATCH", "/v1/operational-endpoints/"+ops.ID, map[string]any{"event_types": []string{}, "url": "https://ops.example/moved"})
	requireStatus(t, http.StatusOK, r)
	patched := decodeJSON[opsEndpointJSON](t, r)
	require.Equal(t, []string{}, patched.EventTypes)
	require.Equal(t, "https://ops.example/moved", patched.URL)
	require.Equal(t, "pager", patched.Description, "fields not given stay")
	r = b.do(t, "GET", "/v1/operational-endpoints/"+ops.ID, nil)
	requireStatus(t, http.StatusOK, r)
	require.Equal(t, patched, decodeJSON[opsEndpointJSON](t, r))

	requireStatus(t, http.StatusNoContent, b.do(t, "DELETE", "/v1/operational-endpoints/"+ops.ID, nil))
	requireStatus(t, http.StatusNotFound, b.do(t, "GET", "/v1/operational-endpoints/"+ops.ID, nil))
	requireStatus(t, http.StatusNotFound, b.do(t, "DELETE", "/v1/operational-endpoints/"+ops.ID, nil))
	requireStatus(t, http.StatusOK, b.do(t, "GET", "/v1/endpoints/"+customer.ID, nil))
}

func TestOperationalEndpointsRejectBadInput(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ops := b.createOpsEndpoint(t, map[string]any{"url": "https://ops.example/hook"})
	for _, c := range []struct {
		name, method string
		body         map[string]any
		field        string
	}{
		{"no url", "POST", map[string]any{"event_types": []string{"*"}}, "url"},
		{"not http", "POST", map[string]any{"url": "ftp://ops.example"}, "url"},
		{"a customer event type", "POST", map[string]any{"url": "https://ops.example/a", "event_types": []string{"invoice.paid"}}, "event_types[0]"},
		{"an unknown wildcard", "POST", map[string]any{"url": "https://ops.example/a", "event_types": []string{"breaker.*", "invoice.*"}}, "event_types[1]"},
		{"a bad secret", "POST", map[string]any{"url": "https://ops.example/a", "secret": "hunter2"}, "secret"},
		{"a long description", "POST", map[string]any{"url": "https://ops.example/a", "description": strings.Repeat("x", 2000)}, "description"},
		{"patch: an empty url", "PATCH", map[string]any{"url": ""}, "url"},
		{"patch: a bad type", "PATCH", map[string]any{"event_types": []string{"delivery.lost"}}, "event_types[0]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := "/v1/operational-endpoints"
			if c.method == "PATCH" {
				path += "/" + ops.ID
			}
			requireFieldError(t, http.StatusBadRequest, b.do(t, c.method, path, c.body), c.field)
		})
	}
	r := b.do(t, "GET", "/v1/operational-endpoints", nil)
	requireStatus(t, http.StatusOK, r)
	require.Len(t, decodeJSON[listJSON[opsEndpointJSON]](t, r).Data, 1, "no bad request stored anything")
	for _, f := range []string{"*", "endpoint.*", "breaker.*", "delivery.*", "endpoint.created", "delivery.recovered"} {
		require.True(t, store.ValidOperationalFilter(f), f)
	}
	for _, f := range []string{"", "endpoint", "breaker.opened.*", "invoice.paid", "delivery.*.*"} {
		require.False(t, store.ValidOperationalFilter(f), f)
	}
}

func TestOperationalRoutesRefuseTenantTokens(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ops := b.createOpsEndpoint(t, map[string]any{"url": "https://ops.example/hook"})
	tok, _ := b.scopedToken(t, store.NewAPIToken{Scope: store.ScopeTenant, Name: "acme-app", TenantID: "acme"})
	as := withHeader("Authorization", "Bearer "+tok)
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/operational-endpoints", map[string]any{"url": "https://acme.example/ops"}},
		{"GET", "/v1/operational-endpoints", nil},
		{"GET", "/v1/operational-endpoints/" + ops.ID, nil},
		{"PATCH", "/v1/operational-endpoints/" + ops.ID, map[string]any{"description": "mine"}},
		{"DELETE", "/v1/operational-endpoints/" + ops.ID, nil},
		{"GET", "/v1/operational-endpoints/" + ops.ID + "/secret", nil},
	} {
		p := requireProblem(t, http.StatusForbidden, b.do(t, c.method, c.path, c.body, as))
		require.Equal(t, "this route needs an admin token", p.Detail, "%s %s", c.method, c.path)
	}
	requireStatus(t, http.StatusOK, b.do(t, "GET", "/v1/operational-endpoints/"+ops.ID, nil))
}

// TestEndpointChangesEmitOperationalEvents: each endpoint write of the API
// stores, in its transaction, one message of the operational tenant per
// event, fanned out with a job to each operational endpoint subscribed;
// nothing is emitted for a write that failed, nor before an operational
// endpoint exists, nor about an operational endpoint.
func TestEndpointChangesEmitOperationalEvents(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	before := b.createEndpoint(t, "acme")
	require.Empty(t, b.opsEvents(t), "no operational endpoint: no event")

	all := b.createOpsEndpoint(t, map[string]any{"url": "https://ops.example/all"})
	breakers := b.createOpsEndpoint(t, map[string]any{"url": "https://ops.example/breakers", "event_types": []string{"breaker.*"}})

	ep := b.createEndpoint(t, "acme")
	requireStatus(t, http.StatusOK, b.do(t, "PATCH", "/v1/endpoints/"+ep.ID, map[string]any{"description": "billing"}))
	requireStatus(t, http.StatusOK, b.do(t, "POST", "/v1/endpoints/"+ep.ID+"/disable", nil))
	requireStatus(t, http.StatusOK, b.do(t, "POST", "/v1/endpoints/"+ep.ID+"/enable", nil))
	requireStatus(t, http.StatusOK, b.do(t, "POST", "/v1/endpoints/"+ep.ID+"/breaker/isolate", map[string]any{"reason": "maintenance"}))
	requireStatus(t, http.StatusOK, b.do(t, "POST", "/v1/endpoints/"+ep.ID+"/breaker/reset", nil))
	msg := b.sendMessage(t, "acme", "invoice.paid")
	var dlv deliveryJSON
	for _, d := range msg.Deliveries {
		if d.EndpointID == ep.ID {
			dlv = d
		}
	}
	require.NotEmpty(t, dlv.ID)
	b.markFailed(t, dlv, 1, 3)
	requireStatus(t, http.StatusNoContent, b.do(t, "DELETE", "/v1/endpoints/"+ep.ID, nil))
	// A write that fails emits nothing.
	requireFieldError(t, http.StatusBadRequest, b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/x", "traffic_class": "nope"},
		docBlind("which traffic classes exist is not in the document")), "traffic_class")
	requireStatus(t, http.StatusNotFound, b.do(t, "PATCH", "/v1/endpoints/"+ep.ID, map[string]any{"description": "gone"}))

	events := b.opsEvents(t)
	var types []string
	for _, ev := range events {
		types = append(types, ev.Type)
		require.Equal(t, ev.Type, ev.Body["type"])
		ts, err := time.Parse(time.RFC3339Nano, ev.Body["timestamp"].(string))
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), ts, time.Hour)
		data := ev.Body["data"].(map[string]any)
		require.Equal(t, ep.ID, data["endpoint_id"], ev.Type)
		require.Equal(t, "acme", data["tenant_id"], ev.Type)
		want := []string{all.ID}
		if strings.HasPrefix(ev.Type, "breaker.") {
			want = []string{all.ID, breakers.ID}
			if all.ID > breakers.ID {
				want = []string{breakers.ID, all.ID}
			}
		}
		require.Equal(t, want, ev.Endpoints, "%s goes to its subscribers, each with a job", ev.Type)
	}
	require.Equal(t, []string{
		store.OpEndpointCreated, store.OpEndpointUpdated, store.OpEndpointDisabled, store.OpEndpointEnabled,
		store.OpBreakerOpened, store.OpBreakerClosed, store.OpDeliveryFailed, store.OpEndpointDeleted,
	}, types)
	data := func(i int) map[string]any { return events[i].Body["data"].(map[string]any) }
	require.Equal(t, "billing", data(1)["description"])
	require.Equal(t, "manual", data(2)["reason"])
	require.Equal(t, "isolate", data(4)["reason"])
	require.Contains(t, data(4), "threshold")
	require.Equal(t, "reset", data(5)["reason"])
	require.Equal(t, dlv.ID, data(6)["delivery_id"])
	require.Equal(t, msg.ID, data(6)["message_id"])
	require.EqualValues(t, 3, data(6)["attempts"])
	require.Equal(t, "HTTP 503", data(6)["last_error"])

	// An operational delivery that fails tells nobody: no event is ever
	// about an operational endpoint.
	var opsDelivery string
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT id FROM deliveries WHERE endpoint_id = $1 LIMIT 1`, all.ID).Scan(&opsDelivery))
	b.markFailed(t, deliveryJSON{ID: opsDelivery}, 1, 12)
	require.Len(t, b.opsEvents(t), len(events))
	requireStatus(t, http.StatusOK, b.do(t, "GET", "/v1/endpoints/"+before.ID, nil))
}
