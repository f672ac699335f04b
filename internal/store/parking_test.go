package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
)

// TestReleaseOutcomes: what became of released deliveries is read from
// the deliveries as the ledger left them, in the order asked: delivered;
// attempted and not delivered (a retry scheduled, or failed for good);
// not attempted yet; and gone from the release (parked again without an
// attempt, or no such delivery).
func TestReleaseOutcomes(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	until := time.Now().Add(time.Minute)
	var parks []store.StatusUpdate
	for range 5 {
		m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, b.enq)
		require.NoError(t, err)
		parks = append(parks, store.StatusUpdate{DeliveryID: m.Deliveries[0].ID, Series: 1, Status: store.DeliveryWaiting, BreakerOpenUntil: &until, Park: true})
	}
	require.NoError(t, s.RecordLedger(ctx, nil, parks))
	released, err := s.ReleaseParked(ctx, e.ID, 10, b.enq)
	require.NoError(t, err)
	require.Len(t, released, 5)
	for _, r := range released {
		require.Zero(t, r.Attempts)
	}

	now := time.Now()
	retry := now.Add(time.Minute)
	refused := "http_503"
	require.NoError(t, s.RecordLedger(ctx, nil, []store.StatusUpdate{
		{DeliveryID: released[0].ID, Series: 1, Status: store.DeliveryDelivered, AttemptCount: 1, LastAttemptAt: &now},
		{DeliveryID: released[1].ID, Series: 1, Status: store.DeliveryPending, AttemptCount: 1, LastAttemptAt: &now, NextAttemptAt: &retry, LastError: &refused},
		{DeliveryID: released[2].ID, Series: 1, Status: store.DeliveryFailed, AttemptCount: 1, LastAttemptAt: &now, LastError: &refused},
		{DeliveryID: released[4].ID, Series: 1, Status: store.DeliveryWaiting, BreakerOpenUntil: &until, Park: true},
	}))
	asked := append(released, store.Released{ID: "dlv_missing"})
	got, err := s.ReleaseOutcomes(ctx, asked)
	require.NoError(t, err)
	require.Equal(t, []store.ReleaseOutcome{
		store.ReleaseDelivered,
		store.ReleaseFailed,
		store.ReleaseFailed,
		store.ReleaseOutstanding,
		store.ReleaseGone,
		store.ReleaseGone,
	}, got)

	got, err = s.ReleaseOutcomes(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, got)
}
