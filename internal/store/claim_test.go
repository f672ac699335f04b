package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
)

// TestClaimFencesTheRunItReplaced: a job run again claims the deliveries
// it still owns; from then on the run it replaced (frozen past River's
// rescue, say, and alive again) can neither record on them nor hand them
// off, and cannot claim them back; the new run can. A delivery that got
// another job is not claimed, and that job's writes are not fenced by the
// first job's claim.
func TestClaimFencesTheRunItReplaced(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	for range 3 {
		b.endpoint(t, "acme")
	}
	m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, b.enq)
	require.NoError(t, err)
	require.Len(t, m.Deliveries, 3)
	const job = 500
	ids := []string{m.Deliveries[0].ID, m.Deliveries[1].ID, m.Deliveries[2].ID}
	_, err = b.db.Pool.Exec(ctx, `UPDATE deliveries SET job_id = $2 WHERE id = ANY($1)`, ids, job)
	require.NoError(t, err)
	moved := ids[2]
	_, err = b.db.Pool.Exec(ctx, `UPDATE deliveries SET job_id = 600 WHERE id = $1`, moved)
	require.NoError(t, err)

	stale, fresh := store.Claim{JobID: job, Attempt: 1}, store.Claim{JobID: job, Attempt: 2}
	got, err := s.ClaimDeliveries(ctx, fresh, ids)
	require.NoError(t, err)
	require.Len(t, got, 2, "the job's own deliveries only")
	require.Equal(t, store.DeliveryPending, got[ids[0]].Status)
	require.Equal(t, 1, got[ids[0]].Series)
	require.NotContains(t, got, moved)
	again, err := s.ClaimDeliveries(ctx, stale, ids)
	require.NoError(t, err)
	require.Empty(t, again, "an earlier run cannot claim them back")

	at := time.Now()
	status := func(id string) string {
		d, err := s.GetDelivery(ctx, id)
		require.NoError(t, err)
		return d.Status
	}
	attemptRows := func(id string) int {
		var n int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM delivery_attempts WHERE delivery_id = $1`, id).Scan(&n))
		return n
	}
	attempt := func(id string, status int) []store.Attempt {
		return []store.Attempt{{DeliveryID: id, MessageID: m.ID, EndpointID: m.Deliveries[0].EndpointID, AttemptNumber: 1,
			AttemptedAt: at, StatusCode: &status, Classification: "success"}}
	}
	// The stale run's record and hand-off change nothing: neither the
	// status nor the attempt log (its attempt would log a second attempt
	// 1 beside the claiming run's).
	require.NoError(t, s.RecordLedger(ctx, attempt(ids[0], 500), []store.StatusUpdate{
		{DeliveryID: ids[0], Series: 1, Status: store.DeliveryFailed, AttemptCount: 1, LastAttemptAt: &at, Claim: stale},
	}))
	require.Equal(t, store.DeliveryPending, status(ids[0]))
	require.Zero(t, attemptRows(ids[0]), "the stale run's attempt is not logged")
	n, err := s.HandOff(ctx, stale, []store.HandOff{{DeliveryID: ids[1], At: at}}, &queueRecorder{})
	require.NoError(t, err)
	require.Zero(t, n)

	// The claiming run's do.
	require.NoError(t, s.RecordLedger(ctx, attempt(ids[0], 200), []store.StatusUpdate{
		{DeliveryID: ids[0], Series: 1, Status: store.DeliveryDelivered, AttemptCount: 1, LastAttemptAt: &at, Claim: fresh},
	}))
	require.Equal(t, store.DeliveryDelivered, status(ids[0]))
	require.Equal(t, 1, attemptRows(ids[0]))
	n, err = s.HandOff(ctx, fresh, []store.HandOff{{DeliveryID: ids[1], At: at}}, &queueRecorder{})
	require.NoError(t, err)
	require.Equal(t, 1, n)

	// The moved delivery's job writes as it likes.
	require.NoError(t, s.RecordLedger(ctx, nil, []store.StatusUpdate{
		{DeliveryID: moved, Series: 1, Status: store.DeliveryDelivered, AttemptCount: 1, LastAttemptAt: &at, Claim: store.Claim{JobID: 600, Attempt: 1}},
	}))
	require.Equal(t, store.DeliveryDelivered, status(moved))
}

// TestClaimCommittedDuringALedgerWriteFencesItsAttempt: a rerun's claim
// that commits while a lost run's ledger write is under way (after the
// write read the claims, before its status update) must still keep the
// lost run's attempt out of the log: the write reads the claims under the
// rows' locks, so it waits for the claim and then sees it. Read without
// the locks, the lost run's attempt row went in and its status update
// was refused, and the claiming run logged the same attempt number again.
func TestClaimCommittedDuringALedgerWriteFencesItsAttempt(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	b.endpoint(t, "acme")
	m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, b.enq)
	require.NoError(t, err)
	id := m.Deliveries[0].ID
	const job = 700
	_, err = b.db.Pool.Exec(ctx, `UPDATE deliveries SET job_id = $2 WHERE id = $1`, id, job)
	require.NoError(t, err)
	lostRun, rerun := store.Claim{JobID: job, Attempt: 1}, store.Claim{JobID: job, Attempt: 2}
	got, err := s.ClaimDeliveries(ctx, lostRun, []string{id})
	require.NoError(t, err)
	require.Contains(t, got, id)

	// The rerun's claim, not yet committed, holds the row.
	claim, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = claim.Rollback(ctx) }()
	_, err = claim.Exec(ctx, `UPDATE deliveries SET claim_job = $2, claim_attempt = $3 WHERE id = $1`, id, rerun.JobID, rerun.Attempt)
	require.NoError(t, err)

	at := time.Now()
	code := 200
	written := make(chan error, 1)
	go func() {
		written <- s.RecordLedger(ctx, []store.Attempt{{DeliveryID: id, MessageID: m.ID, EndpointID: m.Deliveries[0].EndpointID,
			AttemptNumber: 1, AttemptedAt: at, StatusCode: &code, Classification: "success"}},
			[]store.StatusUpdate{{DeliveryID: id, Series: 1, Status: store.DeliveryDelivered, AttemptCount: 1, LastAttemptAt: &at, Claim: lostRun}})
	}()
	// The ledger's write waits on the claim's row lock.
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
		return waiting > 0
	}, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, claim.Commit(ctx))
	require.NoError(t, <-written)

	var rows int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM delivery_attempts WHERE delivery_id = $1`, id).Scan(&rows))
	require.Zero(t, rows, "the lost run's attempt is not logged")
	d, err := s.GetDelivery(ctx, id)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryPending, d.Status, "nor its status")
}

// TestLedgerBatchWithTwoRunsOfAJobKeepsTheLaterRuns: a run whose record
// waits in its process's ledger while the same job runs again there (its
// job rescued while PostgreSQL was frozen, fetched again by the same
// process) can share a batch with the later run's record of the same
// delivery. The later run claimed the delivery before it sent, so the
// batch is written as the later run's alone: its status applies and its
// attempt is logged, the earlier run's attempt is not. Merged as one
// delivery's updates, the batch's status update carried the earlier
// run's claim and was refused, both attempts were logged, and the
// delivery stayed pending with its job completed.
func TestLedgerBatchWithTwoRunsOfAJobKeepsTheLaterRuns(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	b.endpoint(t, "acme")
	m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, b.enq)
	require.NoError(t, err)
	d := m.Deliveries[0]
	const job = 500
	_, err = b.db.Pool.Exec(ctx, `UPDATE deliveries SET job_id = $2 WHERE id = $1`, d.ID, job)
	require.NoError(t, err)
	earlier, later := store.Claim{JobID: job, Attempt: 6}, store.Claim{JobID: job, Attempt: 7}
	for _, c := range []store.Claim{earlier, later} {
		got, err := s.ClaimDeliveries(ctx, c, []string{d.ID})
		require.NoError(t, err)
		require.Contains(t, got, d.ID)
	}

	at := time.Now()
	ok := 200
	record := func(c store.Claim, took time.Duration) (store.Attempt, store.StatusUpdate) {
		return store.Attempt{DeliveryID: d.ID, MessageID: m.ID, EndpointID: d.EndpointID, AttemptNumber: 1,
				AttemptedAt: at, Duration: took, StatusCode: &ok, Classification: "success", Claim: c},
			store.StatusUpdate{DeliveryID: d.ID, Series: 1, Status: store.DeliveryDelivered, AttemptCount: 1, LastAttemptAt: &at, LastStatusCode: &ok, Claim: c}
	}
	a1, u1 := record(earlier, 2*time.Millisecond)
	a2, u2 := record(later, 9*time.Millisecond)
	require.NoError(t, s.RecordLedger(ctx, []store.Attempt{a1, a2}, []store.StatusUpdate{u1, u2}))

	got, err := s.GetDelivery(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryDelivered, got.Status, "the later run's status applies")
	require.Equal(t, 1, got.AttemptCount)
	logged, err := s.ListAttempts(ctx, store.AttemptFilter{DeliveryID: d.ID, Limit: 10})
	require.NoError(t, err)
	require.Len(t, logged, 1, "only the later run's attempt is logged")
	require.Equal(t, 9*time.Millisecond, logged[0].Duration)
}
