package store_test

import (
	"context"
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
			_, err := s.FlushOutcomes(ctx, nil, runs(order...), nil, nil)
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
