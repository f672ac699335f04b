package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
)

// TestEndpointDeliveryOptions: the options are stored on create, kept by a
// patch that leaves them out, and removed one by one by a patch that sets
// them to none.
func TestEndpointDeliveryOptions(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	plain := b.endpoint(t, "acme")
	require.Equal(t, store.OrderingUnordered, plain.Ordering)
	require.Equal(t, store.ExhaustedSkip, plain.OnExhausted)
	require.Nil(t, plain.Filter)
	require.Nil(t, plain.RetrySchedule)
	require.Zero(t, plain.Timeout)
	require.Nil(t, plain.BlockedBy)

	schedule := []time.Duration{0, 500 * time.Millisecond, time.Minute, 2 * time.Hour}
	e, err := s.CreateEndpoint(ctx, store.Endpoint{
		TenantID: "acme", URL: "https://example.com/hook", Secret: testSecret,
		Ordering: store.OrderingFIFO, OnExhausted: store.ExhaustedBlock,
		Filter:        json.RawMessage(`{"amount": {"$gt": 10}}`),
		RetrySchedule: schedule, Timeout: 7500 * time.Millisecond,
	})
	require.NoError(t, err)
	check := func(e store.Endpoint) {
		t.Helper()
		require.Equal(t, store.OrderingFIFO, e.Ordering)
		require.Equal(t, store.ExhaustedBlock, e.OnExhausted)
		require.JSONEq(t, `{"amount": {"$gt": 10}}`, string(e.Filter))
		require.Equal(t, schedule, e.RetrySchedule)
		require.Equal(t, 7500*time.Millisecond, e.Timeout)
	}
	check(e)
	got, err := s.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	check(got)
	desc := "kept"
	got, err = s.UpdateEndpoint(ctx, e.ID, store.EndpointPatch{Description: &desc})
	require.NoError(t, err)
	check(got)

	unordered, skip := store.OrderingUnordered, store.ExhaustedSkip
	noFilter := json.RawMessage(nil)
	var noSchedule []time.Duration
	var noTimeout time.Duration
	got, err = s.UpdateEndpoint(ctx, e.ID, store.EndpointPatch{
		Ordering: &unordered, OnExhausted: &skip, Filter: &noFilter, RetrySchedule: &noSchedule, Timeout: &noTimeout,
	})
	require.NoError(t, err)
	require.Equal(t, store.OrderingUnordered, got.Ordering)
	require.Equal(t, store.ExhaustedSkip, got.OnExhausted)
	require.Nil(t, got.Filter)
	require.Nil(t, got.RetrySchedule)
	require.Zero(t, got.Timeout)

	filter := json.RawMessage(`{"$event_type": "a"}`)
	short := []time.Duration{0, time.Second}
	second := time.Second
	got, err = s.UpdateEndpoint(ctx, plain.ID, store.EndpointPatch{Filter: &filter, RetrySchedule: &short, Timeout: &second})
	require.NoError(t, err)
	require.JSONEq(t, string(filter), string(got.Filter))
	require.Equal(t, short, got.RetrySchedule)
	require.Equal(t, time.Second, got.Timeout)
}

// TestFiltersDecideTheFanOut: in one group, each message gets a delivery
// for exactly the endpoints whose filter it passes; an endpoint it does
// not pass gets no delivery row at all.
func TestFiltersDecideTheFanOut(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	withFilter := func(f string) store.Endpoint {
		e, err := s.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/hook", Secret: testSecret, Filter: json.RawMessage(f)})
		require.NoError(t, err)
		return e
	}
	big := withFilter(`{"amount": {"$gte": 100}}`)
	eurInvoices := withFilter(`{"currency": "EUR", "$event_type": {"$startsWith": "invoice."}}`)
	all := b.endpoint(t, "acme")
	res, err := s.CreateMessages(ctx, []store.NewMessage{
		{TenantID: "acme", EventType: "invoice.paid", Payload: json.RawMessage(`{"amount": 150, "currency": "USD"}`)},
		{TenantID: "acme", EventType: "invoice.paid", Payload: json.RawMessage(`{"amount": 5, "currency": "EUR"}`)},
		{TenantID: "acme", EventType: "order.created", Payload: json.RawMessage(`{"amount": 500, "currency": "EUR"}`)},
		{TenantID: "acme", EventType: "invoice.paid", Payload: json.RawMessage(`"not an object"`)},
		{TenantID: "acme", EventType: "invoice.paid", Payload: json.RawMessage(`{"amount": 100.0, "currency": "EUR"}`)},
	}, b.enq)
	require.NoError(t, err)
	want := [][]string{
		{big.ID, all.ID},
		{eurInvoices.ID, all.ID},
		{big.ID, all.ID},
		{all.ID},
		{big.ID, eurInvoices.ID, all.ID},
	}
	total := 0
	for i, r := range res {
		var got []string
		for _, d := range r.Message.Deliveries {
			got = append(got, d.EndpointID)
		}
		require.ElementsMatch(t, want[i], got, "message %d", i)
		stored, err := s.GetMessage(ctx, r.Message.ID)
		require.NoError(t, err)
		require.Len(t, stored.Deliveries, len(want[i]), "message %d", i)
		total += len(want[i])
	}
	require.Equal(t, total, b.count(t, "deliveries"))
}
