package store_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// failDeliveries sends n messages to the tenant's one endpoint and marks
// each delivery failed after 8 attempts, returning the deliveries oldest
// first.
func failDeliveries(t *testing.T, s *store.Store, enq store.Enqueuer, tenant string, n int) []store.Delivery {
	t.Helper()
	ctx := context.Background()
	var out []store.Delivery
	var updates []store.StatusUpdate
	for range n {
		m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: tenant, EventType: "a", Payload: json.RawMessage(`{}`)}, enq)
		require.NoError(t, err)
		require.Len(t, m.Deliveries, 1)
		out = append(out, m.Deliveries[0])
		updates = append(updates, store.StatusUpdate{DeliveryID: m.Deliveries[0].ID, Series: 1, Status: store.DeliveryFailed, AttemptCount: 8})
	}
	require.NoError(t, s.RecordLedger(ctx, nil, updates))
	return out
}

// TestRecoverDeliveriesParksFailedOnesForTheUnparker: a recovery parks
// every failed delivery of the endpoint created in range as a new attempt
// series (a manual retry's numbering), with park_reason recover, skips and
// counts those whose payload expired, and leaves the rest alone; the
// unparker's release takes them oldest first; a second recovery is
// refused until the first is released.
func TestRecoverDeliveriesParksFailedOnesForTheUnparker(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	b.endpoint(t, "other")
	failed := failDeliveries(t, s, b.enq, "acme", 6)
	otherTenant := failDeliveries(t, s, b.enq, "other", 1)[0]
	now := time.Now()
	// Before the range, after it, and one whose payload retention dropped.
	old, late, gone := failed[0], failed[5], failed[3]
	_, err := b.db.Pool.Exec(ctx, `UPDATE deliveries SET created_at = $2 WHERE id = $1`, old.ID, now.Add(-2*time.Hour))
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE deliveries SET created_at = $2 WHERE id = $1`, late.ID, now.Add(time.Hour))
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `DELETE FROM message_payloads WHERE message_id = $1`, gone.MessageID)
	require.NoError(t, err)
	// A delivered one in range stays delivered.
	delivered := failDeliveries(t, s, b.enq, "acme", 1)[0]
	require.NoError(t, s.RecordLedger(ctx, nil, []store.StatusUpdate{{DeliveryID: delivered.ID, Series: 1, Status: store.DeliveryDelivered, AttemptCount: 9}}))
	// RecordLedger does not move a failed delivery; set it directly.
	_, err = b.db.Pool.Exec(ctx, `UPDATE deliveries SET status = 'delivered' WHERE id = $1`, delivered.ID)
	require.NoError(t, err)

	until := now.Add(30 * time.Minute)
	rec, err := s.RecoverDeliveries(ctx, e.ID, store.RecoverRange{Since: now.Add(-time.Hour), Until: &until}, "alice")
	require.NoError(t, err)
	require.Equal(t, store.Recovery{Queued: 3, PayloadExpired: 1}, rec)

	want := []string{failed[1].ID, failed[2].ID, failed[4].ID}
	for _, id := range want {
		d, err := s.GetDelivery(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.DeliveryWaiting, d.Status)
		require.Nil(t, d.JobID, "parked: the unparker gives it a job")
		require.Equal(t, 2, d.Series)
		require.Equal(t, 8, d.SeriesBase, "the new series numbers its attempts after the old ones")
	}
	for _, id := range []string{old.ID, late.ID, gone.ID, otherTenant.ID} {
		d, err := s.GetDelivery(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.DeliveryFailed, d.Status, id)
	}
	d, err := s.GetDelivery(ctx, delivered.ID)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryDelivered, d.Status)
	var event json.RawMessage
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT details FROM endpoint_events WHERE endpoint_id = $1 AND kind = 'recovered' AND actor = 'alice'`, e.ID).Scan(&event))
	require.JSONEq(t, `{"since": "`+now.Add(-time.Hour).UTC().Format(time.RFC3339Nano)+`", "until": "`+until.Format(time.RFC3339Nano)+`", "queued": 3, "payload_expired": 1}`, string(event))

	_, err = s.RecoverDeliveries(ctx, e.ID, store.RecoverRange{Since: now.Add(-3 * time.Hour)}, "alice")
	require.ErrorIs(t, err, store.ErrRecoveryReleasing)

	// The unparker's release path takes them, oldest first.
	parked, err := s.ParkedEndpoints(ctx, []string{e.ID})
	require.NoError(t, err)
	require.Len(t, parked, 1)
	require.Equal(t, 3, parked[0].Parked)
	b.enq.queued = nil
	released, err := s.ReleaseParked(ctx, e.ID, 2, b.enq)
	require.NoError(t, err)
	require.Len(t, released, 2)
	_, err = s.RecoverDeliveries(ctx, e.ID, store.RecoverRange{Since: now.Add(-3 * time.Hour)}, "alice")
	require.ErrorIs(t, err, store.ErrRecoveryReleasing, "one still parked")
	released, err = s.ReleaseParked(ctx, e.ID, 10, b.enq)
	require.NoError(t, err)
	require.Len(t, released, 1)
	var got []string
	for _, q := range b.enq.queued {
		got = append(got, q.ID)
		require.Equal(t, 2, q.Series)
		require.Equal(t, 8, q.SeriesBase)
	}
	require.Equal(t, want, got)
	for _, id := range want {
		d, err := s.GetDelivery(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.DeliveryPending, d.Status)
	}

	// Released: a new recovery may run (the old one's range is open-ended).
	rec, err = s.RecoverDeliveries(ctx, e.ID, store.RecoverRange{Since: now.Add(-3 * time.Hour)}, "alice")
	require.NoError(t, err)
	require.Equal(t, store.Recovery{Queued: 2, PayloadExpired: 1}, rec, "old and late: the range has no end")

	_, err = s.RecoverDeliveries(ctx, "ep_missing", store.RecoverRange{Since: now}, "alice")
	require.ErrorIs(t, err, store.ErrNotFound)
	deleted := b.endpoint(t, "acme")
	require.NoError(t, s.DeleteEndpoint(ctx, deleted.ID))
	_, err = s.RecoverDeliveries(ctx, deleted.ID, store.RecoverRange{Since: now}, "alice")
	require.ErrorIs(t, err, store.ErrNotFound)
}

// TestConcurrentRecoveriesOfOneEndpoint: of recoveries started at once for
// one endpoint, one parks the deliveries and the others are refused.
func TestConcurrentRecoveriesOfOneEndpoint(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	failDeliveries(t, s, b.enq, "acme", 20)
	var wg sync.WaitGroup
	recs := make([]store.Recovery, 4)
	errs := make([]error, 4)
	for i := range recs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			recs[i], errs[i] = s.RecoverDeliveries(ctx, e.ID, store.RecoverRange{Since: time.Now().Add(-time.Hour)}, "alice")
		}()
	}
	wg.Wait()
	var ok int
	for i, err := range errs {
		if err == nil {
			ok++
			require.Equal(t, 20, recs[i].Queued)
			continue
		}
		require.ErrorIs(t, err, store.ErrRecoveryReleasing)
	}
	require.Equal(t, 1, ok)
}

// TestUpgradeAddsParkReason: a database of the schema before park_reason,
// with failed and breaker-parked deliveries, migrates; the parked one is
// still released by the unparker's path and the failed one can be
// recovered.
func TestUpgradeAddsParkReason(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	resetTo(t, db, 21)
	s := store.New(db.Pool, nil)
	enq := &fakeEnqueuer{}
	// The rows as that schema stored them.
	e := store.Endpoint{ID: createEndpointV10(t, db, "acme", "https://example.com/h", testSecret, "")}
	var ids []string
	for range 2 {
		_, dlvs := createMessageV7(t, db, "acme", "a", `{}`, e.ID)
		ids = append(ids, dlvs[0])
	}
	failed, parked := ids[0], ids[1]
	recordLedgerBefore0023(t, db, nil, []store.StatusUpdate{
		{DeliveryID: failed, Series: 1, Status: store.DeliveryFailed, AttemptCount: 3},
		{DeliveryID: parked, Series: 1, Status: store.DeliveryWaiting, AttemptCount: 1, Park: true},
	})

	require.NoError(t, store.Migrate(ctx, db.Pool, nil))
	var reason *string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT park_reason FROM deliveries WHERE id = $1`, parked).Scan(&reason))
	require.Nil(t, reason, "a breaker's park has no reason")
	rec, err := s.RecoverDeliveries(ctx, e.ID, store.RecoverRange{Since: time.Now().Add(-time.Hour)}, "alice")
	require.NoError(t, err)
	require.Equal(t, 1, rec.Queued)
	got, err := s.ReleaseParked(ctx, e.ID, 10, enq)
	require.NoError(t, err)
	require.Len(t, got, 2, "the breaker's park and the recovery's, by one path")
}
