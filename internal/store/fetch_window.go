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
// a floor behind the newest job it found due (by Margin, which covers
// inserts that commit late and retries River's scheduler makes available
// a few seconds after their time), or at the last job it took when it was
// given all it asked for (the rest of a backlog is after it). A windowed
// fetch reads only the entries from the floor on, however old the oldest
// snapshot. It costs three statements more than River's (its transaction,
// and River's read of the rows it took), so it is used only while River's
// own fetch, which also finds what was made available behind the floor
// (an insert that committed later than the margin, a job whose fetch
// rolled back), is slow: each of River's last three fetches took at least
// WindowAfter, and at least twice as long as the quickest of the last
// three windowed fetches. A walk over dead entries slows every full fetch
// and no windowed one; a busy CPU slows some fetches of either kind, and
// on a saturated machine one slow fetch among quick ones had made the
// dispatchers pay the window's statements for nothing. While fetches are
// windowed, River's own runs FullEvery after the last, or 20 times the
// last one's duration if that is longer, so that it takes at most 5% of
// the time, and the fetches between are windowed.

// DefaultFetchMargin is FetchWindowConfig.Margin's default: twice River's
// scheduler interval (5 s), so a retry made available late is still
// inside the window.
const DefaultFetchMargin = 10 * time.Second

// DefaultFullFetchEvery is FetchWindowConfig.FullEvery's default.
const DefaultFullFetchEvery = time.Second

// DefaultWindowAfter is FetchWindowConfig.WindowAfter's default: River's
// fetch takes under a millisecond on a queue whose dead entries vacuum
// can remove.
const DefaultWindowAfter = 5 * time.Millisecond

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
	// FullEvery is the least time between full fetches while fetches are
	// windowed; zero means DefaultFullFetchEvery.
	FullEvery time.Duration
	// WindowAfter is how long each of River's own last three fetches must
	// take (and twice as long as a windowed one) for the next fetches to
	// be windowed; zero means DefaultWindowAfter, negative always.
	WindowAfter time.Duration
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

// queueStart is before every job: the floor before any fetch.
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

// costSamples is how many of the last fetches of each kind decide
// between them.
const costSamples = 3

// fetchCosts is the durations of the last costSamples fetches of a kind.
type fetchCosts struct {
	last [costSamples]time.Duration
	n    int // fetches recorded
}

func (c *fetchCosts) add(d time.Duration) {
	c.last[c.n%costSamples] = d
	c.n++
}

// quickest is the least of the last costSamples durations (all of them
// if fewer were recorded); ok is false before the first.
func (c *fetchCosts) quickest() (d time.Duration, ok bool) {
	if c.n == 0 {
		return 0, false
	}
	return slices.Min(c.last[:min(c.n, costSamples)]), true
}

// windowPays reports whether windowed fetches are worth their extra
// statements, given River's own last fetches (full) and the windowed ones
// (windowed): each of costSamples full fetches took windowAfter or more,
// and twice the quickest windowed fetch's time, if there was one.
func windowPays(full, windowed fetchCosts, windowAfter time.Duration) bool {
	if windowAfter < 0 {
		return true
	}
	if full.n < costSamples {
		return false
	}
	f, _ := full.quickest()
	if f < windowAfter {
		return false
	}
	w, ok := windowed.quickest()
	return !ok || f >= 2*w
}

// fetchWindow is one queue's floor.
type fetchWindow struct {
	cfg FetchWindowConfig

	mu       sync.Mutex
	floor    jobKey
	lastFull time.Time // zero: no full fetch yet
	fullCost time.Duration
	fulls    fetchCosts
	windows  fetchCosts
}

func newFetchWindow(cfg FetchWindowConfig) *fetchWindow {
	if cfg.Margin <= 0 {
		cfg.Margin = DefaultFetchMargin
	}
	if cfg.FullEvery <= 0 {
		cfg.FullEvery = DefaultFullFetchEvery
	}
	if cfg.WindowAfter == 0 {
		cfg.WindowAfter = DefaultWindowAfter
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &fetchWindow{cfg: cfg, floor: queueStart}
}

// full reports whether the fetch at now is a full one (River's own) and,
// if not, the floor it starts at.
func (w *fetchWindow) full(now time.Time) (bool, jobKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lastFull.IsZero() || !windowPays(w.fulls, w.windows, w.cfg.WindowAfter) ||
		now.Sub(w.lastFull) >= max(w.cfg.FullEvery, fullFetchShare*w.fullCost) {
		return true, jobKey{}
	}
	return false, w.floor
}

// fullDone records a full fetch that ran from began to ended on the local
// clock and took jobs of the limit it asked for. River's fetch does not
// say the database's time, so the newest job taken stands for it.
func (w *fetchWindow) fullDone(began, ended time.Time, jobs []*rivertype.JobRow, limit int) {
	got := make([]jobKey, len(jobs))
	var newest time.Time
	for i, j := range jobs {
		got[i] = jobKey{priority: int16(min(j.Priority, 32767)), scheduledAt: j.ScheduledAt, id: j.ID}
		if j.ScheduledAt.After(newest) {
			newest = j.ScheduledAt
		}
	}
	slices.SortFunc(got, jobKey.compare)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastFull, w.fullCost = ended, ended.Sub(began)
	w.fulls.add(w.fullCost)
	if len(got) > 0 {
		w.floor = nextFloor(w.floor, got, limit, newest, w.cfg.Margin)
	}
}

// windowedDone records a windowed fetch that took got (in fetch order) of
// the limit it asked for, at the database's time dbNow, in took.
func (w *fetchWindow) windowedDone(got []jobKey, limit int, dbNow time.Time, took time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.windows.add(took)
	w.floor = nextFloor(w.floor, got, limit, dbNow, w.cfg.Margin)
}

// errFetchFallBack makes a windowed fetch give way to River's own.
var errFetchFallBack = errors.New("fetch window: not applicable")

// windowedFetch is River's own fetch when a full one is due, else
// River's fetch of params.Queue's jobs (the same rows taken in the same
// order, written as River writes them: running, one more attempt,
// attempted now by this client) from the window's floor.
// The rows are read back through River's own executor, so River decodes
// them as it does its own fetch's.
func (e *fencedExecutor) windowedFetch(ctx context.Context, w *fetchWindow, params *riverdriver.JobGetAvailableParams) (*riverdriver.JobGetAvailableResult, error) {
	if params.Schema != "" || params.MaxAttemptedBy <= 0 || params.MaxToLock <= 0 {
		return nil, errFetchFallBack
	}
	began := w.cfg.Now()
	full, from := w.full(began)
	if full {
		res, err := e.Executor.JobGetAvailable(ctx, params)
		if err != nil {
			return nil, err
		}
		w.fullDone(began, w.cfg.Now(), res.Jobs, params.MaxToLock)
		if w.cfg.Fetched != nil {
			w.cfg.Fetched(true, len(res.Jobs))
		}
		return res, nil
	}
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
	w.windowedDone(got, params.MaxToLock, dbNow, w.cfg.Now().Sub(began))
	if w.cfg.Fetched != nil {
		w.cfg.Fetched(false, len(jobs))
	}
	return &riverdriver.JobGetAvailableResult{Jobs: jobs}, nil
}
