package store_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

type fenceProbeArgs struct{}

func (fenceProbeArgs) Kind() string { return "fence_probe" }

// fenceProbe is a job whose runs report their start and return what the
// test sends them.
type fenceProbe struct {
	river.WorkerDefaults[fenceProbeArgs]
	started chan int           // the run's attempt
	results map[int]chan error // by attempt
}

func (p *fenceProbe) Work(ctx context.Context, job *river.Job[fenceProbeArgs]) error {
	p.started <- job.Attempt
	select {
	case err := <-p.results[job.Attempt]:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestRunOfALostJobWritesNothing: a dispatcher's run outlives its lease
// (the dispatcher cut off, its jobs rescued), another dispatcher runs the
// job again, and the first run then returns. Its outcome must not be
// written over the second run's: the job stays running, and the second
// run's outcome is the one that lands. With River's own driver the first
// run's completion lands on the running job and the second's retry is
// lost.
func TestRunOfALostJobWritesNothing(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	s := store.New(db.Pool, nil)
	var stale atomic.Int64
	driver := store.NewFencedDriver(db.Pool, store.FencedDriverConfig{Stale: func(n int) { stale.Add(int64(n)) }})
	probe := &fenceProbe{started: make(chan int, 2), results: map[int]chan error{1: make(chan error, 1), 2: make(chan error, 1)}}
	newClient := func(id string) *river.Client[pgx.Tx] {
		workers := river.NewWorkers()
		river.AddWorker(workers, probe)
		c, err := river.NewClient(driver, &river.Config{
			ID:            id,
			Workers:       workers,
			Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
			FetchCooldown: 20 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond,
			Middleware: []rivertype.Middleware{&store.RunFence{}},
		})
		require.NoError(t, err)
		require.NoError(t, c.Start(ctx))
		t.Cleanup(func() {
			stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_ = c.Stop(stopCtx)
		})
		return c
	}
	a := newClient("dispatcher-a")
	job, err := a.Insert(ctx, fenceProbeArgs{}, &river.InsertOpts{MaxAttempts: 5})
	require.NoError(t, err)
	require.Equal(t, 1, <-probe.started)

	// dispatcher-a is declared gone while its run goes on; b takes the job.
	n, _, err := s.RescueJobsOf(ctx, []string{"dispatcher-a"})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	newClient("dispatcher-b")
	require.Equal(t, 2, <-probe.started)

	// a's run returns: nothing of it is written.
	probe.results[1] <- nil
	var state string
	var attempt int
	require.Eventually(t, func() bool {
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT state, attempt FROM river_job WHERE id = $1`, job.Job.ID).Scan(&state, &attempt))
		return stale.Load() == 1 || state != "running"
	}, 30*time.Second, 10*time.Millisecond, "the lost run's outcome reaches the database")
	require.Equal(t, "running", state, "the lost run's completion is not written over the live run")
	require.Equal(t, 2, attempt)

	// b's run fails: its retry lands.
	probe.results[2] <- errors.New("endpoint answered 500")
	require.Eventually(t, func() bool {
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, job.Job.ID).Scan(&state))
		return state == "retryable"
	}, 30*time.Second, 10*time.Millisecond, "the live run's outcome is written")
	require.EqualValues(t, 1, stale.Load())
}
