package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/store"
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

// TestFlushPrunesBucketsOutsideTheWindow: an active endpoint keeps about one
// window of buckets; older ones go with the next flush.
func TestFlushPrunesBucketsOutsideTheWindow(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	cfg := testCfg // 10s window: 500ms buckets
	now := time.Now()
	var counts []store.OutcomeCount
	for i := range 200 { // 100 s of buckets
		counts = append(counts, store.OutcomeCount{EndpointID: e.ID, Generation: 1, BucketStart: breaker.BucketStart(cfg, now.Add(-time.Duration(i)*500*time.Millisecond)), Successes: 1})
	}
	_, err := s.FlushOutcomes(ctx, counts, nil, nil, nil)
	require.NoError(t, err)
	require.Equal(t, 200, b.count(t, "breaker_tallies"))
	_, err = s.FlushOutcomes(ctx, counts[:1], nil, nil, []store.EvidenceRequest{{EndpointID: e.ID, Window: cfg.Window, Generation: 1}})
	require.NoError(t, err)
	n := b.count(t, "breaker_tallies")
	require.LessOrEqual(t, n, breaker.BucketsPerWindow+3, "one window of buckets remains")
	require.GreaterOrEqual(t, n, breaker.BucketsPerWindow)
}

// TestFlushThatReadsNothingIsOneStatement: a flush that only adds counts
// and prunes old buckets (a fleet whose traffic succeeds sends one per
// hold from every dispatcher) is one statement in its own transaction:
// no BEGIN, plan setting or COMMIT, and its prune no statement of its
// own. A flush that reads evidence back still runs in a transaction.
func TestFlushThatReadsNothingIsOneStatement(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	s, rec := recordedStore(t, b.db)
	ctx := context.Background()
	cfg := testCfg // 10s window: 500ms buckets
	now := time.Now()
	count := func(e store.Endpoint, ago time.Duration, failures int) store.OutcomeCount {
		return store.OutcomeCount{EndpointID: e.ID, Generation: 1, Shard: "a", BucketStart: breaker.BucketStart(cfg, now.Add(-ago)), Successes: 1, Failures: failures}
	}
	prune := func(e store.Endpoint) store.EvidenceRequest {
		return store.EvidenceRequest{EndpointID: e.ID, Window: cfg.Window, Shard: "a", Generation: 1}
	}
	rows := func(e store.Endpoint) (fresh, old int) {
		t.Helper()
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE bucket_start > now() - interval '11 s'), count(*) FILTER (WHERE bucket_start <= now() - interval '11 s')
			FROM breaker_tallies WHERE endpoint_id = $1`, e.ID).Scan(&fresh, &old))
		return fresh, old
	}
	for _, tc := range []struct {
		name               string
		counts, prune      bool
		freshAfter, oldAft int
	}{
		{name: "counts", counts: true, freshAfter: 2, oldAft: 1},
		{name: "prune", prune: true, freshAfter: 1, oldAft: 0},
		{name: "counts and prune", counts: true, prune: true, freshAfter: 2, oldAft: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := b.endpoint(t, "acme")
			// One fresh bucket and one a minute old.
			_, err := s.FlushOutcomes(ctx, []store.OutcomeCount{count(e, 0, 0), count(e, time.Minute, 0)}, nil, nil, nil)
			require.NoError(t, err)
			var counts []store.OutcomeCount
			var prunes []store.EvidenceRequest
			if tc.counts {
				counts = append(counts, count(e, cfg.Window/2, 0), count(e, 0, 0))
			}
			if tc.prune {
				prunes = append(prunes, prune(e))
			}
			rec.take()
			evs, err := s.FlushOutcomes(ctx, counts, nil, nil, prunes)
			require.NoError(t, err)
			require.Empty(t, evs)
			sent := rec.take()
			require.Len(t, sent, 1, "one statement: %q", sent)
			fresh, old := rows(e)
			require.Equal(t, tc.freshAfter, fresh, "fresh buckets")
			require.Equal(t, tc.oldAft, old, "buckets past the window")
			if tc.counts {
				var successes int
				require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT successes FROM breaker_tallies WHERE endpoint_id = $1 AND bucket_start = $2`,
					e.ID, breaker.BucketStart(cfg, now)).Scan(&successes))
				require.Equal(t, 2, successes, "a count adds to its bucket's row")
			}
		})
	}

	// A failure asks for the evidence back: a transaction.
	e := b.endpoint(t, "acme")
	rec.take()
	evs, err := s.FlushOutcomes(ctx, []store.OutcomeCount{count(e, 0, 1)}, nil,
		[]store.EvidenceRequest{{EndpointID: e.ID, Window: cfg.Window}}, []store.EvidenceRequest{prune(e)})
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Equal(t, 1, evs[0].Buckets[0].Failures)
	require.Equal(t, "begin", strings.ToLower(rec.take()[0]))
}

// TestFlushPrunesOnlyItsOwnShard: a process's prune deletes the old rows it
// wrote and leaves the other processes' to their own flushes, so N
// processes prune each row once, not N times; an unsharded prune (and the
// periodic one) deletes every process's.
func TestFlushPrunesOnlyItsOwnShard(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	cfg := testCfg // 10s window: 500ms buckets
	now := time.Now()
	old := func(shard string) []store.OutcomeCount {
		var counts []store.OutcomeCount
		for i := 40; i < 60; i++ { // 20 to 30 s ago: outside the window
			counts = append(counts, store.OutcomeCount{EndpointID: e.ID, Generation: 1, Shard: shard,
				BucketStart: breaker.BucketStart(cfg, now.Add(-time.Duration(i)*500*time.Millisecond)), Successes: 1})
		}
		return counts
	}
	for _, shard := range []string{"a", "b"} {
		_, err := s.FlushOutcomes(ctx, old(shard), nil, nil, nil)
		require.NoError(t, err)
	}
	shardRows := func(shard string) (n int) {
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM breaker_tallies WHERE shard = $1`, shard).Scan(&n))
		return n
	}
	require.Equal(t, 20, shardRows("b"))
	fresh := []store.OutcomeCount{{EndpointID: e.ID, Generation: 1, Shard: "a", BucketStart: breaker.BucketStart(cfg, now), Successes: 1}}
	_, err := s.FlushOutcomes(ctx, fresh, nil, nil, []store.EvidenceRequest{{EndpointID: e.ID, Window: cfg.Window, Shard: "a", Generation: 1}})
	require.NoError(t, err)
	require.Equal(t, 1, shardRows("a"), "a's old rows pruned, its fresh one kept")
	require.Equal(t, 20, shardRows("b"), "b's rows are b's to prune")
	_, err = s.FlushOutcomes(ctx, nil, nil, nil, []store.EvidenceRequest{{EndpointID: e.ID, Window: cfg.Window, Generation: 1}})
	require.NoError(t, err)
	require.Zero(t, shardRows("b"), "an unsharded prune takes every process's")
	require.Equal(t, 1, shardRows("a"))
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
		return []store.OutcomeCount{{EndpointID: e.ID, Generation: 1, BucketStart: start, Failures: failures, Shard: shard}}
	}
	_, err := s.FlushOutcomes(ctx, count("a", 1), nil, nil, nil)
	require.NoError(t, err)
	// A previous version's dispatcher's row of the same bucket.
	_, err = b.db.Pool.Exec(ctx, `INSERT INTO breaker_buckets (endpoint_id, generation, bucket_start, successes, failures) VALUES ($1, 1, $2, 0, 4)`, e.ID, start)
	require.NoError(t, err)

	// Process a's next flush, held open mid-transaction on its row.
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `UPDATE breaker_tallies SET failures = failures + 1 WHERE endpoint_id = $1 AND shard = 'a'`, e.ID)
	require.NoError(t, err)

	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	evs, err := s.FlushOutcomes(bctx, count("b", 2), nil, []store.EvidenceRequest{{EndpointID: e.ID, Window: cfg.Window}}, nil)
	require.NoError(t, err, "process b's flush does not wait for a's")
	require.Len(t, evs, 1)
	failures := 0
	for _, bk := range evs[0].Buckets {
		failures += bk.Failures
	}
	require.Equal(t, 1+2+4, failures, "every process's rows of the bucket, both tables'")

	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = s.FlushOutcomes(actx, count("a", 1), nil, nil, nil)
	require.Error(t, err, "a flush of the same shard waits for the row")
}
