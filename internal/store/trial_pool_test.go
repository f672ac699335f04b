package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/store"
)

// TestTrialPoolNeverMakesAWorkerWait: with every trial connection held by
// a trial in flight, a worker asking to probe another endpoint learns at
// once that it may not (half_open_busy) instead of queueing for a
// connection until its job's deadline.
func TestTrialPoolNeverMakesAWorkerWait(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	ea, eb := b.endpoint(t, "acme"), b.endpoint(t, "acme")
	b.openBreaker(t, ea.ID)
	b.openBreaker(t, eb.ID)
	pool, err := s.OpenTrialPool(ctx, b.db.URL, 1, time.Minute, "store-test")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	meta := store.TransitionMeta{Actor: "test"}

	held, d, _, err := pool.Acquire(ctx, ea.ID, testCfg, meta)
	require.NoError(t, err)
	require.Equal(t, breaker.Trial, d.Admission)
	finished := false
	t.Cleanup(func() {
		if !finished { // a failed check must not leave the pool's Close waiting
			_, _, _ = held.Finish(ctx, testCfg, breaker.OutcomeIgnore, nil, meta)
		}
	})

	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	tr, d, _, err := pool.Acquire(wctx, eb.ID, testCfg, meta)
	took := time.Since(start)
	require.NoError(t, err, "a full pool is an answer, not an error")
	require.Nil(t, tr)
	require.Equal(t, breaker.ReasonHalfOpenBusy, d.Reason)
	require.Less(t, took, 2*time.Second, "answered without waiting for a connection")

	finished = true
	_, _, err = held.Finish(ctx, testCfg, breaker.OutcomeSuccess, nil, meta)
	require.NoError(t, err)
	tr, d, _, err = pool.Acquire(ctx, eb.ID, testCfg, meta)
	require.NoError(t, err)
	require.Equal(t, breaker.Trial, d.Admission, "the connection is free again")
	_, _, err = tr.Finish(ctx, testCfg, breaker.OutcomeSuccess, nil, meta)
	require.NoError(t, err)
}

// TestTrialFinishHasADeadline: a trial whose outcome cannot be written (the
// breaker row is stuck behind another transaction, as on a stalled
// database) gives up within its step deadline and frees its slot, instead
// of holding the worker, the lock and the connection for good.
func TestTrialFinishHasADeadline(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	b.openBreaker(t, e.ID)
	pool, err := s.OpenTrialPool(ctx, b.db.URL, 2, time.Minute, "store-test")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	pool.SetStepTimeout(300 * time.Millisecond)
	meta := store.TransitionMeta{Actor: "test"}

	tr, d, _, err := pool.Acquire(ctx, e.ID, testCfg, meta)
	require.NoError(t, err)
	require.Equal(t, breaker.Trial, d.Admission)
	hold, _ := b.lockBreaker(t, e.ID) // rolled back at cleanup, before the pool closes

	done := make(chan error, 1)
	go func() {
		_, _, err := tr.Finish(context.WithoutCancel(ctx), testCfg, breaker.OutcomeSuccess, nil, meta)
		done <- err
	}()
	select {
	case err := <-done:
		require.Error(t, err, "the outcome was not recorded")
	case <-time.After(10 * time.Second):
		_ = hold.Rollback(ctx) // let the stuck Finish end before the pool closes
		<-done
		t.Fatal("Finish waited on the stuck breaker row past its deadline")
	}
	// The connection that gave up is closed; its server session ends (and
	// the lock with it) once the server notices.
	require.Eventually(t, func() bool {
		det, err := s.BreakerDetails(ctx, e.ID, testCfg)
		require.NoError(t, err)
		return !det.TrialInFlight
	}, 10*time.Second, 10*time.Millisecond, "the slot lock was released")
	require.NoError(t, hold.Rollback(ctx))
}
