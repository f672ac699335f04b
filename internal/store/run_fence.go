package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

// River writes a run's outcome (completed, retryable, snoozed) on any row
// still running, whatever run it is now: a run of a dispatcher declared
// gone (its jobs rescued, store.RescueJobsOf) that comes back and returns
// would overwrite the state of the run that took its job over, and a
// delivery could be left pending behind a completed job. The fence makes
// each run carry its fetch time (River sets attempted_at at every fetch)
// in the outcome's metadata, and the job row's trigger (migration 0048)
// writes an outcome only while the row is running the same fetch, under
// the write's own row lock, which the rescue also takes.

// runFenceKey is the metadata key carrying a run's fetch time.
const runFenceKey = "hookd_run"

// RunFence is River middleware that marks each run's outcome with the
// run's fetch time, for the fenced driver (NewFencedDriver) to check.
type RunFence struct {
	river.MiddlewareDefaults
}

var _ rivertype.WorkerMiddleware = (*RunFence)(nil)

// Work marks the run before working it: a panic's or a timeout's outcome
// carries the mark too.
func (f *RunFence) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	if job.AttemptedAt != nil {
		if err := river.MetadataSet(ctx, runFenceKey, job.AttemptedAt.UTC().Format(time.RFC3339Nano)); err != nil {
			return fmt.Errorf("mark the run: %w", err)
		}
	}
	return doInner(ctx)
}

// FetchPacer decides which of a process's fetches of jobs run
// (delivery.FetchPacer): River fetches on every insert notification, in
// every process, so without it a fleet's fetches grow with its size.
type FetchPacer interface {
	// Fetch reports whether this fetch from queue runs; a fetch that does
	// not finds no jobs.
	Fetch(ctx context.Context, queue string) bool
	// Fetched is told how many jobs a fetch from queue found of the limit
	// it asked for.
	Fetched(queue string, jobs, limit int)
}

// FencedDriverConfig is what NewFencedDriver adds to River's driver.
type FencedDriverConfig struct {
	// Stale counts the outcomes dropped because their run had lost its
	// job; nil: not counted.
	Stale func(n int)
	// Pace decides which fetches run; nil: every one River makes.
	Pace FetchPacer
	// Window, if set, starts its queue's fetches at a floor instead of the
	// queue's start (fetch_window.go).
	Window *FetchWindowConfig
	// Held, if set, keeps the runs this process fetched and has not
	// written the outcome of (lost_runs.go); a fetch whose answer came
	// too late hands River none of its jobs, and Withheld counts them.
	Held     *HeldRuns
	Withheld func(n int)
}

// NewFencedDriver is River's pgx driver on pool whose outcome writes drop
// the outcome of a run that no longer holds its job, and whose fetches
// wait for cfg.Pace.
func NewFencedDriver(pool *pgxpool.Pool, cfg FencedDriverConfig) riverdriver.Driver[pgx.Tx] {
	d := riverpgxv5.New(pool)
	exec := &fencedExecutor{Executor: d.GetExecutor(), driver: d, pool: pool, stale: cfg.Stale, pace: cfg.Pace,
		held: cfg.Held, withheld: cfg.Withheld}
	if cfg.Window != nil {
		exec.window = newFetchWindow(*cfg.Window)
	}
	return &fencedDriver{Driver: d, exec: exec}
}

type fencedDriver struct {
	*riverpgxv5.Driver
	exec *fencedExecutor
}

var _ riverdriver.Driver[pgx.Tx] = (*fencedDriver)(nil)

func (d *fencedDriver) GetExecutor() riverdriver.Executor { return d.exec }

type fencedExecutor struct {
	riverdriver.Executor
	driver *riverpgxv5.Driver
	pool   *pgxpool.Pool
	stale  func(n int)
	pace   FetchPacer
	window *fetchWindow
	held   *HeldRuns
	// withheld counts the jobs of fetches answered too late to run.
	withheld func(n int)
}

// JobGetAvailable fetches when the pacer lets this process, and tells it
// what the fetch found. A fetch left out finds nothing: River fetches
// again at the next notification, its poll or a freed worker slot.
func (e *fencedExecutor) JobGetAvailable(ctx context.Context, params *riverdriver.JobGetAvailableParams) (*riverdriver.JobGetAvailableResult, error) {
	if e.pace != nil && !e.pace.Fetch(ctx, params.Queue) {
		return &riverdriver.JobGetAvailableResult{}, nil
	}
	res, err := e.fetch(ctx, params)
	if err != nil && e.held != nil {
		// The server may have run it and its answer is lost: its jobs
		// are running here, unheld, for the release.
		e.held.doubt()
	}
	if err == nil && e.pace != nil {
		e.pace.Fetched(params.Queue, len(res.Jobs), params.MaxToLock)
	}
	if err == nil && e.held != nil && len(res.Jobs) > 0 {
		var late int
		res.Jobs, late = e.held.handOff(res.Jobs)
		if late > 0 {
			e.held.doubt()
			if e.withheld != nil {
				e.withheld(late)
			}
			if res.DecodeErrors != nil {
				kept := make(map[int64]error, len(res.DecodeErrors))
				for _, j := range res.Jobs {
					if err, ok := res.DecodeErrors[j.ID]; ok {
						kept[j.ID] = err
					}
				}
				res.DecodeErrors = kept
			}
		}
	}
	return res, err
}

// fetch is the windowed fetch for the window's queue (fetch_window.go),
// River's own for the others or where the window does not apply.
func (e *fencedExecutor) fetch(ctx context.Context, params *riverdriver.JobGetAvailableParams) (*riverdriver.JobGetAvailableResult, error) {
	if e.window == nil || params.Queue != e.window.cfg.Queue {
		return e.Executor.JobGetAvailable(ctx, params)
	}
	res, err := e.windowedFetch(ctx, e.window, params)
	if errors.Is(err, errFetchFallBack) {
		return e.Executor.JobGetAvailable(ctx, params)
	}
	return res, err
}

// JobSetStateIfRunningMany is River's write of runs' outcomes; the row's
// trigger (migration 0048) drops the outcome of a run that no longer
// holds its job, and River's statement returns that row as it is. An
// outcome whose mark the returned row does not carry was dropped so:
// counted as stale.
func (e *fencedExecutor) JobSetStateIfRunningMany(ctx context.Context, params *riverdriver.JobSetStateIfRunningManyParams) ([]*rivertype.JobRow, error) {
	rows, err := e.Executor.JobSetStateIfRunningMany(ctx, params)
	if err == nil && e.held != nil {
		// Written, or dropped as stale: the run is over either way. A
		// write without an answer leaves its runs held; River writes
		// them again.
		e.held.written(params.ID)
	}
	if err != nil || e.stale == nil {
		return rows, err
	}
	marks := make(map[int64]time.Time, len(params.ID))
	for i, id := range params.ID {
		if at, ok := runMark(params.MetadataUpdates[i]); ok {
			marks[id] = at
		}
	}
	dropped := 0
	for _, row := range rows {
		mark, ok := marks[row.ID]
		if !ok {
			continue
		}
		if at, ok := runMark(row.Metadata); !ok || !at.Equal(mark) {
			dropped++
		}
	}
	if dropped > 0 {
		e.stale(dropped)
	}
	return rows, nil
}

// runMark is the fetch time an outcome's metadata carries, if any. Most
// outcomes carry a small object, so the common case is one short decode.
func runMark(metadata []byte) (time.Time, bool) {
	if len(metadata) == 0 {
		return time.Time{}, false
	}
	var m struct {
		Run string `json:"hookd_run"`
	}
	if err := json.Unmarshal(metadata, &m); err != nil || m.Run == "" {
		return time.Time{}, false
	}
	at, err := time.Parse(time.RFC3339Nano, m.Run)
	return at, err == nil
}
