package api_test

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
)

func TestCreateMessageQueuesOneJobPerDelivery(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	e1 := b.createEndpoint(t, "acme")
	e2 := b.createEndpoint(t, "acme", "invoice.*")

	before := time.Now().Add(-time.Second)
	r := b.do(t, "POST", "/v1/messages", `{"tenant_id": "acme", "event_type": "invoice.paid",
		"payload": {"invoice": "in_1", "amount": 12345678901234567890, "note": "caf\u00e9 <b>"},
		"idempotency_key": "k-1"}`)
	requireStatus(t, http.StatusAccepted, r)
	require.Empty(t, r.Header.Get("Idempotent-Replayed"))
	m := decodeJSON[messageJSON](t, r)
	require.Equal(t, "/v1/messages/"+m.ID, r.Header.Get("Location"))
	require.Equal(t, "acme", m.TenantID)
	require.Equal(t, "invoice.paid", m.EventType)
	require.Equal(t, ptr("k-1"), m.IdempotencyKey)
	require.Nil(t, m.Payload, "the 202 does not echo the payload")
	require.WithinRange(t, m.CreatedAt, before, time.Now().Add(time.Second))

	byEndpoint := map[string]deliveryJSON{}
	for _, d := range m.Deliveries {
		byEndpoint[d.EndpointID] = d
		require.Equal(t, m.ID, d.MessageID)
		require.Equal(t, "acme", d.TenantID)
		require.Equal(t, "pending", d.Status)
		require.Equal(t, 1, d.Series)
		require.Zero(t, d.AttemptCount)
	}
	require.ElementsMatch(t, []string{e1.ID, e2.ID}, slices.Collect(maps.Keys(byEndpoint)))

	// One River job for the message's fan-out, inserted in the message's
	// transaction, carrying what the worker needs; each delivery
	// remembers the job. Escapes stay as sent: these are the bytes signed.
	const compact = `{"invoice":"in_1","amount":12345678901234567890,"note":"caf\u00e9 <b>"}`
	jobs := b.jobs(t)
	require.Len(t, jobs, 1)
	j := jobs[0]
	require.Equal(t, "deliver_message", j.Kind)
	require.Equal(t, delivery.QueueDeliver, j.Queue)
	require.Equal(t, "available", j.State)
	require.Equal(t, m.ID, j.Message.MessageID)
	require.Equal(t, "invoice.paid", j.Message.EventType)
	require.ElementsMatch(t, []string{e1.ID, e2.ID}, j.Message.Endpoints)
	for _, d := range byEndpoint {
		require.Equal(t, &j.ID, b.jobIDOf(t, d.ID))
	}

	// GET shows the payload as accepted, compacted, numbers untouched.
	r = b.do(t, "GET", "/v1/messages/"+m.ID, nil)
	requireStatus(t, http.StatusOK, r)
	got := decodeJSON[messageJSON](t, r)
	require.Equal(t, compact, string(got.Payload))
	require.Equal(t, m.ID, got.ID)
	require.Equal(t, m.IdempotencyKey, got.IdempotencyKey)
	require.True(t, m.CreatedAt.Equal(got.CreatedAt))
	require.Len(t, got.Deliveries, 2)
	for _, d := range got.Deliveries {
		want := byEndpoint[d.EndpointID]
		require.Equal(t, want.ID, d.ID)
		require.Equal(t, want.Status, d.Status)

		dr := b.do(t, "GET", "/v1/deliveries/"+d.ID, nil)
		requireStatus(t, http.StatusOK, dr)
		require.Equal(t, d, decodeJSON[deliveryJSON](t, dr))
	}
}

func TestCreateMessageWithoutSubscribersCreatesNoDeliveries(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b.createEndpoint(t, "acme", "user.*")
	b.createEndpoint(t, "globex")
	m := b.sendMessage(t, "acme", "invoice.paid")
	require.Equal(t, []deliveryJSON{}, m.Deliveries)
	require.Empty(t, b.jobs(t))
	got := decodeJSON[messageJSON](t, b.do(t, "GET", "/v1/messages/"+m.ID, nil))
	require.Equal(t, []deliveryJSON{}, got.Deliveries)
	require.Nil(t, got.IdempotencyKey)
}

// TestMessageFanOut checks which endpoints a message reaches: only its
// tenant's, only those whose event-type filters match, held (and without a
// job) when disabled.
func TestMessageFanOut(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	endpoints := map[string]string{} // id -> name
	add := func(name, tenant string, filters ...string) string {
		if filters == nil {
			filters = []string{}
		}
		e := b.createEndpoint(t, tenant, filters...)
		endpoints[e.ID] = name
		return e.ID
	}
	add("a-empty", "acme")
	add("a-star", "acme", "*")
	add("a-invoice.*", "acme", "invoice.*")
	add("a-invoice.paid", "acme", "invoice.paid")
	add("a-invoice.paid.*", "acme", "invoice.paid.*")
	add("a-user.created+invoice.voided", "acme", "user.created", "invoice.voided")
	add("a-user.*", "acme", "user.*")
	disabled := add("a-disabled", "acme", "invoice.*")
	add("g-empty", "globex")
	add("g-invoice.*", "globex", "invoice.*")
	requireStatus(t, http.StatusOK, b.do(t, "POST", "/v1/endpoints/"+disabled+"/disable", nil))

	// The group returns once its parallel subtests are done.
	t.Run("messages", func(t *testing.T) {
		fanOutCases(t, b, endpoints, disabled)
	})
	t.Run("jobs", func(t *testing.T) {
		// Jobs exist exactly for the pending deliveries: a message job
		// for each message's, or a delivery job for a single one.
		var pending int
		for _, j := range b.jobs(t) {
			if j.Kind == "deliver_message" {
				require.NotContains(t, j.Message.Endpoints, disabled)
				pending += len(j.Message.Endpoints)
				continue
			}
			require.NotEqual(t, disabled, j.Args.EndpointID)
			pending++
		}
		var want int
		require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM deliveries WHERE status = 'pending'`).Scan(&want))
		require.Equal(t, want, pending)
	})
}

func fanOutCases(t *testing.T, b *testBundle, endpoints map[string]string, disabled string) {
	for _, tc := range []struct {
		tenant, eventType string
		want              []string
	}{
		{"acme", "invoice.paid", []string{"a-empty", "a-star", "a-invoice.*", "a-invoice.paid", "a-disabled"}},
		{"acme", "invoice.paid.late", []string{"a-empty", "a-star", "a-invoice.*", "a-invoice.paid.*", "a-disabled"}},
		{"acme", "invoice.voided", []string{"a-empty", "a-star", "a-invoice.*", "a-user.created+invoice.voided", "a-disabled"}},
		{"acme", "invoice", []string{"a-empty", "a-star"}},
		{"acme", "invoices.paid", []string{"a-empty", "a-star"}},
		{"acme", "user.created", []string{"a-empty", "a-star", "a-user.created+invoice.voided", "a-user.*"}},
		{"acme", "Invoice.paid", []string{"a-empty", "a-star"}},
		{"globex", "invoice.paid", []string{"g-empty", "g-invoice.*"}},
		{"globex", "user.created", []string{"g-empty"}},
		{"initech", "invoice.paid", nil},
	} {
		t.Run(tc.tenant+" "+tc.eventType, func(t *testing.T) {
			t.Parallel()
			m := b.sendMessage(t, tc.tenant, tc.eventType)
			var got []string
			for _, d := range m.Deliveries {
				name := endpoints[d.EndpointID]
				got = append(got, name)
				require.Equal(t, tc.tenant, d.TenantID)
				require.True(t, strings.HasPrefix(name, tc.tenant[:1]+"-"), "%s received another tenant's message", name)
				if d.EndpointID == disabled {
					require.Equal(t, "held", d.Status)
					require.Nil(t, b.jobIDOf(t, d.ID), "a held delivery has no job")
				} else {
					require.Equal(t, "pending", d.Status)
					require.NotNil(t, b.jobIDOf(t, d.ID))
				}
			}
			require.ElementsMatch(t, tc.want, got)
		})
	}
}

func TestCreateMessageIdempotencyReplay(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b.createEndpoint(t, "acme")
	b.createEndpoint(t, "acme")
	b.createEndpoint(t, "globex")
	send := func(tenant, key string, payload any) *response {
		body := map[string]any{"tenant_id": tenant, "event_type": "order.shipped", "payload": payload}
		if key != "" {
			body["idempotency_key"] = key
		}
		return b.do(t, "POST", "/v1/messages", body)
	}
	r := send("acme", "order-7", map[string]any{"v": 1})
	requireStatus(t, http.StatusAccepted, r)
	first := decodeJSON[messageJSON](t, r)
	require.Len(t, first.Deliveries, 2)
	counts := b.counts(t)

	for _, tc := range []struct {
		name    string
		payload any
	}{
		{"the same request", map[string]any{"v": 1}},
		{"another payload with the same key", map[string]any{"v": 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := send("acme", "order-7", tc.payload)
			requireStatus(t, http.StatusAccepted, r)
			require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
			require.Equal(t, "/v1/messages/"+first.ID, r.Header.Get("Location"))
			again := decodeJSON[messageJSON](t, r)
			require.Equal(t, first.ID, again.ID)
			require.ElementsMatch(t, deliveryIDs(first.Deliveries), deliveryIDs(again.Deliveries))
			require.Equal(t, counts, b.counts(t), "a replay creates nothing")
		})
	}
	t.Run("the first payload is kept", func(t *testing.T) {
		got := decodeJSON[messageJSON](t, b.do(t, "GET", "/v1/messages/"+first.ID, nil))
		require.JSONEq(t, `{"v":1}`, string(got.Payload))
	})

	// Other tenants, other keys and no key create new messages.
	for _, tc := range []struct{ tenant, key string }{
		{"globex", "order-7"}, {"acme", "order-8"}, {"acme", ""}, {"acme", ""},
	} {
		r := send(tc.tenant, tc.key, 1)
		requireStatus(t, http.StatusAccepted, r)
		require.Empty(t, r.Header.Get("Idempotent-Replayed"))
		require.NotEqual(t, first.ID, decodeJSON[messageJSON](t, r).ID)
	}
}

func TestCreateMessageConcurrentReplaysCreateOne(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b.createEndpoint(t, "acme")
	b.createEndpoint(t, "acme")
	const n = 12
	results := make([]*response, n)
	t.Run("race", func(t *testing.T) {
		for i := range n {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				results[i] = b.do(t, "POST", "/v1/messages", map[string]any{
					"tenant_id": "acme", "event_type": "a.b", "payload": i, "idempotency_key": "same",
				})
			})
		}
	})
	var id string
	created := 0
	for _, r := range results {
		requireStatus(t, http.StatusAccepted, r)
		m := decodeJSON[messageJSON](t, r)
		if id == "" {
			id = m.ID
		}
		require.Equal(t, id, m.ID)
		require.Len(t, m.Deliveries, 2)
		if r.Header.Get("Idempotent-Replayed") == "" {
			created++
		}
	}
	require.Equal(t, 1, created, "exactly one request created the message")
	counts := b.counts(t)
	require.Equal(t, 1, counts["messages"])
	require.Equal(t, 2, counts["deliveries"])
	require.Equal(t, 1, counts["river_job"], "one message job for both deliveries")
	require.Equal(t, 1, counts["idempotency_keys"])
}

func TestCreateMessagePayloads(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b.createEndpoint(t, "acme")
	for _, tc := range []struct {
		name, payload, want string
	}{
		{"object", `{ "a" : [1, 2, {"b": null}] }`, `{"a":[1,2,{"b":null}]}`},
		{"string", `"hello"`, `"hello"`},
		{"number", `-1.5e10`, `-1.5e10`},
		{"null", `null`, `null`},
		{"escapes kept", `"\u003c\u00e9\n"`, `"\u003c\u00e9\n"`},
		{"key order and duplicates kept", `{"b":1,"a":2,"b":3}`, `{"b":1,"a":2,"b":3}`},
		{"exactly the limit once compacted", `"` + strings.Repeat("x", 1<<20-2) + `"`, `"` + strings.Repeat("x", 1<<20-2) + `"`},
		{"over the limit until compacted", "[\n" + strings.Repeat(" ", 10<<10) + `"` + strings.Repeat("x", 1<<20-4) + `"]`, `["` + strings.Repeat("x", 1<<20-4) + `"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := b.do(t, "POST", "/v1/messages", `{"tenant_id":"acme","event_type":"t","payload":`+tc.payload+`}`)
			requireStatus(t, http.StatusAccepted, r)
			m := decodeJSON[messageJSON](t, r)
			got := decodeJSON[messageJSON](t, b.do(t, "GET", "/v1/messages/"+m.ID, nil))
			require.Equal(t, tc.want, string(got.Payload))
			for _, j := range b.jobs(t) {
				if j.Args.MessageID != m.ID {
					continue
				}
				require.Empty(t, j.Args.Payload, "payloads stay out of River's job rows; the worker loads them")
			}
		})
	}
}

func TestGetMessageNotFound(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	for _, id := range []string{missingID("msg"), "msg_nope", missingID("ep")} {
		requireProblem(t, http.StatusNotFound, b.do(t, "GET", "/v1/messages/"+id, nil))
	}
}

func deliveryIDs(ds []deliveryJSON) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.ID)
	}
	return out
}
