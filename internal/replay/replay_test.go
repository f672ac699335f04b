package replay_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/replay"
)

const (
	S = breaker.OutcomeSuccess
	F = breaker.OutcomeFailure
	I = breaker.OutcomeIgnore
	A = breaker.OutcomeAuthFailure
)

// row builds a row at ts seconds.
func row(ts float64, o breaker.Outcome, phase string) replay.Row {
	return replay.Row{TS: time.Duration(ts * float64(time.Second)), Outcome: o, Phase: phase}
}

func secs(s float64) *time.Duration {
	d := time.Duration(s * float64(time.Second))
	return &d
}

// transition is the part of a transition the hand-built traces pin.
type transition struct {
	at       float64
	from, to breaker.State
	reason   string
	became   string
}

// replayed replays rows and returns the report and its transitions.
func replayed(t *testing.T, c breaker.Config, rows []replay.Row) (replay.Report, []transition) {
	t.Helper()
	var got []transition
	r, err := replay.Replay(c, rows, replay.Options{Seed: replay.DefaultSeed, OnEvent: func(e replay.Event) {
		got = append(got, transition{at: e.Offset.Seconds(), from: e.Transition.From, to: e.Transition.To, reason: e.Transition.Reason, became: e.Became})
	}})
	require.NoError(t, err)
	return r, got
}

// rateConfig is a small rate breaker for hand-built traces: 50% over 30 s
// with at least 5 observations, open 5 s with no jitter, 2 trials.
func rateConfig() breaker.Config {
	return breaker.Config{
		Trip: breaker.TripRate, FailureRateThreshold: 0.5, Window: 30 * time.Second, MinThroughput: 5,
		ConsecutiveFailures: 5, OpenDuration: 5 * time.Second, OpenJitter: 0, OpenBackoff: 1,
		MaxOpenDuration: time.Minute, HalfOpenTrials: 2, HalfOpenConcurrency: 1,
	}
}

// TestReplayHandBuiltRateTrace walks a rate breaker through the guard, a
// trip, a failed trial, a recovery over two trials and a second trip that
// only happens because the window was replaced on close, and pins every
// figure of every phase.
func TestReplayHandBuiltRateTrace(t *testing.T) {
	t.Parallel()
	rows := []replay.Row{
		// guard: 100% failing but under min_throughput 5: suppressed.
		row(0, F, "guard"), row(1, F, "guard"), row(2, F, "guard"),
		// trip: the 4th failure is suppressed, the 5th trips at t=4 (open
		// until 9); the rest are rejected, one of them healthy.
		row(3, F, "trip"), row(4, F, "trip"), row(5, S, "trip"), row(6, F, "trip"), row(7, I, "trip"),
		// halfopen: the trial at 9 fails (open until 14), 12 is rejected,
		// trials at 14 (success), 14.5 (auth_failure: gives the slot back,
		// counts for nothing) and 15 (success) close the breaker.
		row(9, F, "halfopen"), row(12, S, "halfopen"), row(14, S, "halfopen"), row(14.5, A, "halfopen"), row(15, S, "halfopen"),
		// after: the closed breaker has a new, empty window. The failures
		// of t=0..4 are still within 30 s, so with the old window 16 would
		// trip at once; instead four failures are suppressed and the fifth
		// observation (a success, 4/5 failing) trips at 20.
		row(16, F, "after"), row(17, F, "after"), row(18, F, "after"), row(19, F, "after"), row(20, S, "after"), row(21, S, "after"),
	}
	r, events := replayed(t, rateConfig(), rows)

	require.Equal(t, []transition{
		{4, breaker.StateClosed, breaker.StateOpen, breaker.ReasonFailureRate, replay.BecameSent},
		{9, breaker.StateOpen, breaker.StateHalfOpen, breaker.ReasonOpenElapsed, replay.BecameTrial},
		{9, breaker.StateHalfOpen, breaker.StateOpen, breaker.ReasonTrialFailed, replay.BecameTrial},
		{14, breaker.StateOpen, breaker.StateHalfOpen, breaker.ReasonOpenElapsed, replay.BecameTrial},
		{15, breaker.StateHalfOpen, breaker.StateClosed, breaker.ReasonTrialsSucceeded, replay.BecameTrial},
		{20, breaker.StateClosed, breaker.StateOpen, breaker.ReasonFailureRate, replay.BecameSent},
	}, events)
	require.Equal(t, []replay.PhaseStats{
		{Name: "guard", Stats: replay.Stats{Requests: 3, Sent: 3, Wasted: 3, Suppressed: 3}},
		{Name: "trip", Stats: replay.Stats{
			Requests: 5, Sent: 2, Rejected: 3, BlockedHealthy: 1, Wasted: 2, Opens: 1, Suppressed: 1,
			// From the phase's first row (3) to the open (4).
			FirstOpen: secs(1),
			// Open from 4 until the next row of another phase (9).
			TimeOpen: 5 * time.Second,
		}},
		{Name: "halfopen", Stats: replay.Stats{
			Requests: 5, Sent: 4, Rejected: 1, BlockedHealthy: 1, Wasted: 1, Opens: 1,
			FirstOpen: secs(0),
			// Not closed from 9 until the close at 15.
			TimeOpen: 6 * time.Second,
		}},
		{Name: "after", Stats: replay.Stats{
			Requests: 6, Sent: 5, Rejected: 1, BlockedHealthy: 1, Wasted: 4, Opens: 1, Suppressed: 4,
			FirstOpen: secs(4),
			// Open from 20 to the last row (21), which starts no interval.
			TimeOpen: time.Second,
		}},
	}, r.Phases)
	require.Equal(t, replay.Stats{
		Requests: 19, Sent: 14, Rejected: 5, BlockedHealthy: 3, Wasted: 10, Opens: 3, Suppressed: 8,
		FirstOpen: secs(4), TimeOpen: 12 * time.Second,
	}, r.Total)
	require.Equal(t, rateConfig(), r.Config)
}

// TestReplayConsecutiveMode pins a consecutive breaker: a success resets
// the run, ignore does not, and a close starts the count afresh.
func TestReplayConsecutiveMode(t *testing.T) {
	t.Parallel()
	c := rateConfig()
	c.Trip, c.ConsecutiveFailures, c.HalfOpenTrials = breaker.TripConsecutive, 3, 1
	rows := []replay.Row{
		// noise: two failures, a success resets the run, a failure and an
		// ignore leave it at 1.
		row(0, F, "noise"), row(1, F, "noise"), row(2, S, "noise"), row(3, F, "noise"), row(4, I, "noise"),
		// run: failures at 5 and 6 make 3 in a row: open at 6 until 11.
		row(5, F, "run"), row(6, F, "run"), row(7, S, "run"), row(10.5, S, "run"),
		// recover: one trial closes; the count starts again, two failures
		// do not trip.
		row(11, S, "recover"), row(12, F, "recover"), row(13, F, "recover"), row(14, S, "recover"),
	}
	r, events := replayed(t, c, rows)
	require.Equal(t, []transition{
		{6, breaker.StateClosed, breaker.StateOpen, breaker.ReasonConsecutiveFailures, replay.BecameSent},
		{11, breaker.StateOpen, breaker.StateHalfOpen, breaker.ReasonOpenElapsed, replay.BecameTrial},
		{11, breaker.StateHalfOpen, breaker.StateClosed, breaker.ReasonTrialsSucceeded, replay.BecameTrial},
	}, events)
	require.Equal(t, []replay.PhaseStats{
		{Name: "noise", Stats: replay.Stats{Requests: 5, Sent: 5, Wasted: 3}},
		{Name: "run", Stats: replay.Stats{Requests: 4, Sent: 2, Rejected: 2, BlockedHealthy: 2, Wasted: 2, Opens: 1, FirstOpen: secs(1), TimeOpen: 5 * time.Second}},
		{Name: "recover", Stats: replay.Stats{Requests: 4, Sent: 4, Wasted: 2}},
	}, r.Phases)
	require.Equal(t, 1, r.Total.Opens)
	require.Equal(t, secs(6), r.Total.FirstOpen)
}

// TestReplayPhasesInFirstAppearanceOrder: a label that comes back adds to
// its first entry, and an unlabelled trace has no phases.
func TestReplayPhasesInFirstAppearanceOrder(t *testing.T) {
	t.Parallel()
	rows := []replay.Row{row(0, S, "zeta"), row(1, S, "alpha"), row(2, F, "zeta"), row(3, S, "mid")}
	r, err := replay.Replay(rateConfig(), rows, replay.Options{})
	require.NoError(t, err)
	require.Len(t, r.Phases, 3)
	require.Equal(t, []string{"zeta", "alpha", "mid"}, []string{r.Phases[0].Name, r.Phases[1].Name, r.Phases[2].Name})
	zeta, ok := r.Phase("zeta")
	require.True(t, ok)
	require.Equal(t, replay.Stats{Requests: 2, Sent: 2, Wasted: 1}, zeta)
	_, ok = r.Phase("nope")
	require.False(t, ok)

	r, err = replay.Replay(rateConfig(), []replay.Row{row(0, S, ""), row(1, F, "")}, replay.Options{})
	require.NoError(t, err)
	require.Nil(t, r.Phases)
	require.Equal(t, 2, r.Total.Requests)
}

func TestReplayRejectsBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  func(*breaker.Config)
		rows []replay.Row
		want string
	}{
		{"unsorted rows", nil, []replay.Row{row(2, S, ""), row(1, S, "")}, "row 2 at 1 before 2: rows are not in time order"},
		{"invalid config", func(c *breaker.Config) { c.MinThroughput = 0 }, nil, "breaker config: min_throughput: must be at least 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := rateConfig()
			if tt.cfg != nil {
				tt.cfg(&c)
			}
			_, err := replay.Replay(c, tt.rows, replay.Options{})
			require.EqualError(t, err, tt.want)
		})
	}
	_, err := replay.Replay(rateConfig(), []replay.Row{row(2, S, ""), row(1, S, "")}, replay.Options{})
	require.True(t, errors.Is(err, replay.ErrUnsorted))
}

// TestReplayJitterIsSeeded: the open jitter comes from the seed, so one
// seed always gives the same open_until and another seed a different one.
func TestReplayJitterIsSeeded(t *testing.T) {
	t.Parallel()
	c := rateConfig()
	c.OpenJitter = 0.5
	var rows []replay.Row
	for i := range 200 {
		rows = append(rows, row(float64(i)*0.1, F, ""))
	}
	opensAt := func(seed uint64) []time.Time {
		var until []time.Time
		_, err := replay.Replay(c, rows, replay.Options{Seed: seed, OnEvent: func(e replay.Event) {
			if e.Transition.To == breaker.StateOpen {
				until = append(until, e.Transition.OpenUntil)
			}
		}})
		require.NoError(t, err)
		return until
	}
	first := opensAt(7)
	require.NotEmpty(t, first)
	require.Equal(t, first, opensAt(7))
	require.NotEqual(t, first, opensAt(8))
	for _, u := range first {
		require.True(t, u.Sub(time.Unix(0, 0)) > 0)
	}
}

// TestReplayProgressCountsEveryRow: Progress sees every row exactly once.
func TestReplayProgressCountsEveryRow(t *testing.T) {
	t.Parallel()
	rows := make([]replay.Row, replay.ProgressEvery*2+5)
	for i := range rows {
		rows[i] = replay.Row{TS: time.Duration(i) * time.Millisecond}
	}
	var calls, total int
	_, err := replay.Replay(rateConfig(), rows, replay.Options{Progress: func(n int) { calls++; total += n }})
	require.NoError(t, err)
	require.Equal(t, 3, calls)
	require.Equal(t, len(rows), total)
}

// TestReportMarshalsToTheCommandsJSON: a Report encodes as the command's
// --json output does, phases in first-appearance order.
func TestReportMarshalsToTheCommandsJSON(t *testing.T) {
	t.Parallel()
	r, err := replay.Replay(rateConfig(), []replay.Row{row(0, S, "zeta"), row(1, F, "alpha")}, replay.Options{})
	require.NoError(t, err)
	data, err := json.Marshal(r)
	require.NoError(t, err)
	require.JSONEq(t, `{
		"config": {"trip": "rate", "failure_rate_threshold": 0.5, "window": "30s", "min_throughput": 5, "consecutive_failures": 5,
			"open_duration": "5s", "open_jitter": 0, "open_backoff": 1, "max_open_duration": "1m", "half_open_trials": 2, "half_open_concurrency": 1},
		"total": {"requests": 2, "sent": 2, "rejected": 0, "blocked_healthy": 0, "wasted": 1, "opens": 0, "first_open_s": null, "time_open_s": 0, "suppressed": 1},
		"phases": {
			"zeta": {"requests": 1, "sent": 1, "rejected": 0, "blocked_healthy": 0, "wasted": 0, "opens": 0, "first_open_s": null, "time_open_s": 0, "suppressed": 0},
			"alpha": {"requests": 1, "sent": 1, "rejected": 0, "blocked_healthy": 0, "wasted": 1, "opens": 0, "first_open_s": null, "time_open_s": 0, "suppressed": 1}
		}
	}`, string(data))
	require.Less(t, strings.Index(string(data), `"zeta"`), strings.Index(string(data), `"alpha"`))
}
