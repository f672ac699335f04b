package store_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

const windowQueue = "windowed"

// fetchBundle is a fenced driver's executor on a pool of one connection
// (so the statistics of its fetches can be flushed from that session),
// with the window's clock.
type fetchBundle struct {
	db      *storetest.DB
	pool    *pgxpool.Pool
	exec    riverdriver.Executor
	clock   atomic.Int64 // unix nanoseconds of the window's clock
	step    atomic.Int64 // nanoseconds the clock moves at each reading
	full    atomic.Int64 // full fetches made
	fetches atomic.Int64 // fetches made, full or windowed
}

func setupFetch(t *testing.T, windowed bool) *fetchBundle {
	t.Helper()
	return setupFetchAfter(t, windowed, -1)
}

// setupFetchAfter is setupFetch whose window starts once River's fetch
// takes windowAfter (negative: at once).
func setupFetchAfter(t *testing.T, windowed bool, windowAfter time.Duration) *fetchBundle {
	t.Helper()
	ctx := context.Background()
	b := &fetchBundle{db: storetest.New(t)}
	b.clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	pool, err := store.OpenPool(ctx, store.PoolConfig{URL: b.db.URL, MaxConns: 1, ApplicationName: "fetch"})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	b.pool = pool
	cfg := store.FencedDriverConfig{}
	if windowed {
		cfg.Window = &store.FetchWindowConfig{Queue: windowQueue, WindowAfter: windowAfter,
			Now: func() time.Time { return time.Unix(0, b.clock.Add(b.step.Load())) },
			Fetched: func(full bool, _ int) {
				b.fetches.Add(1)
				if full {
					b.full.Add(1)
				}
			}}
	}
	b.exec = store.NewFencedDriver(pool, cfg).GetExecutor()
	return b
}

// insert queues n available jobs of kind on the windowed queue, the i-th
// scheduled at at(i) on the database's clock, and returns their ids.
func (b *fetchBundle) insert(t *testing.T, kind string, n int, at func(i int) time.Duration) []int64 {
	t.Helper()
	ago := make([]string, n)
	for i := range ago {
		ago[i] = at(i).String()
	}
	rows, err := b.db.Pool.Query(context.Background(), `
		INSERT INTO river_job (args, kind, max_attempts, queue, state, priority, scheduled_at)
		SELECT '{}', $1, 25, $2, 'available', 1, now() + a::interval
		FROM unnest($3::text[]) WITH ORDINALITY AS t(a, i) ORDER BY i
		RETURNING id`, kind, windowQueue, ago)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return ids
}

func (b *fetchBundle) fetch(t *testing.T, limit int, kinds ...string) []*rivertype.JobRow {
	t.Helper()
	res, err := b.exec.JobGetAvailable(context.Background(), &riverdriver.JobGetAvailableParams{
		ClientID: "dispatcher-a", Kind: kinds, MaxAttemptedBy: 100, MaxToLock: limit, Queue: windowQueue})
	require.NoError(t, err)
	return res.Jobs
}

// fetchIDs makes n fetches of at most limit jobs and returns the ids of
// the jobs they took.
func (b *fetchBundle) fetchIDs(t *testing.T, n, limit int) []int64 {
	t.Helper()
	var got []int64
	for range n {
		for _, j := range b.fetch(t, limit) {
			got = append(got, j.ID)
		}
	}
	return got
}

// entriesRead is how many entries of River's fetch index the scans of
// the executor's session have read, its statistics flushed first.
func (b *fetchBundle) entriesRead(t *testing.T) int64 {
	t.Helper()
	ctx := context.Background()
	// The flush happens as the session goes idle after this statement,
	// before it answers.
	_, err := b.pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
	require.NoError(t, err)
	var n int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `
		SELECT idx_tup_read FROM pg_stat_user_indexes
		WHERE indexrelname = 'river_job_prioritized_fetching_index'`).Scan(&n))
	return n
}

// holdSnapshot opens a repeatable-read transaction that keeps its
// snapshot until the test ends, as a pg_dump does: vacuum may remove no
// row version that dies meanwhile.
func holdSnapshot(t *testing.T, db *storetest.DB) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&n))
}

// TestFetchBehindALongTransactionReadsOnlyItsWindow: with a snapshot held
// open, every job fetched leaves its available version in the fetch
// index. River's own fetch then reads every one of them on each call;
// the windowed fetch starts at its floor and reads only the new jobs and
// the few entries within its margin.
func TestFetchBehindALongTransactionReadsOnlyItsWindow(t *testing.T) {
	t.Parallel()
	const backlog = 3000
	for _, tc := range []struct {
		name     string
		windowed bool
		check    func(t *testing.T, read int64)
	}{
		{"River's fetch reads every dead entry", false, func(t *testing.T, read int64) {
			require.GreaterOrEqual(t, read, int64(backlog), "the snapshot keeps the fetched jobs' entries")
		}},
		{"the windowed fetch reads only its window", true, func(t *testing.T, read int64) {
			require.Less(t, read, int64(backlog/10))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupFetch(t, tc.windowed)
			holdSnapshot(t, b.db)
			// An hour's jobs, the newest an hour old.
			b.insert(t, "probe", backlog, func(i int) time.Duration { return -2*time.Hour + time.Duration(i)*time.Second })
			fetched := 0
			for {
				jobs := b.fetch(t, 500)
				if len(jobs) == 0 {
					break
				}
				fetched += len(jobs)
			}
			require.Equal(t, backlog, fetched)
			fresh := b.insert(t, "probe", 5, func(int) time.Duration { return 0 })
			before := b.entriesRead(t)
			jobs := b.fetch(t, 500)
			read := b.entriesRead(t) - before
			got := make([]int64, len(jobs))
			for i, j := range jobs {
				got[i] = j.ID
			}
			require.ElementsMatch(t, fresh, got)
			t.Logf("index entries read by one fetch: %d", read)
			tc.check(t, read)
		})
	}
}

// TestFetchWindowFindsAJobMadeAvailableBehindIt: a job made available
// behind the floor (a rescued job keeps its time; an insert that commits
// later than the margin) is not lost: the next full fetch, due within
// FullEvery, takes it.
func TestFetchWindowFindsAJobMadeAvailableBehindIt(t *testing.T) {
	t.Parallel()
	b := setupFetch(t, true)
	b.insert(t, "probe", 3, func(int) time.Duration { return 0 })
	require.Len(t, b.fetch(t, 10), 3)
	require.Equal(t, int64(1), b.full.Load(), "the first fetch is a full one")
	late := b.insert(t, "probe", 1, func(int) time.Duration { return -time.Hour })
	require.Empty(t, b.fetch(t, 10), "behind the floor: not in the window")
	b.clock.Add(int64(store.DefaultFullFetchEvery))
	jobs := b.fetch(t, 10)
	require.Len(t, jobs, 1)
	require.Equal(t, late[0], jobs[0].ID)
	require.Equal(t, int64(2), b.full.Load())
}

// TestFetchWindowTakesABacklogAsRiverDoes: fetches of a backlog smaller
// than it take every job once, in River's order (priority, time, id),
// only of the kinds asked for, and write each row as River's own fetch
// does.
func TestFetchWindowTakesABacklogAsRiverDoes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupFetch(t, true)
	// Times out of id order, some equal.
	ids := b.insert(t, "probe", 500, func(i int) time.Duration { return -time.Duration((i*7919)%97) * time.Second })
	other := b.insert(t, "other", 20, func(int) time.Duration { return -time.Hour })
	rows, err := b.db.Pool.Query(ctx, `SELECT id FROM river_job WHERE id = ANY($1) ORDER BY priority, scheduled_at, id`, ids)
	require.NoError(t, err)
	want, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)

	var got []int64
	for range 100 {
		jobs := b.fetch(t, 64, "probe")
		if len(jobs) == 0 {
			break
		}
		for _, j := range jobs {
			require.Equal(t, rivertype.JobStateRunning, j.State)
			require.Equal(t, 1, j.Attempt)
			require.Equal(t, []string{"dispatcher-a"}, j.AttemptedBy)
			require.NotNil(t, j.AttemptedAt)
			got = append(got, j.ID)
		}
	}
	require.Equal(t, want, got, "each job once, in River's order")
	require.Equal(t, int64(1), b.full.Load(), "one full fetch: the backlog was taken from the floor")
	var left int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE id = ANY($1) AND state = 'available'`, other).Scan(&left))
	require.Equal(t, len(other), left, "a kind not asked for is left")
}

// TestFetchWindowWritesAttemptedByAsRiver: a job fetched for the 101st
// time keeps River's last 100 fetchers, this one last, by either fetch.
func TestFetchWindowWritesAttemptedByAsRiver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var rows [][]string
	for _, windowed := range []bool{false, true} {
		b := setupFetch(t, windowed)
		id := b.insert(t, "probe", 1, func(int) time.Duration { return 0 })[0]
		before := make([]string, 100)
		for i := range before {
			before[i] = fmt.Sprintf("dispatcher-%d", i)
		}
		_, err := b.db.Pool.Exec(ctx, `UPDATE river_job SET attempted_by = $2, attempt = 100 WHERE id = $1`, id, before)
		require.NoError(t, err)
		jobs := b.fetch(t, 1)
		require.Len(t, jobs, 1)
		require.Equal(t, 101, jobs[0].Attempt)
		rows = append(rows, jobs[0].AttemptedBy)
	}
	require.Len(t, rows[1], 100)
	require.Equal(t, "dispatcher-a", rows[1][99])
	require.Equal(t, rows[0], rows[1])
	require.True(t, slices.Equal(rows[0][:99], rows[1][:99]))
}

// TestFetchWindowLeavesAQuickQueueToRiver: while River's own fetch is
// quick (the default WindowAfter; the test's clock stands still, so every
// fetch takes no time), every fetch is River's own, one statement.
func TestFetchWindowLeavesAQuickQueueToRiver(t *testing.T) {
	t.Parallel()
	b := setupFetchAfter(t, true, 0)
	ids := b.insert(t, "probe", 30, func(i int) time.Duration { return -time.Duration(i) * time.Second })
	require.ElementsMatch(t, ids, b.fetchIDs(t, 3, 10))
	require.Equal(t, int64(3), b.full.Load())
}

// TestFetchWindowStaysWithRiverWhenEveryFetchIsSlow: on a saturated
// machine every statement is slow, River's fetch and the windowed one
// alike (here each takes 10 ms on the window's clock, twice
// WindowAfter); the window then saves nothing and costs three
// statements a fetch, so after one windowed fetch has shown that, the
// fetches are River's own.
func TestFetchWindowStaysWithRiverWhenEveryFetchIsSlow(t *testing.T) {
	t.Parallel()
	b := setupFetchAfter(t, true, 0)
	b.step.Store(int64(2 * store.DefaultWindowAfter)) // a fetch reads the clock at its start and its end
	ids := b.insert(t, "probe", 40, func(i int) time.Duration { return -time.Duration(i) * time.Second })
	require.ElementsMatch(t, ids, b.fetchIDs(t, 20, 2))
	require.Equal(t, int64(20), b.fetches.Load())
	windowed := b.fetches.Load() - b.full.Load()
	require.LessOrEqual(t, windowed, int64(1), "one windowed fetch shows it is no quicker")
}

// TestFetchWindowStartsOnceRiversFetchStaysSlow: one slow fetch among
// quick ones (a busy moment) does not start the window; three in a row
// that the windowed fetch beats by half do.
func TestFetchWindowStartsOnceRiversFetchStaysSlow(t *testing.T) {
	t.Parallel()
	ms := func(v ...int) fetchCostsSpec { return fetchCostsSpec(v) }
	for _, tc := range []struct {
		name           string
		full, windowed fetchCostsSpec
		windowAfter    time.Duration
		want           bool
	}{
		{"quick", ms(1, 1, 1), nil, 0, false},
		{"one slow fetch among quick ones", ms(1, 1, 40), nil, 0, false},
		{"fewer than three fetches", ms(40, 40), nil, 0, false},
		{"slow three times, no windowed fetch yet", ms(6, 7, 8), nil, 0, true},
		{"slow behind a long transaction", ms(40, 90, 140), ms(5, 7, 6), 0, true},
		{"every fetch slow: the window no quicker", ms(10, 12, 11), ms(9, 30, 8), 0, false},
		{"a quick full fetch among slow ones", ms(40, 2, 140), ms(5), 0, false},
		{"always", nil, nil, -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			after := tc.windowAfter
			if after == 0 {
				after = store.DefaultWindowAfter
			}
			require.Equal(t, tc.want, store.WindowPays(tc.full, tc.windowed, after))
		})
	}
}

// fetchCostsSpec is the durations in milliseconds of a kind's last
// fetches, oldest first.
type fetchCostsSpec = []int
