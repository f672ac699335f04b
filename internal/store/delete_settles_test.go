package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
)

// TestDeleteSettlesEveryDelivery: deleting an endpoint fails every delivery
// it still owns, at once and whatever its breaker's state: parked ones
// (no job, which no job would ever settle), queued ones, ones waiting on a
// snoozed job; a delivered one stays delivered.
func TestDeleteSettlesEveryDelivery(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	open, isolated, closed := b.endpoint(t, "acme"), b.endpoint(t, "acme"), b.endpoint(t, "acme")
	b.openBreaker(t, open.ID)
	_, err := s.OperateBreaker(ctx, isolated.ID, store.OperatorIsolate, testCfg, store.TransitionMeta{Actor: "test"})
	require.NoError(t, err)

	byEndpoint := map[string][]string{}
	for range 4 {
		m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, b.enq)
		require.NoError(t, err)
		for _, d := range m.Deliveries {
			byEndpoint[d.EndpointID] = append(byEndpoint[d.EndpointID], d.ID)
		}
	}
	until := time.Now().Add(time.Minute)
	now := time.Now()
	var updates []store.StatusUpdate
	for _, ep := range []string{open.ID, isolated.ID, closed.ID} {
		ids := byEndpoint[ep]
		require.Len(t, ids, 4)
		updates = append(updates,
			// ids[0] stays queued (pending with its job).
			store.StatusUpdate{DeliveryID: ids[1], Series: 1, Status: store.DeliveryWaiting, BreakerOpenUntil: &until},             // a snoozed job
			store.StatusUpdate{DeliveryID: ids[2], Series: 1, Status: store.DeliveryWaiting, BreakerOpenUntil: &until, Park: true}, // parked
			store.StatusUpdate{DeliveryID: ids[3], Series: 1, Status: store.DeliveryDelivered, AttemptCount: 1, LastAttemptAt: &now},
		)
	}
	require.NoError(t, s.RecordLedger(ctx, nil, updates))

	for _, ep := range []string{open.ID, isolated.ID, closed.ID} {
		require.NoError(t, s.DeleteEndpoint(ctx, ep))
		ids := byEndpoint[ep]
		for _, id := range ids[:3] {
			d, err := s.GetDelivery(ctx, id)
			require.NoError(t, err)
			require.Equal(t, store.DeliveryFailed, d.Status, "delivery %s of %s", id, ep)
			require.NotNil(t, d.LastError)
			require.Equal(t, store.LastErrorEndpointDeleted, *d.LastError)
			require.Nil(t, d.BreakerOpenUntil)
		}
		d, err := s.GetDelivery(ctx, ids[3])
		require.NoError(t, err)
		require.Equal(t, store.DeliveryDelivered, d.Status)
	}
	parked, err := s.ParkedEndpoints(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, parked, "nothing is left for the unparker")
}
