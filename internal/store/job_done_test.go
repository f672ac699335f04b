package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
)

// TestJobDoneDeletesTheRunningJobWithTheUpdate: a final status recorded
// with JobDone deletes its running job in the same transaction, and only a
// running one: a job a rescuer made available again, an update without
// JobDone and a rolled-back batch keep theirs.
func TestJobDoneDeletesTheRunningJobWithTheUpdate(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	b.endpoint(t, "acme")
	newDelivery := func(state string) store.Delivery {
		t.Helper()
		m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, b.enq)
		require.NoError(t, err)
		d := m.Deliveries[0]
		// The test's enqueuer writes no job rows: give the delivery one.
		var job int64
		require.NoError(t, b.db.Pool.QueryRow(ctx, `
			INSERT INTO river_job (args, kind, max_attempts, queue, state, attempt, attempted_at)
			VALUES ('{}', 'deliver', 100, 'deliver', $1::river_job_state, 1, now()) RETURNING id`, state).Scan(&job))
		_, err = b.db.Pool.Exec(ctx, `UPDATE deliveries SET job_id = $2 WHERE id = $1`, d.ID, job)
		require.NoError(t, err)
		d.JobID = &job
		return d
	}
	jobState := func(id int64) string {
		t.Helper()
		var state string
		err := b.db.Pool.QueryRow(ctx, `SELECT coalesce((SELECT state::text FROM river_job WHERE id = $1), 'gone')`, id).Scan(&state)
		require.NoError(t, err)
		return state
	}
	now := time.Now()
	done := func(d store.Delivery, status string, jobDone bool) store.StatusUpdate {
		return store.StatusUpdate{DeliveryID: d.ID, Series: 1, Status: status, AttemptCount: 1, LastAttemptAt: &now, JobID: *d.JobID, JobDone: jobDone}
	}

	delivered, failed, retried := newDelivery("running"), newDelivery("running"), newDelivery("running")
	rescued := newDelivery("available")
	require.NoError(t, s.RecordLedger(ctx, nil, []store.StatusUpdate{
		done(delivered, store.DeliveryDelivered, true),
		done(failed, store.DeliveryFailed, true),
		done(retried, store.DeliveryPending, false),
		done(rescued, store.DeliveryDelivered, true),
	}))
	require.Equal(t, "gone", jobState(*delivered.JobID))
	require.Equal(t, "gone", jobState(*failed.JobID))
	require.Equal(t, "running", jobState(*retried.JobID), "a retry keeps its job: River schedules it")
	require.Equal(t, "available", jobState(*rescued.JobID), "a job River moved on is River's")
	for d, want := range map[*store.Delivery]string{&delivered: store.DeliveryDelivered, &failed: store.DeliveryFailed} {
		got, err := s.GetDelivery(ctx, d.ID)
		require.NoError(t, err)
		require.Equal(t, want, got.Status, "the status committed with the delete")
	}

	// A batch that does not commit deletes nothing.
	kept := newDelivery("running")
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	require.Error(t, s.RecordLedger(cctx, nil, []store.StatusUpdate{done(kept, store.DeliveryDelivered, true)}))
	require.Equal(t, "running", jobState(*kept.JobID))
	got, err := s.GetDelivery(ctx, kept.ID)
	require.NoError(t, err)
	require.NotEqual(t, store.DeliveryDelivered, got.Status)
}
