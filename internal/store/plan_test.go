package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
		counts := []store.OutcomeCount{{EndpointID: e.ID, Generation: 1, BucketStart: breaker.BucketStart(cfg, time.Now()), Window: cfg.Window, Successes: 1}}
		runs := []store.RunCount{{EndpointID: e.ID, Generation: 1, Run: breaker.Run{Failures: 1, Prefix: 1, Max: 1, Suffix: 1}}}
		_, err := s.FlushOutcomes(ctx, counts, runs, req)
		require.NoError(t, err)
	}
	seqRead := func() int64 {
		t.Helper()
		_, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		var n int64
		require.NoError(t, b.db.Pool.QueryRow(ctx, `
			SELECT coalesce(sum(seq_tup_read), 0) FROM pg_stat_user_tables WHERE relname IN ('breaker_buckets', 'breaker_tallies', 'breaker_slots')`).Scan(&n))
		return n
	}
	for range 10 {
		flush()
	}
	// Other endpoints' buckets: rows none of the flushes above or below
	// touch.
	_, err = b.db.Pool.Exec(ctx, `
		INSERT INTO breaker_slots (endpoint_id, generation, shard, slot, bucket_start, successes, failures)
		SELECT 'ep_fill_' || g, 1, 'other', 0, now(), 1, 0 FROM generate_series(1, 50000) g`)
	require.NoError(t, err)
	before := seqRead()
	for range 3 {
		flush()
	}
	require.Less(t, seqRead()-before, int64(50000), "the grown table was seq-scanned by the flush")
}

// TestBreakerFlushReadsOnlyItsEndpointsRows: a flush at a fleet's scale
// (1,000 breakers, four processes' tallies of each, statistics fresh)
// reaches its endpoints' rows by key and never reads a whole table: joins
// let the planner hash every breaker and scan every tally at every flush
// of every dispatcher, a cost that grew with the fleet.
func TestBreakerFlushReadsOnlyItsEndpointsRows(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	_, err := b.db.Pool.Exec(ctx, `
		INSERT INTO endpoints SELECT (jsonb_populate_record(NULL::endpoints,
			to_jsonb(e) || jsonb_build_object('id', 'ep_fill_' || lpad(g::text, 4, '0')))).*
		FROM endpoints e, generate_series(1, 1000) g WHERE e.id = $1`, e.ID)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `
		INSERT INTO breaker_states (endpoint_id) SELECT id FROM endpoints ON CONFLICT DO NOTHING`)
	require.NoError(t, err)
	cfg := testCfg // 10s window: 500ms buckets
	_, err = b.db.Pool.Exec(ctx, `
		INSERT INTO breaker_slots (endpoint_id, generation, shard, slot, bucket_start, successes, failures)
		SELECT id, 1, 'd' || p, k, $1::timestamptz - make_interval(secs => k * 0.5), 1, 0
		FROM endpoints, generate_series(0, 2) k, generate_series(1, 4) p`, breaker.BucketStart(cfg, time.Now()))
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `ANALYZE breaker_states; ANALYZE breaker_slots`)
	require.NoError(t, err)

	var ids []string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `
		SELECT array_agg(id) FROM (SELECT id FROM endpoints WHERE id LIKE 'ep_fill_%' ORDER BY id LIMIT 10) x`).Scan(&ids))
	flush := func() {
		var counts []store.OutcomeCount
		var req []store.EvidenceRequest
		for _, id := range ids {
			counts = append(counts, store.OutcomeCount{EndpointID: id, Generation: 1, BucketStart: breaker.BucketStart(cfg, time.Now()), Window: cfg.Window, Successes: 3, Shard: "d1"})
			req = append(req, store.EvidenceRequest{EndpointID: id, Window: cfg.Window})
		}
		runs := []store.RunCount{
			{EndpointID: ids[0], Generation: 1, Run: breaker.Run{Failures: 1, Prefix: 1, Max: 1, Suffix: 1}},
			{EndpointID: ids[1], Generation: 1, Run: breaker.Run{Failures: 1, Prefix: 1, Max: 1, Suffix: 1}},
		}
		evs, err := s.FlushOutcomes(ctx, counts, runs, req[:3])
		require.NoError(t, err)
		require.Len(t, evs, 3)
		require.NotEmpty(t, evs[0].Buckets)
	}
	seqRead := func() int64 {
		t.Helper()
		_, err := b.db.Pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		var n int64
		require.NoError(t, b.db.Pool.QueryRow(ctx, `
			SELECT coalesce(sum(seq_tup_read), 0) FROM pg_stat_user_tables WHERE relname IN ('breaker_states', 'breaker_tallies', 'breaker_slots')`).Scan(&n))
		return n
	}
	before := seqRead()
	for range 3 {
		flush()
	}
	require.Less(t, seqRead()-before, int64(1000), "a flush of 10 endpoints scanned a table of 1,001 breakers or 12,000 tallies")
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

// TestLedgerClaimReadIsPlannedForItsIDs: the ledger's read of its batch's
// claims, run batch after batch on one connection over a month of daily
// partitions, is planned for its ids at every call and reads only the
// partition holding them. Prepared once and cached (pgx's default),
// PostgreSQL may switch a statement to a generic plan after its fifth
// call, and a generic plan cannot prune by an array parameter: it probes
// the index of every partition. S8 (a month of history, 270 ids a batch)
// read its claims in 18.8 ms a call so, against 1.6 ms planned for its
// ids. This test's own tables kept PostgreSQL on custom plans, so it
// checks what the connection caches as well as what the reads read.
func TestLedgerClaimReadIsPlannedForItsIDs(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	now := dailyPartitionsOnly(t, s, b, 30, 32)
	ep := b.endpoint(t, "acme")
	m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`1`)}, b.enq)
	require.NoError(t, err)
	// id is the i-th delivery id minted at.
	id := func(at time.Time, i int) string {
		base := store.IDBound("dlv", at)
		return fmt.Sprintf("%s%06d", base[:len(base)-6], i)
	}
	// 500 deliveries in each past day's partition, 300 in today's: the
	// batch.
	var rows [][]any
	for day := 1; day <= 30; day++ {
		for i := range 500 {
			rows = append(rows, []any{id(now.Add(-time.Duration(day)*24*time.Hour), i), m.ID, ep.ID, "acme", store.DeliveryDelivered})
		}
	}
	var batch []string
	for i := range 300 {
		batch = append(batch, id(now, i))
		rows = append(rows, []any{batch[i], m.ID, ep.ID, "acme", store.DeliveryPending})
	}
	_, err = b.db.Pool.CopyFrom(ctx, pgx.Identifier{"deliveries"}, []string{"id", "message_id", "endpoint_id", "tenant_id", "status"}, pgx.CopyFromRows(rows))
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `ANALYZE deliveries`)
	require.NoError(t, err)
	var mine string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM deliveries WHERE id = $1`, batch[0]).Scan(&mine))

	// One connection: every batch below runs where a plan would be cached.
	pool, err := store.OpenPool(ctx, store.PoolConfig{URL: b.db.URL, MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ls := store.New(pool, nil)
	record := func(n int) {
		t.Helper()
		at := now.Add(time.Duration(n) * time.Second)
		var attempts []store.Attempt
		var updates []store.StatusUpdate
		for _, d := range batch {
			attempts = append(attempts, store.Attempt{DeliveryID: d, MessageID: m.ID, EndpointID: ep.ID, AttemptNumber: n,
				AttemptedAt: at, Duration: time.Millisecond, Classification: "failure"})
			updates = append(updates, store.StatusUpdate{DeliveryID: d, Series: 1, Status: store.DeliveryPending, AttemptCount: n,
				LastAttemptAt: &at, Claim: store.Claim{JobID: 1, Attempt: 1}})
		}
		require.NoError(t, ls.RecordLedger(ctx, attempts, updates))
	}
	// otherScans flushes the connection's statistics and returns the
	// index scans of every deliveries partition but the batch's.
	otherScans := func() int64 {
		t.Helper()
		_, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		var n int64
		require.NoError(t, b.db.Pool.QueryRow(ctx, `
			SELECT coalesce(sum(idx_scan), 0)::bigint FROM pg_stat_user_tables
			WHERE relid IN (SELECT relid FROM pg_partition_tree('deliveries') WHERE isleaf) AND relid <> $1::regclass`, mine).Scan(&n))
		return n
	}
	for n := 1; n <= 6; n++ {
		record(n)
	}
	before := otherScans()
	for n := 7; n <= 10; n++ {
		record(n)
	}
	require.Zero(t, otherScans()-before, "the ledger's batches read other partitions than %s", mine)
	var cached []string
	rs, err := pool.Query(ctx, `SELECT statement FROM pg_prepared_statements WHERE statement ~* 'FROM deliveries .*WHERE .*id = ANY' AND statement !~ 'pg_prepared_statements'`)
	require.NoError(t, err)
	cached, err = pgx.CollectRows(rs, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, cached, "a read of deliveries by an array of ids cached for a generic plan")
}
