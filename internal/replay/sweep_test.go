package replay_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/replay"
)

func TestDefaultGrid(t *testing.T) {
	t.Parallel()
	configs := replay.DefaultGrid().Configs(breaker.DefaultConfig())
	require.Len(t, configs, 27)
	require.Equal(t, 0.3, configs[0].FailureRateThreshold)
	require.Equal(t, 30*time.Second, configs[0].Window)
	require.Equal(t, 10, configs[0].MinThroughput)
	require.Equal(t, 0.7, configs[26].FailureRateThreshold)
	require.Equal(t, 120*time.Second, configs[26].Window)
	require.Equal(t, 50, configs[26].MinThroughput)
	for _, c := range configs {
		require.Equal(t, breaker.TripRate, c.Trip)
		require.NoError(t, c.Validate())
	}
}

func TestRank(t *testing.T) {
	t.Parallel()
	cand := func(name int, falseTrips int, detect *time.Duration, sent int) replay.Candidate {
		c := breaker.DefaultConfig()
		c.MinThroughput = name
		tally := replay.Tally{OpensQuiet: falseTrips, Incidents: 1, Sent: sent}
		if detect != nil {
			tally.Detections = []time.Duration{*detect}
		}
		return replay.Candidate{Config: c, Figures: tally.Figures()}
	}
	cands := []replay.Candidate{
		cand(1, 1, secs(1), 10),  // fastest but a false trip
		cand(2, 0, nil, 0),       // never detects
		cand(3, 0, secs(5), 500), // slow
		cand(4, 0, secs(2), 300), // fast, sends more
		cand(5, 0, secs(2), 200), // fast, sends least
		cand(6, 2, secs(1), 10),  // two false trips
		cand(7, 0, secs(2), 200), // ties with 5: keeps its place
	}
	replay.Rank(cands)
	var order []int
	for _, c := range cands {
		order = append(order, c.Config.MinThroughput)
	}
	require.Equal(t, []int{5, 7, 4, 3, 2, 1, 6}, order)
}

// TestSweepFindsTheConfigThatSeparatesDegradedFromDown: over a quiet trace
// at 20% errors and an outage after a healthy lead-in, every 10% config and
// the 30% ones with a minimum of 10 (small samples after each close)
// false-trip, and the winner is the fastest config that stays closed on the
// quiet trace: 30% over 10 s with a minimum of 50.
func TestSweepFindsTheConfigThatSeparatesDegradedFromDown(t *testing.T) {
	t.Parallel()
	quiet, err := replay.Synth(replay.SynthConfig{RPS: 20, Phases: []replay.Phase{{Name: "quiet", Duration: 10 * time.Minute, FailureRate: 0.2}}, Spacing: replay.SpacingPoisson, Seed: 1})
	require.NoError(t, err)
	incident, err := replay.Synth(replay.SynthConfig{RPS: 20, Phases: []replay.Phase{
		{Name: "lead-in", Duration: 2 * time.Minute, FailureRate: 0.02},
		{Name: "down", Duration: 5 * time.Minute, FailureRate: 1},
	}, Spacing: replay.SpacingPoisson, Seed: 2})
	require.NoError(t, err)
	grid := replay.Grid{Rates: []float64{0.1, 0.3, 0.5}, Windows: []time.Duration{10 * time.Second, 60 * time.Second}, Mins: []int{10, 50}}
	var progressed int64
	ranked, err := replay.Sweep(grid.Configs(breaker.DefaultConfig()), quiet, incident, replay.SweepOptions{Seed: 1, IncidentPhase: "down", Workers: 3, Progress: func(n int) {
		// Called from several workers; the test only checks the sum.
		addInt64(&progressed, int64(n))
	}})
	require.NoError(t, err)
	require.Len(t, ranked, 12)
	require.Equal(t, int64(12*(len(quiet)+len(incident))), loadInt64(&progressed))
	best := ranked[0]
	require.Zero(t, best.FalseTrips())
	// Every 10% config trips on the quiet trace: they rank last.
	for _, c := range ranked[len(ranked)-4:] {
		require.Equal(t, 0.1, c.Config.FailureRateThreshold)
		require.Positive(t, c.FalseTrips())
	}
	// The time-to-open estimate: 10 s x (0.3 - 0.02) / 0.98 = 2.9 s after the
	// outage starts (Poisson arrivals make it a little earlier or later).
	d, ok := best.Detection()
	require.True(t, ok)
	require.Equal(t, 0.3, best.Config.FailureRateThreshold)
	require.Equal(t, 10*time.Second, best.Config.Window)
	require.Equal(t, 50, best.Config.MinThroughput)
	require.InDelta(t, 2.9, d.Seconds(), 0.8)
	for i := 1; i < len(ranked); i++ {
		require.LessOrEqual(t, ranked[i-1].FalseTrips(), ranked[i].FalseTrips())
	}

	again, err := replay.Sweep(grid.Configs(breaker.DefaultConfig()), quiet, incident, replay.SweepOptions{Seed: 1, IncidentPhase: "down", Workers: 1})
	require.NoError(t, err)
	require.Equal(t, ranked, again, "a sweep is deterministic whatever the number of workers")
}

func TestSweepNeedsATrace(t *testing.T) {
	t.Parallel()
	_, err := replay.Sweep(replay.DefaultGrid().Configs(breaker.DefaultConfig()), nil, nil, replay.SweepOptions{})
	require.EqualError(t, err, "sweep: a quiet or an incident trace is required")
	_, err = replay.Sweep(nil, []replay.Row{}, nil, replay.SweepOptions{})
	require.EqualError(t, err, "sweep: the grid is empty")
	_, err = replay.Sweep(replay.DefaultGrid().Configs(breaker.DefaultConfig()), nil, []replay.Row{row(0, F, "x")}, replay.SweepOptions{IncidentPhase: "down"})
	require.EqualError(t, err, `sweep: the incident trace has no phase "down"`)
}

func addInt64(p *int64, n int64) { atomic.AddInt64(p, n) }

func loadInt64(p *int64) int64 { return atomic.LoadInt64(p) }

// TestScoreMatchesEachConfigAlone: Score replays a rate config once for
// the higher thresholds of its group on a trace it never opened on; every
// tally is still the one its config gives replayed alone, on quiet, noisy
// and incident traces, and the quiet trace is replayed fewer times than
// there are configs.
func TestScoreMatchesEachConfigAlone(t *testing.T) {
	t.Parallel()
	synth := func(seed uint64, phases ...replay.Phase) []replay.Row {
		rows, err := replay.Synth(replay.SynthConfig{RPS: 5, Phases: phases, Spacing: replay.SpacingPoisson, Seed: seed})
		require.NoError(t, err)
		return rows
	}
	quiet := synth(1, replay.Phase{Name: "quiet", Duration: 20 * time.Minute, FailureRate: 0.02})
	traces := []replay.Trace{
		{Rows: quiet},
		{Rows: synth(2, replay.Phase{Name: "noisy", Duration: 20 * time.Minute, FailureRate: 0.45})},
		{Rows: synth(3, replay.Phase{Name: "before", Duration: 5 * time.Minute, FailureRate: 0.05},
			replay.Phase{Name: "outage", Duration: time.Minute, FailureRate: 0.9}), Incident: true, IncidentPhase: "outage"},
	}
	configs := replay.DefaultGrid().Configs(breaker.DefaultConfig())
	consecutive := breaker.DefaultConfig()
	consecutive.Trip, consecutive.ConsecutiveFailures = breaker.TripConsecutive, 3
	configs = append(configs, consecutive)

	var rows atomic.Int64
	opts := replay.SweepOptions{Seed: 7, Workers: 2, Progress: func(n int) { rows.Add(int64(n)) }}
	together, err := replay.Score(configs, traces, opts)
	require.NoError(t, err)
	for i, c := range configs {
		alone, err := replay.Score([]breaker.Config{c}, traces, replay.SweepOptions{Seed: 7})
		require.NoError(t, err)
		require.Equal(t, alone[0], together[i], "config %d (%s)", i, c.Trip)
	}

	rows.Store(0)
	_, err = replay.Score(configs, traces[:1], opts)
	require.NoError(t, err)
	require.Less(t, rows.Load(), int64(len(configs)*len(quiet)), "the quiet trace's higher thresholds were not replayed")
}
