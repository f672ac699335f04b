package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/store"
)

// TestEndpointDeliveryOptions: the options are set on create and shown;
// a PATCH that leaves them out keeps them, one that sends them changes
// them, null removes filter, retry_schedule and timeout; a tenant token
// and a portal session set them as an admin does.
func TestEndpointDeliveryOptions(t *testing.T) {
	t.Parallel()
	srv, b := setup(t)
	r := b.do(t, "POST", "/v1/endpoints", map[string]any{
		"tenant_id": "acme", "url": "https://acme.example/h",
		"ordering": "fifo", "on_exhausted": "block",
		"filter":         map[string]any{"$or": []any{map[string]any{"amount": map[string]any{"$gte": 100}}, map[string]any{"vip": true}}},
		"retry_schedule": []string{"0s", "1500ms", "1m", "2h"},
		"timeout":        "7s",
	})
	requireStatus(t, http.StatusCreated, r)
	ep := decodeJSON[endpointJSON](t, r)
	check := func(e endpointJSON) {
		t.Helper()
		require.Equal(t, "fifo", e.Ordering)
		require.Equal(t, "block", e.OnExhausted)
		require.JSONEq(t, `{"$or": [{"amount": {"$gte": 100}}, {"vip": true}]}`, string(e.Filter))
		require.Equal(t, []string{"0s", "1.5s", "1m", "2h"}, e.RetrySchedule)
		require.Equal(t, "7s", *e.Timeout)
		require.Nil(t, e.BlockedBy)
	}
	check(ep)
	check(decodeJSON[endpointJSON](t, b.do(t, "GET", "/v1/endpoints/"+ep.ID, nil)))

	patch := func(body map[string]any) endpointJSON {
		t.Helper()
		r := b.do(t, "PATCH", "/v1/endpoints/"+ep.ID, body)
		requireStatus(t, http.StatusOK, r)
		return decodeJSON[endpointJSON](t, r)
	}
	check(patch(map[string]any{"description": "kept"}))
	got := patch(map[string]any{"ordering": "unordered", "on_exhausted": "skip", "filter": nil, "retry_schedule": nil, "timeout": nil})
	require.Equal(t, "unordered", got.Ordering)
	require.Equal(t, "skip", got.OnExhausted)
	require.Equal(t, "null", string(got.Filter))
	require.Nil(t, got.RetrySchedule)
	require.Nil(t, got.Timeout)

	plain := b.createEndpoint(t, "acme")
	require.Equal(t, "unordered", plain.Ordering)
	require.Equal(t, "skip", plain.OnExhausted)
	require.Equal(t, "null", string(plain.Filter))
	require.Nil(t, plain.RetrySchedule)
	require.Nil(t, plain.Timeout)

	// A tenant token of acme sets them on its own endpoints.
	tok, _ := b.scopedToken(t, store.NewAPIToken{Scope: store.ScopeTenant, Name: "acme", TenantID: "acme"})
	asAcme := withHeader("Authorization", "Bearer "+tok)
	r = b.do(t, "PATCH", "/v1/endpoints/"+plain.ID, map[string]any{"ordering": "fifo", "timeout": "2s"}, asAcme)
	requireStatus(t, http.StatusOK, r)
	require.Equal(t, "fifo", decodeJSON[endpointJSON](t, r).Ordering)

	// So does a portal session of acme.
	br := newBrowser(t, srv.URL)
	pr := br.exchange(b.openPortal(t, "acme", map[string]any{}))
	requireStatus(t, http.StatusOK, pr)
	info := decodeJSON[portalInfoJSON](t, pr)
	c := portalCookieOf(t, pr)
	body, err := json.Marshal(map[string]any{"retry_schedule": []string{"0s", "30s"}, "filter": map[string]any{"$event_type": "invoice.paid"}})
	require.NoError(t, err)
	r = br.send("PATCH", "/v1/endpoints/"+plain.ID, strings.NewReader(string(body)), c, api.CSRFHeader, info.CSRF, "Content-Type", "application/json")
	requireStatus(t, http.StatusOK, r)
	got = decodeJSON[endpointJSON](t, r)
	require.Equal(t, []string{"0s", "30s"}, got.RetrySchedule)
	require.JSONEq(t, `{"$event_type": "invoice.paid"}`, string(got.Filter))
	require.Equal(t, "2s", *got.Timeout)
}

// TestEndpointOptionsRefuseBadValues: a bad option answers 400 naming the
// field, and inside a filter the path of the fault; nothing is written.
func TestEndpointOptionsRefuseBadValues(t *testing.T) {
	t.Parallel()
	_, b := setup(t, func(d *api.Deps) { d.Retention = 3 * time.Hour })
	ep := b.createEndpoint(t, "acme")
	before := b.counts(t)
	long := make([]string, 21)
	for i := range long {
		long[i] = "1s"
	}
	// The document cannot spell out a filter's grammar, a Go duration or
	// the retention: those refusals are the server's alone.
	const grammar = "the filter grammar, Go durations and the retention are beyond the schema"
	for _, c := range []struct {
		body  map[string]any
		field string
		blind bool
	}{
		{map[string]any{"ordering": "lifo"}, "ordering", false},
		{map[string]any{"on_exhausted": "retry"}, "on_exhausted", false},
		{map[string]any{"filter": map[string]any{"$or": []any{map[string]any{"a": 1}, map[string]any{"amount": map[string]any{"$gt": true}}}}}, "filter.$or[1].amount.$gt", true},
		{map[string]any{"filter": map[string]any{}}, "filter", false},
		{map[string]any{"filter": []any{}}, "filter", false},
		{map[string]any{"filter": "amount > 1"}, "filter", false},
		{map[string]any{"filter": map[string]any{"amount": map[string]any{"$regex": "^1"}}}, "filter.amount.$regex", true},
		{map[string]any{"filter": map[string]any{"customer": map[string]any{"tier": "gold"}}}, "filter.customer.tier", true},
		{map[string]any{"retry_schedule": []string{}}, "retry_schedule", false},
		{map[string]any{"retry_schedule": long}, "retry_schedule", false},
		{map[string]any{"retry_schedule": "0s,1s"}, "retry_schedule", false},
		{map[string]any{"retry_schedule": []any{"0s", 5}}, "retry_schedule", false},
		{map[string]any{"retry_schedule": []string{"0s", "soon"}}, "retry_schedule[1]", true},
		{map[string]any{"retry_schedule": []string{"25h"}}, "retry_schedule[0]", true},
		{map[string]any{"retry_schedule": []string{"-1s"}}, "retry_schedule[0]", true},
		{map[string]any{"retry_schedule": []string{"0s", "2h", "2h"}}, "retry_schedule", true},
		{map[string]any{"timeout": "500ms"}, "timeout", true},
		{map[string]any{"timeout": "61s"}, "timeout", true},
		{map[string]any{"timeout": 30}, "timeout", false},
	} {
		var opts []callOpt
		if c.blind {
			opts = append(opts, docBlind(grammar))
		}
		create := map[string]any{"tenant_id": "acme", "url": "https://acme.example/b"}
		for k, v := range c.body {
			create[k] = v
		}
		requireFieldError(t, http.StatusBadRequest, b.do(t, "POST", "/v1/endpoints", create, opts...), c.field)
		requireFieldError(t, http.StatusBadRequest, b.do(t, "PATCH", "/v1/endpoints/"+ep.ID, c.body, opts...), c.field)
	}
	require.Equal(t, before, b.counts(t))
	got := decodeJSON[endpointJSON](t, b.do(t, "GET", "/v1/endpoints/"+ep.ID, nil))
	require.Equal(t, "unordered", got.Ordering)
	require.Nil(t, got.RetrySchedule)
}

// TestSkipLetsABlockedQueueGoOn: skipping the delivery that blocks a FIFO
// queue sends the next one and leaves the skipped one failed; the
// endpoint shows the block until then, and no other delivery can be
// skipped.
func TestSkipLetsABlockedQueueGoOn(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ep, blocked := b.blockedDelivery(t, "acme")
	next := b.sendMessage(t, "acme", "invoice.paid").Deliveries[0]
	require.Equal(t, store.DeliveryWaiting, next.Status, "queued behind the blocked head")
	got := decodeJSON[endpointJSON](t, b.do(t, "GET", "/v1/endpoints/"+ep.ID, nil))
	require.Equal(t, blocked.ID, *got.BlockedBy)
	requireProblem(t, http.StatusConflict, b.do(t, "POST", "/v1/deliveries/"+next.ID+"/skip", nil))

	r := b.do(t, "POST", "/v1/deliveries/"+blocked.ID+"/skip", nil)
	requireStatus(t, http.StatusOK, r)
	require.Equal(t, store.DeliveryFailed, decodeJSON[deliveryJSON](t, r).Status)
	got = decodeJSON[endpointJSON](t, b.do(t, "GET", "/v1/endpoints/"+ep.ID, nil))
	require.Nil(t, got.BlockedBy)
	d := decodeJSON[deliveryJSON](t, b.do(t, "GET", "/v1/deliveries/"+next.ID, nil))
	require.Equal(t, store.DeliveryPending, d.Status, "the next one goes")
	require.NotNil(t, b.jobIDOf(t, next.ID))
	requireProblem(t, http.StatusConflict, b.do(t, "POST", "/v1/deliveries/"+blocked.ID+"/skip", nil))
}
