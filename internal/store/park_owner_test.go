package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
)

// TestParkAppliesOnlyForTheOwningJob: a park from a job that no longer
// owns the delivery (it was parked and released to a new job meanwhile, or
// the job was rescued) must not detach the delivery from its current job:
// the unparker would then release it to a third job while the second
// still runs, and the receiver would get it twice.
func TestParkAppliesOnlyForTheOwningJob(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, b.enq)
	require.NoError(t, err)
	d := m.Deliveries[0]
	owner := *d.JobID
	until := time.Now().Add(time.Minute)
	park := func(job int64) store.StatusUpdate {
		return store.StatusUpdate{DeliveryID: d.ID, Series: 1, Status: store.DeliveryWaiting, BreakerOpenUntil: &until, Park: true, JobID: job}
	}

	require.NoError(t, s.RecordLedger(ctx, nil, []store.StatusUpdate{park(owner + 99)}))
	got, err := s.GetDelivery(ctx, d.ID)
	require.NoError(t, err)
	require.NotNil(t, got.JobID, "a stale job's park is not applied")
	require.Equal(t, owner, *got.JobID)
	parked, err := s.ParkedEndpoints(ctx, []string{e.ID})
	require.NoError(t, err)
	require.Empty(t, parked)

	require.NoError(t, s.RecordLedger(ctx, nil, []store.StatusUpdate{park(owner)}))
	got, err = s.GetDelivery(ctx, d.ID)
	require.NoError(t, err)
	require.Nil(t, got.JobID, "the owner's park applies")
	require.Equal(t, store.DeliveryWaiting, got.Status)
}
