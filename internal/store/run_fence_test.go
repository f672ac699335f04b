package store_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
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

// fenceBundle is a database, a fenced driver's executor on a pool whose
// statements are counted, and the outcomes it dropped as stale.
type fenceBundle struct {
	db         *storetest.DB
	exec       riverdriver.Executor
	statements *statementCounter
	stale      atomic.Int64
}

func setupFence(t *testing.T) *fenceBundle {
	t.Helper()
	ctx := context.Background()
	b := &fenceBundle{db: storetest.New(t), statements: &statementCounter{}}
	cfg, err := pgxpool.ParseConfig(b.db.URL)
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = b.statements
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	b.exec = store.NewFencedDriver(pool, store.FencedDriverConfig{Stale: func(n int) { b.stale.Add(int64(n)) }}).GetExecutor()
	return b
}

// insert queues a job and returns its id.
func (b *fenceBundle) insert(t *testing.T) int64 {
	t.Helper()
	var id int64
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `
		INSERT INTO river_job (args, kind, max_attempts, queue, state, priority)
		VALUES ('{}', 'fence_probe', 5, 'default', 'available', 1) RETURNING id`).Scan(&id))
	return id
}

// fetch runs the job as client (River's fetch) and returns its fetch time.
func (b *fenceBundle) fetch(t *testing.T, client string) time.Time {
	t.Helper()
	res, err := b.exec.JobGetAvailable(context.Background(), &riverdriver.JobGetAvailableParams{
		ClientID: client, MaxAttemptedBy: 100, MaxToLock: 10, Queue: river.QueueDefault})
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1, "the job is fetched")
	require.NotContains(t, string(res.Jobs[0].Metadata), "hookd_run", "a run starts without an earlier run's mark")
	return *res.Jobs[0].AttemptedAt
}

// outcome writes state as the outcome of the run fetched at run.
func (b *fenceBundle) outcome(t *testing.T, id int64, run time.Time, state rivertype.JobState) *rivertype.JobRow {
	t.Helper()
	now := time.Now()
	meta := []byte(`{"hookd_run":"` + run.UTC().Format(time.RFC3339Nano) + `","seen":"` + string(state) + `"}`)
	p := riverdriver.JobSetStateCompleted(id, now, meta)
	if state == rivertype.JobStateRetryable {
		p = riverdriver.JobSetStateErrorRetryable(id, now, []byte(`{"error":"500"}`), meta)
	}
	rows, err := b.exec.JobSetStateIfRunningMany(context.Background(), &riverdriver.JobSetStateIfRunningManyParams{
		ID: []int64{id}, Attempt: []*int{p.Attempt}, ErrData: [][]byte{p.ErrData}, FinalizedAt: []*time.Time{p.FinalizedAt},
		MetadataDoMerge: []bool{p.MetadataDoMerge}, MetadataUpdates: [][]byte{p.MetadataUpdates},
		ScheduledAt: []*time.Time{p.ScheduledAt}, State: []rivertype.JobState{p.State}})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	return rows[0]
}

func (b *fenceBundle) row(t *testing.T, id int64) (state string, seen *string) {
	t.Helper()
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT state, metadata->>'seen' FROM river_job WHERE id = $1`, id).Scan(&state, &seen))
	return state, seen
}

// rescue makes the job available again as hookd's rescue of a gone
// dispatcher's jobs does.
func (b *fenceBundle) rescue(t *testing.T, client string) {
	t.Helper()
	n, _, err := store.New(b.db.Pool, nil).RescueJobsOf(context.Background(), []string{client})
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// TestRunOutcomeIsOneStatement: writing a batch of runs' outcomes is River's
// one statement; the fence adds none (it took a transaction of its own,
// four statements a completion, the fleet's completions growing with its
// size).
func TestRunOutcomeIsOneStatement(t *testing.T) {
	t.Parallel()
	b := setupFence(t)
	id := b.insert(t)
	run := b.fetch(t, "dispatcher-a")
	before := b.statements.n.Load()
	row := b.outcome(t, id, run, rivertype.JobStateCompleted)
	require.EqualValues(t, 1, b.statements.n.Load()-before, "statements to write one outcome")
	require.Equal(t, rivertype.JobStateCompleted, row.State)
	require.Zero(t, b.stale.Load())
}

// TestRunFence: each way a run's outcome can meet its job row, and the
// updates that are not outcomes and must pass the fence untouched.
func TestRunFence(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// do runs the story and returns the state and the outcome whose
		// metadata the row must end with ("" none of the test's).
		do        func(t *testing.T, b *fenceBundle, id int64) (wantState, wantSeen string)
		wantStale int64
	}{
		{name: "the live run's outcome is written", do: func(t *testing.T, b *fenceBundle, id int64) (string, string) {
			b.outcome(t, id, b.fetch(t, "a"), rivertype.JobStateRetryable)
			return "retryable", "retryable"
		}},
		{name: "a lost run's outcome is dropped while another run holds the job", wantStale: 1, do: func(t *testing.T, b *fenceBundle, id int64) (string, string) {
			lost := b.fetch(t, "a")
			b.rescue(t, "a")
			b.fetch(t, "b")
			row := b.outcome(t, id, lost, rivertype.JobStateCompleted)
			require.Equal(t, rivertype.JobStateRunning, row.State, "River's statement returns the row as it is")
			return "running", ""
		}},
		{name: "a lost run's outcome is dropped while the rescued job waits", wantStale: 1, do: func(t *testing.T, b *fenceBundle, id int64) (string, string) {
			lost := b.fetch(t, "a")
			b.rescue(t, "a")
			b.outcome(t, id, lost, rivertype.JobStateCompleted)
			return "available", ""
		}},
		{name: "an outcome written again after the job ran again is dropped", wantStale: 1, do: func(t *testing.T, b *fenceBundle, id int64) (string, string) {
			first := b.fetch(t, "a")
			b.outcome(t, id, first, rivertype.JobStateRetryable)
			_, err := b.db.Pool.Exec(context.Background(), `UPDATE river_job SET state = 'available' WHERE id = $1`, id)
			require.NoError(t, err)
			b.fetch(t, "b")
			// River's completer retries a batch whose commit it did not see.
			row := b.outcome(t, id, first, rivertype.JobStateRetryable)
			require.Equal(t, rivertype.JobStateRunning, row.State)
			return "running", "retryable"
		}},
		{name: "an outcome written again changes nothing", do: func(t *testing.T, b *fenceBundle, id int64) (string, string) {
			run := b.fetch(t, "a")
			b.outcome(t, id, run, rivertype.JobStateRetryable)
			b.outcome(t, id, run, rivertype.JobStateRetryable)
			return "retryable", "retryable"
		}},
		{name: "the rescue of a running job that an earlier run marked", do: func(t *testing.T, b *fenceBundle, id int64) (string, string) {
			b.outcome(t, id, b.fetch(t, "a"), rivertype.JobStateRetryable)
			_, err := b.db.Pool.Exec(context.Background(), `UPDATE river_job SET state = 'available' WHERE id = $1`, id)
			require.NoError(t, err)
			b.fetch(t, "b")
			b.rescue(t, "b")
			return "available", "retryable"
		}},
		{name: "the next run's outcome after a retry", do: func(t *testing.T, b *fenceBundle, id int64) (string, string) {
			b.outcome(t, id, b.fetch(t, "a"), rivertype.JobStateRetryable)
			_, err := b.db.Pool.Exec(context.Background(), `UPDATE river_job SET state = 'available' WHERE id = $1`, id)
			require.NoError(t, err)
			b.outcome(t, id, b.fetch(t, "b"), rivertype.JobStateCompleted)
			return "completed", "completed"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupFence(t)
			id := b.insert(t)
			wantState, wantSeen := tt.do(t, b, id)
			state, seen := b.row(t, id)
			require.Equal(t, wantState, state)
			if wantSeen == "" {
				require.Nil(t, seen, "no dropped outcome's metadata is written")
			} else {
				require.NotNil(t, seen)
				require.Equal(t, wantSeen, *seen)
			}
			require.Equal(t, tt.wantStale, b.stale.Load(), "outcomes counted as stale")
		})
	}
}
