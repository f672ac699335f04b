package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/store"
)

// batchResult is one entry of a batch's results: a message or a problem.
type batchResult struct {
	messageJSON
	Type   string           `json:"type"`
	Title  string           `json:"title"`
	Status int              `json:"status"`
	Detail string           `json:"detail"`
	Errors []api.FieldError `json:"errors"`
}

// batchOf returns n valid messages for tenant, each with an idempotency
// key when keyed.
func batchOf(tenant string, n int, keyed bool) []map[string]any {
	out := make([]map[string]any, n)
	for i := range out {
		out[i] = map[string]any{"tenant_id": tenant, "event_type": "invoice.paid", "payload": map[string]any{"n": i}}
		if keyed {
			out[i]["idempotency_key"] = fmt.Sprintf("batch-%d", i)
		}
	}
	return out
}

// TestCreateMessagesBatch: 100 messages, two invalid, store the 98 valid
// ones with their deliveries and jobs, and answer one result per message
// in order, the two problems naming their index and field; replaying the
// batch (the same idempotency keys) creates nothing and answers the same
// messages.
func TestCreateMessagesBatch(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b.createEndpoint(t, "acme")
	before := b.counts(t)
	msgs := batchOf("acme", 100, true)
	msgs[3]["event_type"] = "invoice..paid"
	delete(msgs[71], "payload")
	r := b.do(t, "POST", "/v1/messages/batch", map[string]any{"messages": msgs})
	requireStatus(t, http.StatusOK, r)
	res := looseJSON[struct {
		Results []batchResult `json:"results"`
	}](t, r).Results
	require.Len(t, res, 100)
	ids := map[string]bool{}
	for i, x := range res {
		switch i {
		case 3, 71:
			field := map[int]string{3: "messages[3].event_type", 71: "messages[71].payload"}[i]
			require.Equal(t, http.StatusBadRequest, x.Status, i)
			require.Equal(t, api.ProblemTypeBase+"validation", x.Type)
			require.Len(t, x.Errors, 1)
			require.Equal(t, field, x.Errors[0].Field)
			require.Empty(t, x.ID)
		default:
			require.Zero(t, x.Status, "entry %d is a message", i)
			require.NotEmpty(t, x.ID)
			require.Equal(t, fmt.Sprintf("batch-%d", i), *x.IdempotencyKey)
			require.Len(t, x.Deliveries, 1)
			require.Equal(t, "pending", x.Deliveries[0].Status)
			ids[x.ID] = true
		}
	}
	require.Len(t, ids, 98)
	after := b.counts(t)
	for table, n := range map[string]int{"messages": 98, "message_payloads": 98, "deliveries": 98, "river_job": 98, "idempotency_keys": 98} {
		require.Equal(t, before[table]+n, after[table], table)
	}
	for id := range ids {
		r := b.do(t, "GET", "/v1/messages/"+id, nil)
		requireStatus(t, http.StatusOK, r)
		require.NotNil(t, b.jobIDOf(t, decodeJSON[messageJSON](t, r).Deliveries[0].ID))
	}

	// The replay creates nothing and answers the same messages.
	r = b.do(t, "POST", "/v1/messages/batch", map[string]any{"messages": msgs})
	requireStatus(t, http.StatusOK, r)
	replay := looseJSON[struct {
		Results []batchResult `json:"results"`
	}](t, r).Results
	require.Len(t, replay, 100)
	for i := range replay {
		require.Equal(t, res[i].ID, replay[i].ID, i)
		require.Equal(t, res[i].Status, replay[i].Status, i)
	}
	require.Equal(t, after, b.counts(t), "the replay creates nothing")

	// Two messages of a batch with one key are one message.
	same := batchOf("acme", 2, false)
	for _, m := range same {
		m["idempotency_key"] = "twice"
	}
	r = b.do(t, "POST", "/v1/messages/batch", map[string]any{"messages": same})
	requireStatus(t, http.StatusOK, r)
	twice := looseJSON[struct {
		Results []batchResult `json:"results"`
	}](t, r).Results
	require.Equal(t, twice[0].ID, twice[1].ID)
	require.Equal(t, after["messages"]+1, b.counts(t)["messages"])
}

// TestCreateMessagesBatchRejectsBadInput: a batch that is not one is
// refused whole, naming the field; each message's faults are named by
// index, whatever they are; a tenant token's batch naming another tenant
// is refused whole. Nothing is written for any of them.
func TestCreateMessagesBatchRejectsBadInput(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b.createEndpoint(t, "acme")
	before := b.counts(t)
	for _, c := range []struct {
		body  any
		field string
	}{
		{map[string]any{}, "messages"},
		{map[string]any{"messages": []any{}}, "messages"},
		{map[string]any{"messages": batchOf("acme", 101, false)}, "messages"},
		{map[string]any{"messages": map[string]any{}}, "messages"},
		{map[string]any{"messages": batchOf("acme", 1, false), "atomic": true}, "atomic"},
	} {
		requireFieldError(t, http.StatusBadRequest, b.do(t, "POST", "/v1/messages/batch", c.body), c.field)
	}

	// Every message bad: the answer is 200 with a problem for each.
	bad := []any{
		5,
		map[string]any{"tenant_id": "acme", "event_type": "a", "payload": 1, "Payload": 2},
		map[string]any{"tenant_id": "acme", "event_type": "a", "payload": 1, "idempotency_key": strings.Repeat("k", 257)},
		map[string]any{"tenant_id": "", "event_type": "a", "payload": 1},
		map[string]any{"tenant_id": "acme", "event_type": "a", "payload": strings.Repeat("x", 1<<20)},
		nil,
	}
	r := b.do(t, "POST", "/v1/messages/batch", map[string]any{"messages": bad})
	requireStatus(t, http.StatusOK, r)
	res := looseJSON[struct {
		Results []api.Problem `json:"results"`
	}](t, r).Results
	want := []struct {
		status int
		field  string
	}{
		{400, "messages[0]"}, {400, "messages[1].Payload"}, {400, "messages[2].idempotency_key"},
		{400, "messages[3].tenant_id"}, {413, "messages[4].payload"}, {400, "messages[5].tenant_id"},
	}
	require.Len(t, res, len(want))
	for i, w := range want {
		require.Equal(t, w.status, res[i].Status, "%d: %+v", i, res[i])
		var fields []string
		for _, f := range res[i].Errors {
			fields = append(fields, f.Field)
		}
		require.Contains(t, fields, w.field, i)
	}
	require.Equal(t, before, b.counts(t))

	// A tenant token: its own tenant's batch is accepted, one message of
	// another tenant refuses the whole batch.
	acme, _ := b.scopedToken(t, store.NewAPIToken{Scope: store.ScopeTenant, Name: "acme-app", TenantID: "acme"})
	as := withHeader("Authorization", "Bearer "+acme)
	mixed := batchOf("acme", 3, false)
	mixed[2]["tenant_id"] = "globex"
	requireFieldError(t, http.StatusForbidden, b.do(t, "POST", "/v1/messages/batch", map[string]any{"messages": mixed}, as), "messages[2].tenant_id")
	require.Equal(t, before, b.counts(t))
	r = b.do(t, "POST", "/v1/messages/batch", map[string]any{"messages": batchOf("acme", 2, false)}, as)
	requireStatus(t, http.StatusOK, r)
	require.Equal(t, before["messages"]+2, b.counts(t)["messages"])
}
