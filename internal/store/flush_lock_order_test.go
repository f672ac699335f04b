package store_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/store"
)

// TestFlushesLockBreakersInOneOrder: two processes flush consecutive runs
// of the same two endpoints, listed in opposite orders, while a third
// transaction holds both breaker rows, so both flushes are queued on the
// rows when it lets go. Were the rows locked in list order, each would take
// one and wait for the other: Postgres would abort one ("deadlock
// detected") and its tally would be lost. Both must commit.
func TestFlushesLockBreakersInOneOrder(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	ea, eb := b.endpoint(t, "acme"), b.endpoint(t, "acme")
	failed := breaker.Run{}
	failed.Add(breaker.OutcomeFailure)
	runs := func(ids ...string) []store.RunCount {
		var out []store.RunCount
		for _, id := range ids {
			out = append(out, store.RunCount{EndpointID: id, Generation: 1, Run: failed})
		}
		return out
	}

	// One holder per row, let go one at a time: the first flush then
	// holds one row while the second waits for the other.
	holdA, pidA := b.lockBreaker(t, ea.ID)
	holdB, _ := b.lockBreaker(t, eb.ID)

	errs := make(chan error, 2)
	for _, order := range [][]string{{ea.ID, eb.ID}, {eb.ID, ea.ID}} {
		go func() {
			_, err := s.FlushOutcomes(ctx, nil, runs(order...), nil)
			errs <- err
		}()
	}
	b.waitBlocked(t, 2, 0)
	require.NoError(t, holdA.Commit(ctx))
	b.waitBlocked(t, 0, pidA)
	b.waitBlocked(t, 2, 0) // one flush waits for B; the other for B, or for the first flush
	require.NoError(t, holdB.Commit(ctx))
	for range 2 {
		require.NoError(t, <-errs)
	}
	for _, id := range []string{ea.ID, eb.ID} {
		var n int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT consecutive_failures FROM breaker_states WHERE endpoint_id = $1`, id).Scan(&n))
		require.Equal(t, 2, n, "both flushes' failures are counted")
	}
}

// lockBreaker locks an endpoint's breaker row in a transaction of its own
// and returns it with its backend pid; the transaction is rolled back at
// cleanup unless committed.
func (b *testBundle) lockBreaker(t *testing.T, endpointID string) (pgx.Tx, int) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	var pid int
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid() FROM breaker_states WHERE endpoint_id = $1 FOR UPDATE`, endpointID).Scan(&pid))
	return tx, pid
}

// waitBlocked waits until n backends of the test database wait on a lock
// held by one of pids (0 matches any backend).
func (b *testBundle) waitBlocked(t *testing.T, n int, pids ...int) {
	t.Helper()
	require.Eventually(t, func() bool {
		var got int
		require.NoError(t, b.db.Pool.QueryRow(context.Background(), `
			SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND cardinality(pg_blocking_pids(pid)) > 0
				AND (0 = ANY($1) OR pg_blocking_pids(pid) && $1::int[])`, pids).Scan(&got))
		return got == n
	}, 10*time.Second, 5*time.Millisecond, "waiting for %d backends blocked by %v", n, pids)
}

// TestHandOffAndLedgerLockDeliveriesInOneOrder: a message job's hand-off
// and a ledger flush touch the same two deliveries, the flush's updates
// listed in the opposite order, while a third transaction holds both rows
// and lets go of one at a time. Were the rows locked in list order, each
// would take one and wait for the other, and Postgres would abort one
// ("deadlock detected"). Both must commit, and the server logs no
// deadlock.
func TestHandOffAndLedgerLockDeliveriesInOneOrder(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	b.endpoint(t, "acme")
	b.endpoint(t, "acme")
	m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, b.enq)
	require.NoError(t, err)
	require.Len(t, m.Deliveries, 2)
	const messageJob = 500
	ids := []string{m.Deliveries[0].ID, m.Deliveries[1].ID}
	slices.Sort(ids)
	_, err = b.db.Pool.Exec(ctx, `UPDATE deliveries SET job_id = $2 WHERE id = ANY($1)`, ids, messageJob)
	require.NoError(t, err)

	hold := func(id string) (pgx.Tx, int) {
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		var pid int
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid() FROM deliveries WHERE id = $1 FOR UPDATE`, id).Scan(&pid))
		return tx, pid
	}
	// The holder of the first row lets go first: the hand-off (in id
	// order) then takes it and waits for the second, which the flush (in
	// the opposite order) waits for too.
	holdFirst, pidFirst := hold(ids[0])
	holdSecond, _ := hold(ids[1])

	errs := make(chan error, 2)
	go func() {
		_, err := s.HandOff(ctx, store.Claim{JobID: messageJob, Attempt: 1}, []store.HandOff{{DeliveryID: ids[0], At: time.Now()}, {DeliveryID: ids[1], At: time.Now()}}, &queueRecorder{})
		errs <- err
	}()
	at := time.Now()
	go func() {
		var us []store.StatusUpdate
		for _, id := range []string{ids[1], ids[0]} {
			us = append(us, store.StatusUpdate{DeliveryID: id, Series: 1, Status: store.DeliveryWaiting, BreakerOpenUntil: &at, JobID: messageJob})
		}
		errs <- s.RecordLedger(ctx, nil, us)
	}()
	b.waitBlocked(t, 2, 0)
	require.NoError(t, holdFirst.Commit(ctx))
	b.waitBlocked(t, 0, pidFirst)
	b.waitBlocked(t, 2, 0)
	require.NoError(t, holdSecond.Commit(ctx))
	for range 2 {
		require.NoError(t, <-errs)
	}
	var deadlocks int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&deadlocks))
	require.Zero(t, deadlocks)
}
