package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

var testCfg = breaker.Config{
	Trip: breaker.TripRate, FailureRateThreshold: 0.5, Window: 10 * time.Second, MinThroughput: 5,
	ConsecutiveFailures: 5, OpenDuration: time.Minute, OpenJitter: 0, OpenBackoff: 1,
	MaxOpenDuration: time.Minute, HalfOpenTrials: 2, HalfOpenConcurrency: 1,
}

// openBreaker trips an endpoint's breaker with an open_until in the past,
// so the next admission is a trial.
func (b *testBundle) openBreaker(t *testing.T, endpointID string) {
	t.Helper()
	past := time.Now().Add(-2 * time.Minute)
	brk := breaker.New(testCfg)
	brk.Window.Add(past, 0, 10)
	res := brk.Evaluate(testCfg, past, nil)
	require.NotNil(t, res.Transition)
	won, err := b.store.CommitTransition(context.Background(), endpointID, 1, brk, *res.Transition, store.TransitionMeta{Actor: "test"})
	require.NoError(t, err)
	require.True(t, won)
}

func TestCommitTransitionIsVersioned(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	e := b.endpoint(t, "acme")
	b.openBreaker(t, e.ID)
	// A second process deciding the same trip from the same generation loses.
	brk := breaker.New(testCfg)
	brk.Window.Add(time.Now(), 0, 10)
	res := brk.Evaluate(testCfg, time.Now(), nil)
	won, err := s.CommitTransition(context.Background(), e.ID, 1, brk, *res.Transition, store.TransitionMeta{Actor: "other"})
	require.NoError(t, err)
	require.False(t, won)
	trs, err := s.ListTransitions(context.Background(), e.ID, nil, 10)
	require.NoError(t, err)
	require.Len(t, trs, 1)
	require.Equal(t, "test", trs[0].Actor)
}

func TestTrialLeaseIsVisibleAndReleased(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	b.openBreaker(t, e.ID)
	pool := s.TrialLeases()

	tr, d, after, err := pool.Acquire(ctx, e.ID, testCfg, time.Minute, store.TransitionMeta{Actor: "test"})
	require.NoError(t, err)
	require.Equal(t, breaker.Trial, d.Admission)
	require.Equal(t, breaker.StateHalfOpen, after.State)
	det, err := s.BreakerDetails(ctx, e.ID, testCfg)
	require.NoError(t, err)
	require.True(t, det.TrialInFlight)
	require.Equal(t, 1, det.TripsLast24h)

	// The slot is taken: a second trial is refused fleet-wide.
	tr2, d2, _, err := pool.Acquire(ctx, e.ID, testCfg, time.Minute, store.TransitionMeta{Actor: "test"})
	require.NoError(t, err)
	require.Nil(t, tr2)
	require.Equal(t, breaker.ReasonHalfOpenBusy, d2.Reason)

	res, after, err := tr.Finish(ctx, testCfg, breaker.OutcomeSuccess, nil, store.TransitionMeta{Actor: "test"})
	require.NoError(t, err)
	require.True(t, res.Applied)
	require.Equal(t, 1, after.TrialSuccesses)
	det, err = s.BreakerDetails(ctx, e.ID, testCfg)
	require.NoError(t, err)
	require.False(t, det.TrialInFlight)

	list, err := s.ListBreakers(ctx, store.BreakerFilter{State: "half_open", Tenants: store.AllTenants(), Page: store.Page{Limit: 10}}, func(store.Endpoint) breaker.Config { return testCfg })
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, e.ID, list[0].Endpoint.ID)
	list, err = s.ListBreakers(ctx, store.BreakerFilter{State: "closed", Tenants: store.AllTenants(), Page: store.Page{Limit: 10}}, func(store.Endpoint) breaker.Config { return testCfg })
	require.NoError(t, err)
	require.Empty(t, list)
}

func TestOperateBreaker(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	b.openBreaker(t, e.ID)
	tr, err := s.OperateBreaker(ctx, e.ID, store.OperatorIsolate, testCfg, store.TransitionMeta{Actor: "alice", Note: "customer asked"})
	require.NoError(t, err)
	require.Equal(t, breaker.StateIsolated, tr.To)
	st, err := s.GetBreakerStatus(ctx, e.ID, testCfg)
	require.NoError(t, err)
	require.Equal(t, breaker.StateIsolated, st.Breaker.State)

	tr, err = s.OperateBreaker(ctx, e.ID, store.OperatorReset, testCfg, store.TransitionMeta{Actor: "bob", Note: "fixed"})
	require.NoError(t, err)
	require.Equal(t, breaker.StateClosed, tr.To)
	trs, err := s.ListTransitions(ctx, e.ID, nil, 10)
	require.NoError(t, err)
	require.Len(t, trs, 3)
	require.Equal(t, "bob", trs[0].Actor)
	require.Equal(t, "fixed", trs[0].Note)
	require.Equal(t, breaker.ReasonReset, trs[0].Transition.Reason)
	require.Equal(t, "alice", trs[1].Actor)

	_, err = s.OperateBreaker(ctx, "ep_missing", store.OperatorReset, testCfg, store.TransitionMeta{Actor: "bob"})
	require.ErrorIs(t, err, store.ErrNotFound)
}

func TestEpisodeStartIsTheLastExitFromClosed(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	_, err := s.EpisodeStart(ctx, e.ID, false)
	require.ErrorIs(t, err, store.ErrNotFound, "a breaker that never opened has no episode")

	b.openBreaker(t, e.ID)
	trs, err := s.ListTransitions(ctx, e.ID, nil, 1)
	require.NoError(t, err)
	opened := trs[0].Transition.At
	// Moves within the episode (open -> isolated) do not start a new one.
	_, err = s.OperateBreaker(ctx, e.ID, store.OperatorIsolate, testCfg, store.TransitionMeta{Actor: "alice"})
	require.NoError(t, err)
	at, err := s.EpisodeStart(ctx, e.ID, false)
	require.NoError(t, err)
	require.WithinDuration(t, opened, at, time.Millisecond)

	_, err = s.EpisodeStart(ctx, e.ID, true)
	require.ErrorIs(t, err, store.ErrNotFound, "the shadow history is apart")

	// Closed again, then isolated: the isolation starts the next episode.
	_, err = s.OperateBreaker(ctx, e.ID, store.OperatorReset, testCfg, store.TransitionMeta{Actor: "bob"})
	require.NoError(t, err)
	tr, err := s.OperateBreaker(ctx, e.ID, store.OperatorIsolate, testCfg, store.TransitionMeta{Actor: "carol"})
	require.NoError(t, err)
	at, err = s.EpisodeStart(ctx, e.ID, false)
	require.NoError(t, err)
	require.WithinDuration(t, tr.At, at, time.Millisecond)
}

// TestFlushKeepsARingOfRowsPerProcess: a process's counts of a busy
// endpoint go to a fixed ring of rows (store.TallySlots), whatever the
// number of buckets it counts over time: a count adds to its bucket's row,
// a younger bucket writes over an older one's row, and a late count of a
// bucket older than its row's is dropped. The evidence read back is the
// window's buckets, each once, summed over the processes.
func TestFlushKeepsARingOfRowsPerProcess(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	cfg := testCfg
	cfg.Window = time.Minute // 3 s buckets: the test's own time stays within its window
	now := time.Now()
	count := func(shard string, ago time.Duration, successes, failures int) store.OutcomeCount {
		return store.OutcomeCount{EndpointID: e.ID, Generation: 1, Shard: shard, Window: cfg.Window,
			BucketStart: breaker.BucketStart(cfg, now.Add(-ago)), Successes: successes, Failures: failures}
	}
	rows := func(shard string) (n int) {
		t.Helper()
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM breaker_slots WHERE endpoint_id = $1 AND shard = $2`, e.ID, shard).Scan(&n))
		return n
	}
	// 10 minutes of buckets, oldest first, one flush each, from two processes:
	// the ring stays at TallySlots rows each.
	for i := 199; i >= 0; i-- {
		for _, shard := range []string{"a", "b"} {
			_, err := s.FlushOutcomes(ctx, []store.OutcomeCount{count(shard, time.Duration(i)*3*time.Second, 1, i%2)}, nil, nil)
			require.NoError(t, err)
		}
	}
	require.Equal(t, store.TallySlots, rows("a"))
	require.Equal(t, store.TallySlots, rows("b"))
	// One flush carrying all 200 buckets again (two sharing a slot keep the
	// younger): still one ring.
	var all []store.OutcomeCount
	for i := range 200 {
		all = append(all, count("a", time.Duration(i)*3*time.Second, 1, 0))
	}
	_, err := s.FlushOutcomes(ctx, all, nil, nil)
	require.NoError(t, err)
	require.Equal(t, store.TallySlots, rows("a"))

	// A late count of a bucket its slot has moved past is dropped; one of
	// the slot's own bucket adds to it.
	_, err = s.FlushOutcomes(ctx, []store.OutcomeCount{count("a", time.Duration(store.TallySlots)*3*time.Second, 0, 50)}, nil, nil)
	require.NoError(t, err)
	var held time.Time
	var heldFailures int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT bucket_start, failures FROM breaker_slots WHERE endpoint_id = $1 AND shard = 'a' AND bucket_start <= $2 ORDER BY bucket_start DESC LIMIT 1`,
		e.ID, now).Scan(&held, &heldFailures))
	require.True(t, held.Equal(breaker.BucketStart(cfg, now)), "the slot still holds its younger bucket, %s", held)
	require.Zero(t, heldFailures)
	evs, err := s.FlushOutcomes(ctx, []store.OutcomeCount{count("b", 0, 0, 1)}, nil, []store.EvidenceRequest{{EndpointID: e.ID, Window: cfg.Window}})
	require.NoError(t, err)
	require.Len(t, evs, 1)
	// The window's buckets (the span reaches 22 widths back from the
	// database's clock), a row of each process for each: a's counted twice
	// with a success each, b's once with one, b's failures on odd buckets
	// plus the last flush's one. The late 50 failures are not in it.
	rowsOf := map[time.Time]int{}
	successes, failures := map[time.Time]int{}, 0
	for _, bk := range evs[0].Buckets {
		require.WithinDuration(t, now, bk.Start, breaker.BucketSpan(cfg.Window)+time.Second, "a bucket of the window")
		rowsOf[bk.Start]++
		successes[bk.Start] += bk.Successes
		failures += bk.Failures
	}
	require.GreaterOrEqual(t, len(rowsOf), breaker.BucketsPerWindow/2)
	for start, n := range rowsOf {
		require.Equal(t, 2, n, "bucket %s: a row of each process", start)
		require.Equal(t, 3, successes[start], "bucket %s", start)
	}
	require.Less(t, failures, 50)
}

// TestBreakerRowsAreInsertedOnceThenUpdated: a busy endpoint's rows are
// inserted once (a ring per process) and then only updated, never
// deleted: three rings' worth of buckets of ten endpoints, each counted by
// two flushes, insert 40 rows per endpoint and update them from then on.
// One bucket row per bucket, inserted and later deleted, was two writes
// to the table and its index per bucket and process. The updates change
// no indexed column, so PostgreSQL makes them in place (HOT) whenever the
// page has room: all 2,000 here when the test runs alone, fewer when
// other sessions' snapshots keep the page's dead versions from being
// cleared, so that share is logged, not asserted.
func TestBreakerRowsAreInsertedOnceThenUpdated(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	pool, err := store.OpenPool(ctx, store.PoolConfig{URL: b.db.URL, MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := store.New(pool, nil)
	cfg := testCfg // 10s window: 500ms buckets
	var eps []store.Endpoint
	for range 10 {
		eps = append(eps, b.endpoint(t, "acme"))
	}
	now := time.Now()
	const buckets = 3 * store.TallySlots
	for i := buckets - 1; i >= 0; i-- {
		var counts []store.OutcomeCount
		for _, e := range eps {
			counts = append(counts, store.OutcomeCount{EndpointID: e.ID, Generation: 1, Shard: "a", Window: cfg.Window,
				BucketStart: breaker.BucketStart(cfg, now.Add(-time.Duration(i)*500*time.Millisecond)), Successes: 1})
		}
		for range 2 {
			_, err := s.FlushOutcomes(ctx, counts, nil, nil)
			require.NoError(t, err)
		}
	}
	// The pool's one session ran every flush: its statistics, sent now.
	_, err = pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
	require.NoError(t, err)
	var ins, upd, hot, del int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `
		SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables WHERE relname = 'breaker_slots'`).Scan(&ins, &upd, &hot, &del))
	require.EqualValues(t, len(eps)*store.TallySlots, ins, "a ring of rows per endpoint, inserted once")
	require.EqualValues(t, 2*len(eps)*buckets-len(eps)*store.TallySlots, upd, "every other write an update")
	require.Zero(t, del)
	t.Logf("%d rows inserted, %d updates of which %d in place, %d deleted", ins, upd, hot, del)
}

// TestBreakerSlotsOnAnUpgradedDatabase: a database at version 48 with
// tallies of a process of that version migrates to the slots, and during
// the rolling upgrade that follows the evidence adds up both: the old
// process's rows (which it goes on writing, by its own statement) and a
// new one's.
func TestBreakerSlotsOnAnUpgradedDatabase(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	resetTo(t, db, 48)
	ctx := context.Background()
	cfg := testCfg
	start := breaker.BucketStart(cfg, time.Now())
	oldFlush := func() {
		t.Helper()
		_, err := db.Pool.Exec(ctx, `
			INSERT INTO breaker_tallies AS bb (endpoint_id, generation, bucket_start, shard, successes, failures)
			VALUES ('ep_old', 1, $1, 'v48', 1, 2)
			ON CONFLICT (endpoint_id, generation, bucket_start, shard) DO UPDATE
				SET successes = bb.successes + EXCLUDED.successes, failures = bb.failures + EXCLUDED.failures`, start)
		require.NoError(t, err)
	}
	_, err := db.Pool.Exec(ctx, `
		INSERT INTO endpoints (id, tenant_id, url, secret) VALUES ('ep_old', 'acme', 'https://example.com/h', 'whsec_x');
		INSERT INTO breaker_states (endpoint_id) VALUES ('ep_old')`)
	require.NoError(t, err)
	oldFlush()

	require.NoError(t, store.Migrate(ctx, db.Pool, nil))
	oldFlush()
	s := store.New(db.Pool, nil)
	evs, err := s.FlushOutcomes(ctx, []store.OutcomeCount{{EndpointID: "ep_old", Generation: 1, Shard: "v49", Window: cfg.Window,
		BucketStart: start, Successes: 4, Failures: 1}}, nil, []store.EvidenceRequest{{EndpointID: "ep_old", Window: cfg.Window}})
	require.NoError(t, err)
	require.Len(t, evs, 1)
	var successes, failures int
	for _, bk := range evs[0].Buckets {
		successes += bk.Successes
		failures += bk.Failures
	}
	require.Equal(t, 2+4, successes, "both versions' counts")
	require.Equal(t, 4+1, failures)
}

// TestFlushThatReadsNothingIsOneStatement: a flush that only adds counts (a
// fleet whose traffic succeeds sends one per hold from every dispatcher)
// is one statement in its own transaction: no BEGIN, plan setting or
// COMMIT, and nothing deleted. A flush that reads evidence back still
// runs in a transaction.
func TestFlushThatReadsNothingIsOneStatement(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	s, rec := recordedStore(t, b.db)
	ctx := context.Background()
	cfg := testCfg // 10s window: 500ms buckets
	now := time.Now()
	count := func(e store.Endpoint, ago time.Duration, failures int) store.OutcomeCount {
		return store.OutcomeCount{EndpointID: e.ID, Generation: 1, Shard: "a", Window: cfg.Window,
			BucketStart: breaker.BucketStart(cfg, now.Add(-ago)), Successes: 1, Failures: failures}
	}
	e := b.endpoint(t, "acme")
	// A bucket 61 s old (a slot of its own), then two of the window.
	_, err := s.FlushOutcomes(ctx, []store.OutcomeCount{count(e, 0, 0), count(e, 61*time.Second, 0)}, nil, nil)
	require.NoError(t, err)
	rec.take()
	evs, err := s.FlushOutcomes(ctx, []store.OutcomeCount{count(e, cfg.Window/2, 0), count(e, 0, 0)}, nil, nil)
	require.NoError(t, err)
	require.Empty(t, evs)
	sent := rec.take()
	require.Len(t, sent, 1, "one statement: %q", sent)
	var successes, rows int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT successes FROM breaker_slots WHERE endpoint_id = $1 AND bucket_start = $2`,
		e.ID, breaker.BucketStart(cfg, now)).Scan(&successes))
	require.Equal(t, 2, successes, "a count adds to its bucket's row")
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM breaker_slots WHERE endpoint_id = $1`, e.ID).Scan(&rows))
	require.Equal(t, 3, rows, "the minute-old bucket's row stays until its slot is written again")

	// A failure asks for the evidence back: a transaction.
	rec.take()
	evs, err = s.FlushOutcomes(ctx, []store.OutcomeCount{count(e, 0, 1)}, nil, []store.EvidenceRequest{{EndpointID: e.ID, Window: cfg.Window}})
	require.NoError(t, err)
	require.Len(t, evs, 1)
	failures := 0
	for _, bk := range evs[0].Buckets {
		failures += bk.Failures
	}
	require.Equal(t, 1, failures, "the minute-old row is not in the window")
	require.Equal(t, "begin", strings.ToLower(rec.take()[0]))

	// A count without its breaker's window has no slot: refused, nothing written.
	_, err = s.FlushOutcomes(ctx, []store.OutcomeCount{{EndpointID: e.ID, Generation: 1, Shard: "a", BucketStart: now, Successes: 1}}, nil, nil)
	require.ErrorContains(t, err, "no window")
}

// TestPruneBucketsKeepsBusyRings: the periodic prune deletes the rows of
// past generations and of buckets older than the longest window's span,
// but leaves a row of breaker_slots until two such spans have passed (its
// slot is written again after two windows): a busy endpoint's ring is
// updated in place, never deleted and inserted again. The older tables'
// rows go after one span.
func TestPruneBucketsKeepsBusyRings(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	cfg := testCfg
	keep := breaker.BucketSpan(cfg.Window) // 11 s
	now := time.Now()
	at := func(ago time.Duration, gen int64) store.OutcomeCount {
		return store.OutcomeCount{EndpointID: e.ID, Generation: gen, Shard: "a", Window: cfg.Window,
			BucketStart: breaker.BucketStart(cfg, now.Add(-ago)), Successes: 1}
	}
	_, err := s.FlushOutcomes(ctx, []store.OutcomeCount{at(0, 1), at(15*time.Second, 1), at(30*time.Second, 1)}, nil, nil)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `INSERT INTO breaker_tallies (endpoint_id, generation, bucket_start, shard, successes, failures)
		VALUES ($1, 1, $2, 'old', 1, 0), ($1, 1, $3, 'old', 1, 0)`, e.ID, now, now.Add(-15*time.Second))
	require.NoError(t, err)
	n, err := s.PruneBuckets(ctx, keep, 100)
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "the 30 s old slot row and the 15 s old tally row")
	var slotRows, tallyRows int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM breaker_slots), (SELECT count(*) FROM breaker_tallies)`).Scan(&slotRows, &tallyRows))
	require.Equal(t, 2, slotRows)
	require.Equal(t, 1, tallyRows)

	// A new generation: the previous one's rows go whatever their age.
	_, err = b.db.Pool.Exec(ctx, `UPDATE breaker_states SET generation = 2 WHERE endpoint_id = $1`, e.ID)
	require.NoError(t, err)
	n, err = s.PruneBuckets(ctx, keep, 100)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
}

// TestFlushesOfTwoProcessesNeverWaitForEachOther: each process adds its
// outcomes to rows of its own (its shard), so a flush never waits on a
// bucket row another process's flush holds, and the evidence adds every
// process's rows up (and the previous version's table's, still written
// during a rolling upgrade). A flush of the same shard does wait: the
// rows are what the test holds.
func TestFlushesOfTwoProcessesNeverWaitForEachOther(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	cfg := testCfg
	start := breaker.BucketStart(cfg, time.Now())
	count := func(shard string, failures int) []store.OutcomeCount {
		return []store.OutcomeCount{{EndpointID: e.ID, Generation: 1, BucketStart: start, Window: cfg.Window, Failures: failures, Shard: shard}}
	}
	_, err := s.FlushOutcomes(ctx, count("a", 1), nil, nil)
	require.NoError(t, err)
	// Previous versions' dispatchers' rows of the same bucket.
	_, err = b.db.Pool.Exec(ctx, `INSERT INTO breaker_buckets (endpoint_id, generation, bucket_start, successes, failures) VALUES ($1, 1, $2, 0, 4)`, e.ID, start)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `INSERT INTO breaker_tallies (endpoint_id, generation, bucket_start, shard, successes, failures) VALUES ($1, 1, $2, 'v48', 0, 8)`, e.ID, start)
	require.NoError(t, err)

	// Process a's next flush, held open mid-transaction on its row.
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `UPDATE breaker_slots SET failures = failures + 1 WHERE endpoint_id = $1 AND shard = 'a'`, e.ID)
	require.NoError(t, err)

	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	evs, err := s.FlushOutcomes(bctx, count("b", 2), nil, []store.EvidenceRequest{{EndpointID: e.ID, Window: cfg.Window}})
	require.NoError(t, err, "process b's flush does not wait for a's")
	require.Len(t, evs, 1)
	failures := 0
	for _, bk := range evs[0].Buckets {
		failures += bk.Failures
	}
	require.Equal(t, 1+2+4+8, failures, "every process's rows of the bucket, the three tables'")

	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = s.FlushOutcomes(actx, count("a", 1), nil, nil)
	require.Error(t, err, "a flush of the same shard waits for the row")
}
