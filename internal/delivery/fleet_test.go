package delivery_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
)

// fleetStore answers heartbeats from a script.
type fleetStore struct {
	mu      sync.Mutex
	beats   []store.FleetBeat
	err     error
	rescued [][]string
	left    []string
	rescue  []bool
	// jobsLeft scripts what each rescue leaves running; none when empty.
	jobsLeft []int
	// releases are the lost-run releases asked for.
	releases []release
	// during, if set, runs while a heartbeat is on its way.
	during func()
	// onTheWay, if set, receives each heartbeat's context as it is sent;
	// the heartbeat then waits for arrive (or its context's end).
	onTheWay chan context.Context
	arrive   chan struct{}
	// events orders the heartbeats' ends and the leaves.
	events []string
}

type release struct {
	client string
	held   []int64
	readAt time.Time
}

func (f *fleetStore) Heartbeat(ctx context.Context, _ string, _ int, _ time.Duration, rescue bool) (store.FleetBeat, error) {
	f.mu.Lock()
	onTheWay, arrive := f.onTheWay, f.arrive
	f.mu.Unlock()
	if onTheWay != nil {
		onTheWay <- ctx
		select {
		case <-arrive:
		case <-ctx.Done():
			f.mu.Lock()
			f.events = append(f.events, "heartbeat abandoned")
			f.mu.Unlock()
			return store.FleetBeat{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, "heartbeat")
	f.rescue = append(f.rescue, rescue)
	if f.during != nil {
		f.during()
	}
	if f.err != nil {
		return store.FleetBeat{}, f.err
	}
	b := f.beats[0]
	if len(f.beats) > 1 {
		f.beats = f.beats[1:]
	}
	return b, nil
}

func (f *fleetStore) LeaveFleet(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.left = append(f.left, id)
	f.events = append(f.events, "leave")
	return nil
}

func (f *fleetStore) RescueJobsOf(_ context.Context, clients []string) (int, int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rescued = append(f.rescued, clients)
	left := 0
	if len(f.jobsLeft) > 0 {
		left, f.jobsLeft = f.jobsLeft[0], f.jobsLeft[1:]
	}
	return 3, left, nil
}

func (f *fleetStore) ReleaseLostRuns(_ context.Context, client string, held []int64, readAt time.Time) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.releases = append(f.releases, release{client, held, readAt})
	return 1, nil
}

// TestFleetReleasesLostRuns: a heartbeat that succeeds asks the store to
// release the jobs running under this process's ID that it does not hold
// (a fetch whose answer was lost), naming the held ones as read just
// before, with the database's time of that read; a failed heartbeat asks
// nothing.
func TestFleetReleasesLostRuns(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	db := now.Add(time.Hour) // the database's clock, an hour ahead
	held := []int64{7}
	st := &fleetStore{beats: []store.FleetBeat{{Live: 1}}}
	f := delivery.NewFleet(delivery.FleetConfig{ID: "me", Connections: 15, Interval: 2 * time.Second, Stale: 6 * time.Second,
		Now: func() time.Time { return now }, Held: func() []int64 { return held }, DBNow: func() time.Time { return db },
		Doubted: func() time.Time { return db }},
		st, slog.New(slog.DiscardHandler), delivery.FleetMetrics{})
	require.NoError(t, f.Join(context.Background()))
	now, db, held = now.Add(2*time.Second), db.Add(2*time.Second), []int64{7, 9}
	require.NoError(t, f.Beat(context.Background()))
	st.err = errors.New("connection refused")
	require.Error(t, f.Beat(context.Background()))
	require.Equal(t, []release{
		{"me", []int64{7}, time.Unix(1_000_000, 0).Add(time.Hour)},
		{"me", []int64{7, 9}, time.Unix(1_000_002, 0).Add(time.Hour)},
	}, st.releases)
}

// TestFleetReleasesLostRunsWhenInDoubt: the release reads every running job
// of the queue, so a heartbeat asks for it only when runs may be lost: at
// the first heartbeat (a process with this ID may have fetched before), and
// from a fetch whose answer was lost or late, or a heartbeat that failed
// (the link may be cut, and a fetch sent before the cut runs when it comes
// back), until the runs it may have left are old enough to be released and
// a few heartbeats more; otherwise once per LostRunSweep, in case a lost
// answer went unseen. A fleet of N used to pay for N of these scans at
// every heartbeat interval.
func TestFleetReleasesLostRunsWhenInDoubt(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_000_000, 0)
	now := start
	var doubted time.Time
	st := &fleetStore{beats: []store.FleetBeat{{Live: 1}}}
	f := delivery.NewFleet(delivery.FleetConfig{ID: "me", Connections: 15, Interval: 2 * time.Second, Stale: 6 * time.Second,
		Now: func() time.Time { return now }, Held: func() []int64 { return nil }, DBNow: func() time.Time { return now },
		Doubted: func() time.Time { return doubted }},
		st, slog.New(slog.DiscardHandler), delivery.FleetMetrics{})
	var asked []time.Duration // when each release was asked for, since start
	beat := func() {
		t.Helper()
		n := len(st.releases)
		if st.err != nil {
			require.Error(t, f.Beat(context.Background()))
		} else {
			require.NoError(t, f.Beat(context.Background()))
		}
		if len(st.releases) > n {
			asked = append(asked, now.Sub(start))
		}
	}
	require.NoError(t, f.Join(context.Background()))
	asked = append(asked, 0)
	beatsUntil := func(d time.Duration) {
		t.Helper()
		for now.Sub(start) < d {
			now = now.Add(2 * time.Second)
			beat()
		}
	}
	beatsUntil(10 * time.Second)
	require.Equal(t, []time.Duration{0}, asked, "no fetch in doubt: no release after the first")

	// every is each heartbeat's time from from to to, both included.
	every := func(from, to time.Duration) (out []time.Duration) {
		for d := from; d <= to; d += 2 * time.Second {
			out = append(out, d)
		}
		return out
	}
	window := store.LostRunAge + delivery.LostRunDoubt
	doubted = start.Add(11 * time.Second) // a fetch's answer lost
	beatsUntil(11*time.Second + window + 4*time.Second)
	want := append([]time.Duration{0}, every(12*time.Second, 11*time.Second+window)...)
	require.Equal(t, want, asked, "every heartbeat until the lost answer's runs are old enough, and a few more")

	failedAt := now.Sub(start) + 2*time.Second
	st.err = errors.New("connection refused")
	beatsUntil(failedAt)
	st.err = nil
	lastDoubt := failedAt + window
	beatsUntil(lastDoubt + delivery.LostRunSweep + 4*time.Second)
	want = append(want, every(failedAt+2*time.Second, lastDoubt)...)
	want = append(want, lastDoubt+delivery.LostRunSweep)
	require.Equal(t, want, asked, "a failed heartbeat asks nothing and puts the next ones in doubt; then only the sweep")
}

// TestFleetRetriesARescueThatLeftJobs: a rescue that skipped jobs (their
// rows locked by the gone dispatcher's own transaction, which lives on
// until the server ends it) is retried at the next heartbeats that may
// rescue, until it leaves none; the heartbeat that found them gone
// deleted their rows, so no later heartbeat would name them again.
func TestFleetRetriesARescueThatLeftJobs(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	st := &fleetStore{beats: []store.FleetBeat{
		{Live: 2}, {Live: 2}, {Live: 2}, {Live: 2},
		{Live: 1, Gone: []string{"cut/1"}},
		{Live: 1},
	}, jobsLeft: []int{2, 1, 0}}
	f := delivery.NewFleet(delivery.FleetConfig{ID: "me", Connections: 15, Interval: 2 * time.Second, Stale: 6 * time.Second,
		Now: func() time.Time { return now }}, st, slog.New(slog.DiscardHandler), delivery.FleetMetrics{})
	require.NoError(t, f.Join(context.Background()))
	for range 7 {
		now = now.Add(2 * time.Second)
		require.NoError(t, f.Beat(context.Background()))
	}
	require.Equal(t, [][]string{{"cut/1"}, {"cut/1"}, {"cut/1"}}, st.rescued,
		"found gone once, retried while jobs were left, then no more")
}

// TestFleetLeaseAndRescue: a dispatcher holds its lease from each
// heartbeat it sent until Stale less a margin later, and not before its
// first one nor while its heartbeats fail; the heartbeat that finds
// dispatchers gone makes their jobs available; a fleet past the server's
// connections is refused at Join and left.
func TestFleetLeaseAndRescue(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	st := &fleetStore{beats: []store.FleetBeat{
		{Live: 2, Connections: 30, MaxConnections: 97},
		{Live: 1, Connections: 15, MaxConnections: 97, Gone: []string{"dispatcher-2/ab"}},
		{Live: 1, Connections: 15, MaxConnections: 97},
	}}
	f := delivery.NewFleet(delivery.FleetConfig{ID: "me", Connections: 15, Interval: 2 * time.Second, Stale: 6 * time.Second,
		Now: func() time.Time { return now }}, st, slog.New(slog.DiscardHandler), delivery.FleetMetrics{})
	require.False(t, f.Holds(), "no lease before the first heartbeat")
	require.NoError(t, f.Join(context.Background()))
	require.Equal(t, 2, f.Live())
	require.True(t, f.Holds())
	runBegan := now.Add(time.Second)
	now = now.Add(4900 * time.Millisecond)
	require.True(t, f.Holds(), "within Stale less the margin")
	require.True(t, f.HoldsSince(runBegan), "held without a break since the run began")
	now = now.Add(200 * time.Millisecond)
	require.False(t, f.Holds(), "past Stale less the margin: the others may take its jobs soon")

	require.NoError(t, f.Beat(context.Background()))
	require.True(t, f.Holds(), "a heartbeat renews it")
	require.False(t, f.HoldsSince(runBegan), "a run that began before the lapse sends nothing: its job may be another's")
	require.True(t, f.HoldsSince(now), "a run that began since holds it")
	require.Equal(t, [][]string{{"dispatcher-2/ab"}}, st.rescued, "the gone dispatcher's jobs")
	require.Equal(t, []bool{false, false}, st.rescue, "no rescue from a first heartbeat, nor from one after the lease lapsed")
	for range 3 {
		now = now.Add(2 * time.Second)
		require.NoError(t, f.Beat(context.Background()))
	}
	require.Equal(t, []bool{false, false, false, false, true}, st.rescue,
		"a heartbeat may rescue once the lease held without a break for Stale (6 s since the beat after the lapse)")
	st.rescue = nil

	st.err = errors.New("connection refused")
	require.Error(t, f.Beat(context.Background()))
	now = now.Add(5 * time.Second)
	require.False(t, f.Holds(), "failing heartbeats renew nothing")
	st.err = nil
	require.NoError(t, f.Beat(context.Background()))
	for range 3 {
		now = now.Add(2 * time.Second)
		require.NoError(t, f.Beat(context.Background()))
	}
	require.Equal(t, []bool{true, false, false, false, true}, st.rescue,
		"a heartbeat sent while the lease held may rescue; after an outage, none until the lease held for Stale again")

	over := &fleetStore{beats: []store.FleetBeat{{Live: 5, Connections: 105, MaxConnections: 97}}}
	g := delivery.NewFleet(delivery.FleetConfig{ID: "late", Connections: 21, Stale: 6 * time.Second}, over, slog.New(slog.DiscardHandler), delivery.FleetMetrics{})
	err := g.Join(context.Background())
	require.ErrorIs(t, err, delivery.ErrFleetConnections)
	require.ErrorContains(t, err, "105 connections")
	require.Equal(t, []string{"late"}, over.left)
}

// TestFleetKickBeatsAtOnce: a kick (another dispatcher joined or left)
// makes Run heartbeat at once, not at its next interval, and so learn the
// live fleet; kicks while one is pending are one.
func TestFleetKickBeatsAtOnce(t *testing.T) {
	t.Parallel()
	st := &fleetStore{beats: []store.FleetBeat{{Live: 1}, {Live: 2, Rank: 1}}}
	f := delivery.NewFleet(delivery.FleetConfig{ID: "me", Connections: 15, Interval: time.Hour, Stale: 3 * time.Hour},
		st, slog.New(slog.DiscardHandler), delivery.FleetMetrics{})
	require.NoError(t, f.Join(context.Background()))
	require.Equal(t, 1, f.Live())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	defer func() { cancel(); <-done }()
	f.Kick()
	f.Kick()
	require.Eventually(t, func() bool { return f.Live() == 2 }, time.Minute, time.Millisecond, "the kick's heartbeat saw the fleet grow")
	shard, n := f.Share()
	require.Equal(t, []int{1, 2}, []int{shard, n})
	st.mu.Lock()
	beats := len(st.rescue)
	st.mu.Unlock()
	require.LessOrEqual(t, beats, 3, "the join, and one or two kicked heartbeats, none of them the hour's")
}

// TestFleetFinishesItsHeartbeatBeforeItLeaves: a heartbeat under way when
// the dispatcher stops is finished before the leave, not abandoned:
// abandoned, its statement could still reach the server after the
// leave's delete and put the row back, and the others would count a
// stopped dispatcher until it went stale. One that does not come back
// within LeaveTimeout is given up, and the leave still runs.
func TestFleetFinishesItsHeartbeatBeforeItLeaves(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		arrive bool
		want   []string
	}{
		{"finished", true, []string{"heartbeat", "leave"}},
		{"given up", false, []string{"heartbeat abandoned", "leave"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := &fleetStore{beats: []store.FleetBeat{{Live: 2}}}
			timeout := time.Hour
			if !tt.arrive {
				timeout = time.Millisecond
			}
			f := delivery.NewFleet(delivery.FleetConfig{ID: "me", Connections: 15, Interval: time.Hour, Stale: 3 * time.Hour,
				LeaveTimeout: timeout}, st, slog.New(slog.DiscardHandler), delivery.FleetMetrics{})
			require.NoError(t, f.Join(context.Background()))
			st.mu.Lock()
			st.onTheWay, st.arrive, st.events = make(chan context.Context), make(chan struct{}), nil
			st.mu.Unlock()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); f.Run(ctx) }()
			f.Kick()
			beat := <-st.onTheWay
			cancel()
			if tt.arrive {
				require.NoError(t, beat.Err(), "the stop does not cut the heartbeat under way")
				close(st.arrive)
			}
			<-done
			st.mu.Lock()
			defer st.mu.Unlock()
			require.Equal(t, tt.want, st.events)
		})
	}
}

// TestFleetHeartbeatPanicIsItsError: a heartbeat that panics is a failed
// heartbeat, not the process's end: Run goes on, and its stop still
// leaves the fleet.
func TestFleetHeartbeatPanicIsItsError(t *testing.T) {
	t.Parallel()
	st := &fleetStore{beats: []store.FleetBeat{{Live: 1}}}
	f := delivery.NewFleet(delivery.FleetConfig{ID: "me", Connections: 15, Interval: time.Hour, Stale: 3 * time.Hour},
		st, slog.New(slog.DiscardHandler), delivery.FleetMetrics{})
	require.NoError(t, f.Join(context.Background()))
	panicked := make(chan struct{})
	st.mu.Lock()
	st.during = func() {
		st.during = nil
		close(panicked)
		panic("heartbeat bug")
	}
	st.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	f.Kick()
	<-panicked
	cancel()
	<-done
	st.mu.Lock()
	defer st.mu.Unlock()
	require.Equal(t, []string{"me"}, st.left)
}

// TestFleetLeaseBreaksWhenAHeartbeatComesBackLateOrForgotten: a heartbeat
// sent while the lease held that comes back after it would have lapsed
// (the database frozen meanwhile) renews it from its send, but as a new
// lease: a run begun before sends nothing, since others may have judged
// this process gone. One that finds this process was forgotten (its row
// put back: another's heartbeat deleted it, and may have rescued its
// jobs) starts the lease anew from its return.
func TestFleetLeaseBreaksWhenAHeartbeatComesBackLateOrForgotten(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	st := &fleetStore{beats: []store.FleetBeat{{Live: 1, Joined: true}, {Live: 1}}}
	f := delivery.NewFleet(delivery.FleetConfig{ID: "me", Connections: 15, Interval: 2 * time.Second, Stale: 6 * time.Second,
		Now: func() time.Time { return now }}, st, slog.New(slog.DiscardHandler), delivery.FleetMetrics{})
	require.NoError(t, f.Join(context.Background()))
	runBegan := now.Add(time.Second)
	now = now.Add(2 * time.Second)
	st.during = func() { now = now.Add(4 * time.Second) }
	require.NoError(t, f.Beat(context.Background()))
	require.True(t, f.Holds(), "renewed from its send, 4 s ago")
	require.False(t, f.HoldsSince(runBegan), "the lease lapsed while the heartbeat was on its way")
	require.True(t, f.HoldsSince(now))

	st.during = nil
	now = now.Add(2 * time.Second)
	require.NoError(t, f.Beat(context.Background()))
	runBegan = now.Add(time.Second)
	now = now.Add(2 * time.Second)
	st.beats = []store.FleetBeat{{Live: 1, Joined: true}}
	st.during = func() { now = now.Add(time.Second) }
	require.NoError(t, f.Beat(context.Background()))
	require.True(t, f.Holds())
	require.False(t, f.HoldsSince(runBegan), "forgotten: its jobs may have been rescued")
	require.False(t, f.HoldsSince(now.Add(-time.Millisecond)), "nor one begun while the heartbeat was on its way")
	require.True(t, f.HoldsSince(now))
}
