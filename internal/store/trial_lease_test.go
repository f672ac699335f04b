package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/store"
)

// dispatcherPool opens a pool of its own, as another dispatcher's, whose
// sessions carry a name of their own (to end them) and the given
// idle_session_timeout (0: none).
func (b *testBundle) dispatcherPool(t *testing.T, idle time.Duration) (*pgxpool.Pool, string) {
	t.Helper()
	name := fmt.Sprintf("trial-test-%d", rand.Int64())
	pc, err := pgxpool.ParseConfig(b.db.URL)
	require.NoError(t, err)
	pc.MaxConns = 4
	pc.ConnConfig.RuntimeParams["application_name"] = name
	if idle > 0 {
		pc.ConnConfig.RuntimeParams["idle_session_timeout"] = fmt.Sprint(idle.Milliseconds())
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, name
}

// waitSessionsGone waits until no session named name is left.
func (b *testBundle) waitSessionsGone(t *testing.T, name string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.db.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, name).Scan(&n))
		return n == 0
	}, 10*time.Second, 5*time.Millisecond, "sessions of %s ended", name)
}

// TestTrialOutlivesItsSession: the sessions of the dispatcher whose trial
// is in flight end (a terminated backend; an idle timeout shorter than the
// request, as a pooler's or a failover's restart would) while its request
// runs. No second trial is let in, and the first trial's outcome still
// counts when it comes.
func TestTrialOutlivesItsSession(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		idle time.Duration
		end  func(t *testing.T, b *testBundle, name string)
	}{
		{"terminated backend", 0, func(t *testing.T, b *testBundle, name string) {
			var n int
			require.NoError(t, b.db.Pool.QueryRow(context.Background(), `
				SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE datname = current_database() AND application_name = $1`, name).Scan(&n))
			require.Positive(t, n, "the trial's session was terminated")
		}},
		{"idle session timeout", 200 * time.Millisecond, func(*testing.T, *testBundle, string) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			ctx := context.Background()
			e := b.endpoint(t, "acme")
			b.openBreaker(t, e.ID)
			pool, name := b.dispatcherPool(t, tc.idle)
			first := store.New(pool, nil).TrialLeases()
			meta := store.TransitionMeta{Actor: "dispatcher-1"}
			// An endpoint timeout of 60 s and the margin.
			tr, d, _, err := first.Acquire(ctx, e.ID, testCfg, 75*time.Second, meta)
			require.NoError(t, err)
			require.Equal(t, breaker.Trial, d.Admission)

			tc.end(t, b, name)
			b.waitSessionsGone(t, name)

			other, d, _, err := s.TrialLeases().Acquire(ctx, e.ID, testCfg, 75*time.Second, store.TransitionMeta{Actor: "dispatcher-2"})
			require.NoError(t, err)
			require.Nil(t, other, "a second trial was let in")
			require.Equal(t, breaker.ReasonHalfOpenBusy, d.Reason)
			det, err := s.BreakerDetails(ctx, e.ID, testCfg)
			require.NoError(t, err)
			require.True(t, det.TrialInFlight)

			res, after, err := tr.Finish(ctx, testCfg, breaker.OutcomeSuccess, nil, meta)
			require.NoError(t, err, "the outcome is recorded on a new connection")
			require.True(t, res.Applied)
			require.Equal(t, 1, after.TrialSuccesses, "the first trial's outcome counts")
			next, d, _, err := s.TrialLeases().Acquire(ctx, e.ID, testCfg, 75*time.Second, store.TransitionMeta{Actor: "dispatcher-2"})
			require.NoError(t, err)
			require.Equal(t, breaker.Trial, d.Admission, "the slot is free once the trial finished")
			_, _, err = next.Finish(ctx, testCfg, breaker.OutcomeIgnore, nil, meta)
			require.NoError(t, err)
		})
	}
}

// TestTrialLeaseExpires: a trial that never finishes (its dispatcher died)
// holds its slot until its lease expires, on the database's clock; then a
// new trial takes the slot, and the first trial's late outcome is recorded
// for nothing: a success that would close the breaker leaves it half-open.
func TestTrialLeaseExpires(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	b.openBreaker(t, e.ID)
	cfg := testCfg
	cfg.HalfOpenTrials = 1 // one success closes
	meta := store.TransitionMeta{Actor: "test"}
	const lease = 200 * time.Millisecond

	late, d, _, err := s.TrialLeases().Acquire(ctx, e.ID, cfg, lease, meta)
	require.NoError(t, err)
	require.Equal(t, breaker.Trial, d.Admission)
	var length time.Duration
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT expires_at - acquired_at FROM trial_leases WHERE endpoint_id = $1`, e.ID).Scan(&length))
	require.Equal(t, lease, length, "the lease is the length asked for, from the database's clock")
	require.Equal(t, late.ExpiresAt, late.ExpiresAt.UTC())

	require.Eventually(t, func() bool {
		det, err := s.BreakerDetails(ctx, e.ID, cfg)
		require.NoError(t, err)
		return !det.TrialInFlight
	}, 10*time.Second, 5*time.Millisecond, "the lease expired")
	next, d, _, err := s.TrialLeases().Acquire(ctx, e.ID, cfg, time.Minute, meta)
	require.NoError(t, err)
	require.Equal(t, breaker.Trial, d.Admission, "a new trial after the expiry")
	require.Equal(t, late.Slot(), next.Slot(), "on the expired slot")

	res, after, err := late.Finish(ctx, cfg, breaker.OutcomeSuccess, nil, meta)
	require.ErrorIs(t, err, store.ErrTrialLeaseLost)
	require.False(t, res.Applied)
	require.Nil(t, res.Transition)
	require.Equal(t, breaker.StateHalfOpen, after.State, "the late success did not close the breaker")
	det, err := s.BreakerDetails(ctx, e.ID, cfg)
	require.NoError(t, err)
	require.True(t, det.TrialInFlight, "the late Finish freed nothing of the new trial's")
	require.Zero(t, det.Status.Breaker.TrialSuccesses)

	res, after, err = next.Finish(ctx, cfg, breaker.OutcomeSuccess, nil, meta)
	require.NoError(t, err)
	require.NotNil(t, res.Transition)
	require.Equal(t, breaker.StateClosed, after.State, "the holder's success closes it")
}

// TestTrialSlotsNeverExceedConcurrency: four dispatchers (pools of their
// own), four workers each, race for an endpoint's three trial slots; no
// more than three trials are ever in flight.
func TestTrialSlotsNeverExceedConcurrency(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	b.openBreaker(t, e.ID)
	cfg := testCfg
	cfg.HalfOpenConcurrency, cfg.HalfOpenTrials = 3, 1000 // never closes
	var (
		inFlight, most, admitted atomic.Int64
		mu                       sync.Mutex
		seen                     = map[int]bool{}
	)
	var g errgroup.Group
	for range 4 {
		pool, _ := b.dispatcherPool(t, 0)
		leases := store.New(pool, nil).TrialLeases()
		for range 4 {
			g.Go(func() error {
				for range 20 {
					tr, d, after, err := leases.Acquire(ctx, e.ID, cfg, time.Minute, store.TransitionMeta{Actor: "racer"})
					if err != nil {
						return err
					}
					if d.Admission != breaker.Trial {
						if d.Reason != breaker.ReasonHalfOpenBusy {
							return fmt.Errorf("refused for %q", d.Reason)
						}
						continue
					}
					n := inFlight.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					admitted.Add(1)
					if after.TrialsInFlight > cfg.HalfOpenConcurrency {
						return fmt.Errorf("admitted with %d in flight", after.TrialsInFlight)
					}
					mu.Lock()
					seen[tr.Slot()] = true
					mu.Unlock()
					inFlight.Add(-1) // before the slot goes back
					if _, _, err := tr.Finish(ctx, cfg, breaker.OutcomeIgnore, nil, store.TransitionMeta{Actor: "racer"}); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}
	require.NoError(t, g.Wait())
	require.Positive(t, admitted.Load())
	require.LessOrEqual(t, most.Load(), int64(cfg.HalfOpenConcurrency), "trials in flight at once")
	for slot := range seen {
		require.Less(t, slot, cfg.HalfOpenConcurrency)
	}
	require.Zero(t, b.count(t, "trial_leases"), "every slot given back")
}

// TestTrialFinishHasADeadline: a trial whose outcome cannot be written (the
// breaker row is stuck behind another transaction, as on a stalled
// database) gives up within its step deadline instead of holding the
// worker; its slot stays taken until the lease expires, never longer.
func TestTrialFinishHasADeadline(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	b.openBreaker(t, e.ID)
	leases := s.TrialLeases()
	leases.SetStepTimeout(300 * time.Millisecond)
	meta := store.TransitionMeta{Actor: "test"}

	tr, d, _, err := leases.Acquire(ctx, e.ID, testCfg, time.Second, meta)
	require.NoError(t, err)
	require.Equal(t, breaker.Trial, d.Admission)
	hold, _ := b.lockBreaker(t, e.ID)

	done := make(chan error, 1)
	go func() {
		_, _, err := tr.Finish(context.WithoutCancel(ctx), testCfg, breaker.OutcomeSuccess, nil, meta)
		done <- err
	}()
	select {
	case err := <-done:
		require.Error(t, err, "the outcome was not recorded")
	case <-time.After(10 * time.Second):
		_ = hold.Rollback(ctx)
		<-done
		t.Fatal("Finish waited on the stuck breaker row past its deadline")
	}
	require.NoError(t, hold.Rollback(ctx))
	require.Eventually(t, func() bool {
		det, err := s.BreakerDetails(ctx, e.ID, testCfg)
		require.NoError(t, err)
		return !det.TrialInFlight
	}, 10*time.Second, 10*time.Millisecond, "the slot is free at the lease's expiry")
}

// TestTrialLeasesOnAnUpgradedDatabase: a database of the version before
// trial leases, with a breaker open past its open_until, migrates with the
// dispatchers' tables in use, and its breaker then admits one trial.
func TestTrialLeasesOnAnUpgradedDatabase(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	db := b.db
	resetTo(t, db, 40)
	_, err := db.Pool.Exec(ctx, `
		INSERT INTO endpoints (id, tenant_id, url, secret) VALUES ('ep_old', 'acme', 'https://example.com/h', 'whsec_x');
		INSERT INTO breaker_states (endpoint_id, state, generation, opened_at, open_until)
			VALUES ('ep_old', 'open', 2, now() - interval '2 minutes', now() - interval '1 minute')`)
	require.NoError(t, err)

	require.NoError(t, store.Migrate(ctx, db.Pool, nil))
	s := store.New(db.Pool, nil)
	meta := store.TransitionMeta{Actor: "test"}
	tr, d, after, err := s.TrialLeases().Acquire(ctx, "ep_old", testCfg, time.Minute, meta)
	require.NoError(t, err)
	require.Equal(t, breaker.Trial, d.Admission)
	require.Equal(t, breaker.StateHalfOpen, after.State)
	other, d, _, err := s.TrialLeases().Acquire(ctx, "ep_old", testCfg, time.Minute, meta)
	require.NoError(t, err)
	require.Nil(t, other)
	require.Equal(t, breaker.ReasonHalfOpenBusy, d.Reason)
	res, _, err := tr.Finish(ctx, testCfg, breaker.OutcomeSuccess, nil, meta)
	require.NoError(t, err)
	require.True(t, res.Applied)
}
