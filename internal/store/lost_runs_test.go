package store_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestReleaseLostRuns: the jobs running under a client that it does not
// hold, fetched more than LostRunAge ago, are made available again (or
// discarded, out of attempts); held jobs, fresh fetches, other clients'
// runs and jobs not running are left alone; a statement that runs after
// its window (sent before a cut, run after it) takes nothing.
func TestReleaseLostRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	s := store.New(db.Pool, nil)
	job := func(state string, by []string, ago time.Duration, attempt int) int64 {
		t.Helper()
		var id int64
		require.NoError(t, db.Pool.QueryRow(ctx, `
			INSERT INTO river_job (args, kind, max_attempts, queue, state, priority, attempt, attempted_by, attempted_at)
			VALUES ('{}', 'lost_probe', 5, 'default', $1::river_job_state, 1, $2, $3, now() - $4::interval) RETURNING id`,
			state, attempt, by, ago).Scan(&id))
		return id
	}
	stateOf := func(id int64) string {
		t.Helper()
		var st string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, id).Scan(&st))
		return st
	}
	old := store.LostRunAge + 4*time.Second
	lost := job("running", []string{"me"}, old, 1)
	spent := job("running", []string{"me"}, old, 5)
	held := job("running", []string{"me"}, old, 1)
	fresh := job("running", []string{"me"}, time.Second, 1)
	others := job("running", []string{"other"}, old, 1)
	rerun := job("running", []string{"me", "other"}, old, 2)
	waiting := job("retryable", []string{"me"}, old, 1)

	dbNow := func() time.Time {
		var now time.Time
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now))
		return now
	}
	// Sent before a cut and run 2 s after its read: nothing.
	n, err := s.ReleaseLostRuns(ctx, "me", []int64{held}, dbNow().Add(-2*time.Second))
	require.NoError(t, err)
	require.Zero(t, n, "a statement past its window takes nothing")
	require.Equal(t, "running", stateOf(lost))

	n, err = s.ReleaseLostRuns(ctx, "me", []int64{held}, dbNow())
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for _, c := range []struct {
		name  string
		id    int64
		state string
	}{
		{"lost", lost, "available"},
		{"lost, out of attempts", spent, "discarded"},
		{"held", held, "running"},
		{"fetched within LostRunAge", fresh, "running"},
		{"another client's", others, "running"},
		{"its latest run another client's", rerun, "running"},
		{"not running", waiting, "retryable"},
	} {
		require.Equal(t, c.state, stateOf(c.id), c.name)
	}
	var reason string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT errors[array_length(errors, 1)]->>'error' FROM river_job WHERE id = $1`, lost).Scan(&reason))
	require.Contains(t, reason, "the answer to the fetch of dispatcher me was lost")
}

// TestFencedDriverHoldsItsRuns: the fenced driver holds the runs of each
// fetch it hands to River until their outcomes are written, and hands
// River none of a fetch answered after the hand-off limit (the database's
// clock past the fetch by more): those stay running, for the release, and
// so may a failed fetch's; either puts runs in doubt (HeldRuns.Doubted).
func TestFencedDriverHoldsItsRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	var ahead atomic.Int64 // how far the driver's database clock runs ahead
	held := store.NewHeldRuns(func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) })
	var withheld atomic.Int64
	exec := store.NewFencedDriver(db.Pool, store.FencedDriverConfig{Held: held, Withheld: func(n int) { withheld.Add(int64(n)) }}).GetExecutor()
	insert := func() int64 {
		t.Helper()
		var id int64
		require.NoError(t, db.Pool.QueryRow(ctx, `
			INSERT INTO river_job (args, kind, max_attempts, queue, state, priority)
			VALUES ('{}', 'held_probe', 5, 'default', 'available', 1) RETURNING id`).Scan(&id))
		return id
	}
	fetch := func() []*rivertype.JobRow {
		t.Helper()
		res, err := exec.JobGetAvailable(ctx, &riverdriver.JobGetAvailableParams{
			ClientID: "me", MaxAttemptedBy: 100, MaxToLock: 10, Queue: river.QueueDefault})
		require.NoError(t, err)
		return res.Jobs
	}

	id := insert()
	jobs := fetch()
	require.Len(t, jobs, 1)
	require.Equal(t, []int64{id}, held.IDs(), "a fetched run is held")
	require.True(t, held.Doubted().IsZero(), "no answer lost: no run in doubt")
	p := riverdriver.JobSetStateCompleted(id, time.Now(), nil)
	_, err := exec.JobSetStateIfRunningMany(ctx, &riverdriver.JobSetStateIfRunningManyParams{
		ID: []int64{id}, Attempt: []*int{p.Attempt}, ErrData: [][]byte{p.ErrData}, FinalizedAt: []*time.Time{p.FinalizedAt},
		MetadataDoMerge: []bool{p.MetadataDoMerge}, MetadataUpdates: [][]byte{p.MetadataUpdates},
		ScheduledAt: []*time.Time{p.ScheduledAt}, State: []rivertype.JobState{p.State}})
	require.NoError(t, err)
	require.Empty(t, held.IDs(), "its outcome written, it is no longer held")

	late := insert()
	ahead.Store(int64(5 * time.Second))
	require.Empty(t, fetch(), "a fetch answered past the hand-off limit runs nothing here")
	require.Empty(t, held.IDs())
	require.Equal(t, int64(1), withheld.Load())
	var state string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, late).Scan(&state))
	require.Equal(t, "running", state, "left running, for the release of lost runs")
	lateAt := held.Doubted()
	require.False(t, lateAt.IsZero(), "a late answer puts runs in doubt, for the release")

	// A fetch that fails may have run on the server: in doubt too.
	ahead.Store(int64(time.Minute))
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = exec.JobGetAvailable(cancelled, &riverdriver.JobGetAvailableParams{
		ClientID: "me", MaxAttemptedBy: 100, MaxToLock: 10, Queue: river.QueueDefault})
	require.Error(t, err)
	require.Greater(t, held.Doubted().Sub(lateAt), 50*time.Second, "the failed fetch's time")
}
