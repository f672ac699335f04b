package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/store"
)

type refusedJSON struct {
	ID      string      `json:"id"`
	Problem api.Problem `json:"problem"`
}

type bulkRetryJSON struct {
	Queued  []string      `json:"queued"`
	Refused []refusedJSON `json:"refused"`
}

// failedDelivery sends a message to tenant's endpoints and fails its one
// delivery.
func (b *testBundle) failedDelivery(t *testing.T, tenant string) deliveryJSON {
	t.Helper()
	m := b.sendMessage(t, tenant, "invoice.paid")
	require.Len(t, m.Deliveries, 1)
	b.markFailed(t, m.Deliveries[0], 1, 3)
	return m.Deliveries[0]
}

// TestRetryDeliveriesInBulk: each id is retried as POST
// /v1/deliveries/{id}/retry would be: failed ones are queued as their next
// series, and the others are refused alone with the problem the single
// retry answers (not failed, payload expired naming payload, not found),
// a tenant token's view of another tenant's delivery being not found.
func TestRetryDeliveriesInBulk(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	b.createEndpoint(t, "acme")
	b.createEndpoint(t, "globex")
	d1, d2, gone := b.failedDelivery(t, "acme"), b.failedDelivery(t, "acme"), b.failedDelivery(t, "acme")
	pending := b.sendMessage(t, "acme", "a").Deliveries[0]
	theirs := b.failedDelivery(t, "globex")
	_, err := b.db.Pool.Exec(ctx, `DELETE FROM message_payloads WHERE message_id = $1`, gone.MessageID)
	require.NoError(t, err)
	missing := missingID("dlv")

	// What the single retry answers for each refused id.
	single := map[string]api.Problem{}
	for _, id := range []string{pending.ID, gone.ID, missing, "nope"} {
		r := b.do(t, "POST", "/v1/deliveries/"+id+"/retry", nil)
		require.Contains(t, []int{http.StatusConflict, http.StatusNotFound}, r.Status)
		p := decodeJSON[api.Problem](t, r)
		p.Instance = ""
		single[id] = p
	}
	before := len(b.jobs(t))

	r := b.do(t, "POST", "/v1/deliveries/retry", map[string]any{"ids": []string{d1.ID, pending.ID, gone.ID, missing, "nope", d2.ID, d1.ID}})
	requireStatus(t, http.StatusAccepted, r)
	got := decodeJSON[bulkRetryJSON](t, r)
	require.Equal(t, []string{d1.ID, d2.ID}, got.Queued)
	var refused []string
	for _, x := range got.Refused {
		refused = append(refused, x.ID)
		require.Equal(t, single[x.ID], x.Problem, x.ID)
	}
	require.Equal(t, []string{pending.ID, gone.ID, missing, "nope"}, refused)
	require.Equal(t, "payload", got.Refused[1].Problem.Errors[0].Field)
	require.Len(t, b.jobs(t), before+2, "one job per queued delivery")

	for _, d := range []deliveryJSON{d1, d2} {
		r := b.do(t, "GET", "/v1/deliveries/"+d.ID, nil)
		requireStatus(t, http.StatusOK, r)
		now := decodeJSON[deliveryJSON](t, r)
		require.Equal(t, "pending", now.Status)
		require.Equal(t, 2, now.Series)
		require.NotNil(t, b.jobIDOf(t, d.ID))
		require.NotEqual(t, *b.jobIDOf(t, pending.ID), *b.jobIDOf(t, d.ID))
	}
	// Queued again, they are not failed any more.
	r = b.do(t, "POST", "/v1/deliveries/retry", map[string]any{"ids": []string{d1.ID}})
	requireStatus(t, http.StatusAccepted, r)
	again := decodeJSON[bulkRetryJSON](t, r)
	require.Empty(t, again.Queued)
	require.Equal(t, http.StatusConflict, again.Refused[0].Problem.Status)

	// A tenant token: its own delivery is queued, another tenant's is
	// refused exactly as one that does not exist.
	mine := b.failedDelivery(t, "acme")
	acme, _ := b.scopedToken(t, store.NewAPIToken{Scope: store.ScopeTenant, Name: "acme-app", TenantID: "acme"})
	as := withHeader("Authorization", "Bearer "+acme)
	r = b.do(t, "POST", "/v1/deliveries/retry", map[string]any{"ids": []string{theirs.ID, mine.ID, missing}}, as)
	requireStatus(t, http.StatusAccepted, r)
	got = decodeJSON[bulkRetryJSON](t, r)
	require.Equal(t, []string{mine.ID}, got.Queued)
	require.Len(t, got.Refused, 2)
	require.Equal(t, theirs.ID, got.Refused[0].ID)
	require.Equal(t, got.Refused[1].Problem, got.Refused[0].Problem)
	require.Equal(t, http.StatusNotFound, got.Refused[0].Problem.Status)
	r = b.do(t, "GET", "/v1/deliveries/"+theirs.ID, nil)
	require.Equal(t, "failed", decodeJSON[deliveryJSON](t, r).Status, "another tenant's delivery is left alone")

	// A read-only token changes nothing.
	ro, _ := b.scopedToken(t, store.NewAPIToken{Scope: store.ScopeTenant, Name: "acme-ro", TenantID: "acme", ReadOnly: true})
	requireProblem(t, http.StatusForbidden, b.do(t, "POST", "/v1/deliveries/retry", map[string]any{"ids": []string{theirs.ID}},
		withHeader("Authorization", "Bearer "+ro)))
}

func TestRetryDeliveriesRejectsBadInput(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b.createEndpoint(t, "acme")
	d := b.failedDelivery(t, "acme")
	before := b.counts(t)
	many := make([]string, 1001)
	for i := range many {
		many[i] = d.ID
	}
	for _, c := range []struct {
		body  any
		field string
		opts  []callOpt
	}{
		{map[string]any{"ids": []string{}}, "ids", nil},
		{map[string]any{}, "ids", nil},
		{map[string]any{"ids": many}, "ids", nil},
		{map[string]any{"ids": d.ID}, "ids", nil},
		{map[string]any{"ids": []any{d.ID, 7}}, "ids", nil},
		{map[string]any{"ids": []string{d.ID, "dlv_\x00"}}, "ids[1]", []callOpt{docBlind("a NUL character is a valid JSON string")}},
		{map[string]any{"ids": []string{d.ID}, "force": true}, "force", nil},
	} {
		requireFieldError(t, http.StatusBadRequest, b.do(t, "POST", "/v1/deliveries/retry", c.body, c.opts...), c.field)
	}
	require.Equal(t, before, b.counts(t), "nothing is written on bad input")
	r := b.do(t, "GET", "/v1/deliveries/"+d.ID, nil)
	require.Equal(t, "failed", decodeJSON[deliveryJSON](t, r).Status)
}
