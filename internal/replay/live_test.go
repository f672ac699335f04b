package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/replay"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// liveBundle is a dispatcher's breaker in miniature: one BreakerGate over a
// fresh database with its trial leases, and the endpoint it guards.
type liveBundle struct {
	db     *storetest.DB
	clock  *store.DBClock
	gate   *delivery.BreakerGate
	target *delivery.Target
}

func setupLive(t *testing.T, cfg breaker.Config) *liveBundle {
	t.Helper()
	ctx := context.Background()
	db := storetest.New(t)
	st := store.New(db.Pool, nil)
	ep, err := st.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/hook", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	require.NoError(t, err)
	clock := store.NewDBClock(db.Pool)
	require.NoError(t, clock.Sync(ctx))
	trials := st.TrialLeases()
	// The test flushes by hand after every outcome, so the gate's own
	// loop (Run) never runs; open_jitter 0 means rnd is never used.
	gate := delivery.NewBreakerGate(delivery.BreakerGateConfig{FlushInterval: time.Hour, Actor: "replay-test"},
		st, trials, delivery.FixedBreakerConfig{Config: cfg}, clock.Now, func() float64 { return 0 }, nil, nil)
	require.NoError(t, gate.Load(ctx))
	return &liveBundle{db: db, clock: clock, gate: gate, target: &delivery.Target{Endpoint: ep}}
}

type liveTransition struct {
	from, to breaker.State
	reason   string
}

// transitions returns the breaker_transitions the live run wrote.
func (b *liveBundle) transitions(t *testing.T) []liveTransition {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `SELECT from_state, to_state, reason FROM breaker_transitions WHERE endpoint_id = $1 ORDER BY id`, b.target.ID)
	require.NoError(t, err)
	defer rows.Close()
	var out []liveTransition
	for rows.Next() {
		var from, to, reason string
		require.NoError(t, rows.Scan(&from, &to, &reason))
		f, err := breaker.ParseState(from)
		require.NoError(t, err)
		s, err := breaker.ParseState(to)
		require.NoError(t, err)
		out = append(out, liveTransition{f, s, reason})
	}
	require.NoError(t, rows.Err())
	return out
}

// TestReplayAgreesWithTheLiveBreaker feeds one outcome sequence to the
// Postgres-backed breaker the dispatcher runs (BreakerGate, its shared
// buckets, CommitTransition and the trial leases) and to
// replay, and requires the same transitions.
//
// The live run is in real time: a row every 50 ms, one outcome at a time,
// each flushed at once, because the store evaluates on the database's
// clock. Each row's outcome follows from its database-clock time since the
// start: healthy for 1 s, an outage until 2.8 s, then recovery until 4 s
// and on until the live breaker has closed (a loaded machine spaces the
// rows further apart than 50 ms, and the two trials then take longer).
// Replay gets exactly those timestamps. With a 1 s window (50 ms buckets),
// min 5, 50%, open 800 ms and 2 trials, the breaker trips about 0.45 s into
// the outage, its probe at about 2.25 s fails, the one at about 3.05 s and
// the next succeed: every decision is a quarter of a second or more from a
// phase boundary, so a few milliseconds of flush latency cannot change it.
func TestReplayAgreesWithTheLiveBreaker(t *testing.T) {
	t.Parallel()
	cfg := breaker.Config{
		Trip: breaker.TripRate, FailureRateThreshold: 0.5, Window: time.Second, MinThroughput: 5,
		ConsecutiveFailures: 5, OpenDuration: 800 * time.Millisecond, OpenJitter: 0, OpenBackoff: 1,
		MaxOpenDuration: time.Minute, HalfOpenTrials: 2, HalfOpenConcurrency: 1,
	}
	b := setupLive(t, cfg)
	ctx := context.Background()

	const (
		spacing     = 50 * time.Millisecond
		outageStart = time.Second
		outageEnd   = 2800 * time.Millisecond
		end         = 4 * time.Second
		// giveUp bounds a recovery that never closes the live breaker.
		giveUp = 60 * time.Second
	)
	var rows []replay.Row
	var refused, trials int
	var maxLag time.Duration // from a row's timestamp to the end of its flush
	start := time.Now()
	t0 := b.clock.Now()
	for i := 0; ; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * spacing)))
		at := b.clock.Now()
		elapsed := at.Sub(t0)
		if elapsed >= end {
			tr := b.transitions(t)
			if len(tr) > 0 && tr[len(tr)-1].to == breaker.StateClosed || elapsed >= giveUp {
				break
			}
		}
		r := replay.Row{TS: time.Duration(at.UnixNano()), Outcome: breaker.OutcomeSuccess, Phase: "healthy"}
		class := delivery.ClassSuccess
		switch {
		case elapsed >= outageEnd:
			r.Phase = "recovery"
		case elapsed >= outageStart:
			r.Outcome, r.Phase, class = breaker.OutcomeFailure, "outage", delivery.ClassFailure
		}
		adm, err := b.gate.Admit(ctx, b.target)
		require.NoError(t, err)
		switch {
		case adm.Refused:
			refused++
		default:
			if adm.Trial {
				trials++
			}
			adm.Finish(ctx, delivery.Outcome{Class: class, At: at})
		}
		b.gate.Flush(ctx)
		maxLag = max(maxLag, b.clock.Now().Sub(at))
		rows = append(rows, r)
	}
	live := b.transitions(t)

	var replayed []liveTransition
	trialRows := map[int]bool{}
	report, err := replay.Replay(cfg, rows, replay.Options{OnEvent: func(e replay.Event) {
		replayed = append(replayed, liveTransition{e.Transition.From, e.Transition.To, e.Transition.Reason})
		if e.Became == replay.BecameTrial {
			trialRows[e.Index] = true
		}
	}})
	require.NoError(t, err)

	want := []liveTransition{
		{breaker.StateClosed, breaker.StateOpen, breaker.ReasonFailureRate},
		{breaker.StateOpen, breaker.StateHalfOpen, breaker.ReasonOpenElapsed},
		{breaker.StateHalfOpen, breaker.StateOpen, breaker.ReasonTrialFailed},
		{breaker.StateOpen, breaker.StateHalfOpen, breaker.ReasonOpenElapsed},
		{breaker.StateHalfOpen, breaker.StateClosed, breaker.ReasonTrialsSucceeded},
	}
	require.Equal(t, want, live, "the live breaker's transitions")
	require.Equal(t, live, replayed, "replay's transitions equal the live breaker's")
	require.Equal(t, 3, trials, "live: one failed probe, two successful ones")
	require.Len(t, trialRows, 3, "replay: one failed probe, two successful ones")
	// The figures agree too, give or take the rows that the live run's
	// latency moves: it opens at its flush's database time, up to maxLag
	// after the row's timestamp that replay opens at, so each of its two
	// opens may refuse the rows of up to maxLag more.
	slack := 2 + 2*int((maxLag+spacing-1)/spacing)
	require.InDelta(t, refused, report.Total.Rejected, float64(slack), "max lag %s", maxLag)
	require.Equal(t, len(rows), report.Total.Requests)
}
