package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"
)

// River fetches a queue's jobs by walking its fetch index (state, queue,
// priority, scheduled_at, id) from the start of the queue's available
// range. Every fetched job leaves an index entry behind there (its
// available version), which only vacuum removes, and vacuum may not while
// any snapshot older than the fetch lives (a pg_dump, a long query, a
// session idle in a transaction): each fetch then steps over every job
// fetched since that snapshot was taken, and its cost grows with the
// snapshot's age until the dispatchers fall behind.
//
// The fetch window starts each fetch where the last one left the queue:
// a floor behind the newest job it took (by Margin, which covers inserts
// that commit late and retries River's scheduler makes available a few
// seconds after their time) or at the last job it took when it was given
// all it asked for (the rest of a backlog is after it). A fetch reads
// only the entries from the floor on, however old the oldest snapshot.
// A job made available behind the floor (an insert that commits later
// than the margin, a job whose fetch rolled back) is found by a full
// fetch, from the queue's start: one is due FullEvery after the last, or
// 20 times the last one's duration if that is longer, so that full
// fetches, whose cost is still the long walk, take at most 5% of the
// time.

// DefaultFetchMargin is FetchWindowConfig.Margin's default: twice River's
// scheduler interval (5 s), so a retry made available late is still
// inside the window.
const DefaultFetchMargin = 10 * time.Second

// DefaultFullFetchEvery is FetchWindowConfig.FullEvery's default.
const DefaultFullFetchEvery = time.Second

// fullFetchShare bounds the share of fetching time the full fetches take:
// the next is due after fullFetchShare times the last one's duration.
const fullFetchShare = 20

// FetchWindowConfig makes a queue's fetches start at a floor
// (NewFencedDriver).
type FetchWindowConfig struct {
	// Queue is the windowed queue; other queues are fetched as River does.
	Queue string
	// Margin is how far behind the newest job it found the next fetch
	// starts; zero means DefaultFetchMargin.
	Margin time.Duration
	// FullEvery is the least time between full fetches; zero means
	// DefaultFullFetchEvery.
	FullEvery time.Duration
	// Now is the local clock that times the full fetches (time.Now).
	Now func() time.Time
	// Fetched, if set, is told each fetch's kind (true: full) and the
	// number of jobs it took.
	Fetched func(full bool, jobs int)
}

// jobKey is a job's place in River's fetch order.
type jobKey struct {
	priority    int16
	scheduledAt time.Time
	id          int64
}

func (k jobKey) compare(o jobKey) int {
	if c := cmp.Compare(k.priority, o.priority); c != 0 {
		return c
	}
	if c := k.scheduledAt.Compare(o.scheduledAt); c != 0 {
		return c
	}
	return cmp.Compare(k.id, o.id)
}

// queueStart is before every job: a full fetch starts there.
var queueStart = jobKey{priority: -32768, scheduledAt: time.Unix(-62135596800, 0).UTC()}

// nextFloor is where the fetch after one that took got (in fetch order)
// of the limit it asked for, at the database's time dbNow, starts: margin
// behind dbNow, or at the last job taken when the fetch took all it asked
// for (a backlog: the rest is after it); never before floor. hookd queues
// its jobs at River's priority 1, the only one the floor narrows.
func nextFloor(floor jobKey, got []jobKey, limit int, dbNow time.Time, margin time.Duration) jobKey {
	next := jobKey{priority: 1, scheduledAt: dbNow.Add(-margin)}
	if limit > 0 && len(got) >= limit {
		if last := got[len(got)-1]; last.compare(next) < 0 {
			next = last
		}
	}
	if next.compare(floor) < 0 {
		return floor
	}
	return next
}

// fetchWindow is one queue's floor.
type fetchWindow struct {
	cfg FetchWindowConfig

	mu       sync.Mutex
	floor    jobKey
	lastFull time.Time // zero: no full fetch yet
	fullCost time.Duration
}

func newFetchWindow(cfg FetchWindowConfig) *fetchWindow {
	if cfg.Margin <= 0 {
		cfg.Margin = DefaultFetchMargin
	}
	if cfg.FullEvery <= 0 {
		cfg.FullEvery = DefaultFullFetchEvery
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &fetchWindow{cfg: cfg, floor: queueStart}
}

// start is where this fetch starts, and whether it is a full one.
func (w *fetchWindow) start(now time.Time) (jobKey, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lastFull.IsZero() || now.Sub(w.lastFull) >= max(w.cfg.FullEvery, fullFetchShare*w.fullCost) {
		return queueStart, true
	}
	return w.floor, false
}

// done records a fetch: full or not, its start and end on the local
// clock, the jobs it took of the limit it asked for, the database's time.
func (w *fetchWindow) done(full bool, began, ended time.Time, got []jobKey, limit int, dbNow time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if full {
		w.lastFull, w.fullCost = ended, ended.Sub(began)
	}
	w.floor = nextFloor(w.floor, got, limit, dbNow, w.cfg.Margin)
}

// errFetchFallBack makes a windowed fetch give way to River's own.
var errFetchFallBack = errors.New("fetch window: not applicable")

// windowedFetch is River's fetch of params.Queue's jobs (the same rows
// taken in the same order, written as River writes them: running, one
// more attempt, attempted now by this client) from the window's floor.
// The rows are read back through River's own executor, so River decodes
// them as it does its own fetch's.
func (e *fencedExecutor) windowedFetch(ctx context.Context, w *fetchWindow, params *riverdriver.JobGetAvailableParams) (*riverdriver.JobGetAvailableResult, error) {
	if params.Schema != "" || params.MaxAttemptedBy <= 0 || params.MaxToLock <= 0 {
		return nil, errFetchFallBack
	}
	began := w.cfg.Now()
	from, full := w.start(began)
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("fetch jobs: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// locked_jobs names the statement as River's fetch is named, so a
	// look at pg_stat_statements finds both.
	rows, err := tx.Query(ctx, `
		WITH locked_jobs AS (
			SELECT id FROM river_job
			WHERE state = 'available' AND queue = $1
				AND ($2::text[] IS NULL OR kind = ANY($2::text[]))
				AND (priority, scheduled_at, id) >= ($3::smallint, $4::timestamptz, $5::bigint)
				AND scheduled_at <= coalesce($6::timestamptz, now())
			ORDER BY priority, scheduled_at, id
			LIMIT $7
			FOR UPDATE SKIP LOCKED
		), fetched AS (
			UPDATE river_job j SET
				state = 'running',
				attempt = j.attempt + 1,
				attempted_at = coalesce($6::timestamptz, now()),
				attempted_by = (coalesce(j.attempted_by, '{}'::text[]) || $8::text)[greatest(cardinality(j.attempted_by) + 2 - $9::int, 1):]
			FROM locked_jobs WHERE j.id = locked_jobs.id
			RETURNING j.id, j.priority, j.scheduled_at
		)
		SELECT f.id, f.priority, f.scheduled_at, n.now
		FROM (SELECT coalesce($6::timestamptz, now()) AS now) n LEFT JOIN fetched f ON true`,
		params.Queue, params.Kind, from.priority, from.scheduledAt, from.id, params.Now, params.MaxToLock,
		params.ClientID, params.MaxAttemptedBy)
	if err != nil {
		return nil, fmt.Errorf("fetch jobs: %w", err)
	}
	var (
		got   []jobKey
		dbNow time.Time
	)
	for rows.Next() {
		var (
			id       *int64
			priority *int16
			at       *time.Time
		)
		if err := rows.Scan(&id, &priority, &at, &dbNow); err != nil {
			rows.Close()
			return nil, fmt.Errorf("fetch jobs: %w", err)
		}
		if id != nil {
			got = append(got, jobKey{priority: *priority, scheduledAt: *at, id: *id})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("fetch jobs: %w", err)
	}
	slices.SortFunc(got, jobKey.compare)
	var jobs []*rivertype.JobRow
	if len(got) > 0 {
		ids := make([]int64, len(got))
		for i, k := range got {
			ids[i] = k.id
		}
		// A row River cannot decode fails this read; River's own fetch then
		// takes the job and fails only its attempt.
		if jobs, err = e.driver.UnwrapExecutor(tx).JobGetByIDMany(ctx, &riverdriver.JobGetByIDManyParams{ID: ids}); err != nil {
			return nil, fmt.Errorf("%w: %w", errFetchFallBack, err)
		}
		order := make(map[int64]int, len(ids))
		for i, id := range ids {
			order[id] = i
		}
		slices.SortFunc(jobs, func(a, b *rivertype.JobRow) int { return cmp.Compare(order[a.ID], order[b.ID]) })
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("fetch jobs: %w", err)
	}
	w.done(full, began, w.cfg.Now(), got, params.MaxToLock, dbNow)
	if w.cfg.Fetched != nil {
		w.cfg.Fetched(full, len(jobs))
	}
	return &riverdriver.JobGetAvailableResult{Jobs: jobs}, nil
}
