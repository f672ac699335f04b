package store_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/store"
)

// TestLedgerUpdatePlansForTheTableAsItIs: the ledger's UPDATE of
// deliveries, run many times on one connection while the table is nearly
// empty, still finds its rows by index once the table has grown. A generic
// plan cached on the small table would seq-scan all 50,000 rows per call.
func TestLedgerUpdatePlansForTheTableAsItIs(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	ep := b.endpoint(t, "acme")
	// One connection: every call below runs where a plan would be cached.
	pool, err := store.OpenPool(ctx, store.PoolConfig{URL: b.db.URL, MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := store.New(pool, nil)
	m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`1`)}, b.enq)
	require.NoError(t, err)
	d := m.Deliveries[0]

	calls := 0
	update := func() {
		calls++
		require.NoError(t, s.RecordLedger(ctx, nil, []store.StatusUpdate{{
			DeliveryID: d.ID, Series: 1, Status: store.DeliveryPending, AttemptCount: calls,
		}}))
	}
	// stats flushes this connection's table statistics and returns the
	// deliveries partitions' rows read by seq scans and rows updated.
	stats := func() (seqRead, updated int64) {
		t.Helper()
		_, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			require.NoError(t, b.db.Pool.QueryRow(ctx, `
				SELECT coalesce(sum(seq_tup_read), 0)::bigint, coalesce(sum(n_tup_upd), 0)::bigint FROM pg_stat_user_tables
				WHERE relid IN (SELECT relid FROM pg_partition_tree('deliveries'))`).Scan(&seqRead, &updated))
			return updated >= int64(calls)
		}, 10*time.Second, 20*time.Millisecond, "statistics of %d updates", calls)
		return seqRead, updated
	}

	for range 10 {
		update()
	}
	_, err = b.db.Pool.Exec(ctx, `
		INSERT INTO deliveries (id, message_id, endpoint_id, tenant_id, status)
		SELECT 'dlv_fill_' || g, $1, $2, 'acme', 'pending' FROM generate_series(1, 50000) g`, m.ID, ep.ID)
	require.NoError(t, err)
	before, _ := stats()
	for range 3 {
		update()
	}
	after, _ := stats()
	require.Less(t, after-before, int64(50000), "the grown table was seq-scanned by the ledger's update")
}

// TestBreakerFlushPlansForTheTableAsItIs: a breaker flush, run many times on
// one connection while breaker_buckets is empty (a dispatcher's start),
// still finds an endpoint's buckets by index once the table has grown: its
// batch runs as cached statements, and a generic plan made on the empty
// table would seq-scan all 50,000 rows per flush.
func TestBreakerFlushPlansForTheTableAsItIs(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	pool, err := store.OpenPool(ctx, store.PoolConfig{URL: b.db.URL, MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := store.New(pool, nil)
	cfg := testCfg
	flushes := 0
	flush := func() {
		flushes++
		req := []store.EvidenceRequest{{EndpointID: e.ID, Window: cfg.Window}}
		counts := []store.OutcomeCount{{EndpointID: e.ID, Generation: 1, BucketStart: breaker.BucketStart(cfg, time.Now()), Successes: 1}}
		runs := []store.RunCount{{EndpointID: e.ID, Generation: 1, Run: breaker.Run{Failures: 1, Prefix: 1, Max: 1, Suffix: 1}}}
		_, err := s.FlushOutcomes(ctx, counts, runs, req, req)
		require.NoError(t, err)
	}
	seqRead := func() int64 {
		t.Helper()
		_, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		var n int64
		require.NoError(t, b.db.Pool.QueryRow(ctx, `
			SELECT coalesce(sum(seq_tup_read), 0) FROM pg_stat_user_tables WHERE relname IN ('breaker_buckets', 'breaker_tallies')`).Scan(&n))
		return n
	}
	for range 10 {
		flush()
	}
	// Other endpoints' buckets: rows none of the flushes above or below
	// touch.
	_, err = b.db.Pool.Exec(ctx, `
		INSERT INTO breaker_tallies (endpoint_id, generation, bucket_start, shard, successes, failures)
		SELECT 'ep_fill_' || g, 1, now(), 'other', 1, 0 FROM generate_series(1, 50000) g`)
	require.NoError(t, err)
	before := seqRead()
	for range 3 {
		flush()
	}
	require.Less(t, seqRead()-before, int64(50000), "the grown table was seq-scanned by the flush")
}

// TestPoolsRunWithoutJIT: a pool's sessions run with jit off (its
// compilation cost seconds a call on a short query with a pessimistic
// estimate), unless the URL sets jit itself.
func TestPoolsRunWithoutJIT(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	for _, tc := range []struct{ url, want string }{
		{b.db.URL, "off"},
		{b.db.URL + sep(b.db.URL) + "jit=on", "on"},
	} {
		pool, err := store.OpenPool(ctx, store.PoolConfig{URL: tc.url, MaxConns: 1})
		require.NoError(t, err)
		var jit string
		require.NoError(t, pool.QueryRow(ctx, `SHOW jit`).Scan(&jit))
		pool.Close()
		require.Equal(t, tc.want, jit, tc.url)
	}
}

// sep is what joins one more parameter to url.
func sep(url string) string {
	if strings.Contains(url, "?") {
		return "&"
	}
	return "?"
}
