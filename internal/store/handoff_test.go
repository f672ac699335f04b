package store_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
)

// queueRecorder records what it is asked to queue.
type queueRecorder struct {
	mu     sync.Mutex
	next   int64
	queued []store.QueuedDelivery
}

func (q *queueRecorder) EnqueueTx(_ context.Context, _ pgx.Tx, qs []store.QueuedDelivery) ([]int64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ids := make([]int64, len(qs))
	for i := range qs {
		q.next++
		ids[i] = 9000 + q.next
	}
	q.queued = append(q.queued, qs...)
	return ids, nil
}

// TestHandOffGivesOwnJobsOnlyToWhatTheMessageJobStillOwns: a message job
// hands off the deliveries that must wait; one the ledger settled, or gave
// a job of its own already (a retry queued with its attempt's record),
// is left alone, so a handoff made again after a lost answer changes
// nothing.
func TestHandOffGivesOwnJobsOnlyToWhatTheMessageJobStillOwns(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	for range 4 {
		b.endpoint(t, "acme")
	}
	m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, b.enq)
	require.NoError(t, err)
	require.Len(t, m.Deliveries, 4)
	const messageJob = 500
	ids := make([]string, 4)
	for i, d := range m.Deliveries {
		ids[i] = d.ID
	}
	_, err = b.db.Pool.Exec(ctx, `UPDATE deliveries SET job_id = $2 WHERE id = ANY($1)`, ids, messageJob)
	require.NoError(t, err)
	delivered, retried, waiting, pending := ids[0], ids[1], ids[2], ids[3]
	at := time.Now()
	require.NoError(t, s.RecordLedger(ctx, []store.Attempt{{DeliveryID: delivered, MessageID: m.ID, EndpointID: m.Deliveries[0].EndpointID,
		AttemptNumber: 1, AttemptedAt: at, Classification: "success"}},
		[]store.StatusUpdate{
			{DeliveryID: delivered, Series: 1, Status: store.DeliveryDelivered, AttemptCount: 1, LastAttemptAt: &at},
			{DeliveryID: waiting, Series: 1, Status: store.DeliveryWaiting, BreakerOpenUntil: &at, JobID: messageJob},
		}))
	_, err = b.db.Pool.Exec(ctx, `UPDATE deliveries SET job_id = 777 WHERE id = $1`, retried)
	require.NoError(t, err)

	q := &queueRecorder{}
	soon, later := time.Now().Add(time.Second), time.Now().Add(time.Minute)
	hs := []store.HandOff{{DeliveryID: delivered, At: soon}, {DeliveryID: retried, At: soon},
		{DeliveryID: waiting, At: later}, {DeliveryID: pending, At: soon, Unsettled: true}}
	n, err := s.HandOff(ctx, store.Claim{JobID: messageJob, Attempt: 1}, hs, q)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Len(t, q.queued, 2)
	byID := map[string]store.QueuedDelivery{}
	for _, x := range q.queued {
		byID[x.ID] = x
	}
	require.True(t, later.Equal(*byID[waiting].ScheduledAt))
	require.False(t, byID[waiting].Unsettled)
	require.True(t, soon.Equal(*byID[pending].ScheduledAt))
	require.True(t, byID[pending].Unsettled)
	for _, x := range q.queued {
		require.Equal(t, "a", x.EventType)
		require.Equal(t, 1, x.Series)
		require.Zero(t, x.AttemptCount)
		require.False(t, x.Shared, "a handed-off delivery's job is its own")
	}

	jobOf := func(id string) *int64 {
		got, err := s.GetDelivery(ctx, id)
		require.NoError(t, err)
		return got.JobID
	}
	require.Equal(t, int64(messageJob), *jobOf(delivered), "settled: left alone")
	require.Equal(t, int64(777), *jobOf(retried), "its own job already: left alone")
	require.NotEqual(t, int64(messageJob), *jobOf(waiting))
	require.NotEqual(t, int64(messageJob), *jobOf(pending))

	// Made again (its answer lost): nothing more is queued.
	n, err = s.HandOff(ctx, store.Claim{JobID: messageJob, Attempt: 1}, hs, q)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Len(t, q.queued, 2)
}
