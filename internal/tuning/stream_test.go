package tuning_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/replay"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/trafficclass"
	"github.com/hookd/hookd/internal/tuning"
)

// inMemory is what a pass that holds every attempt of the range at once
// finds: each endpoint's whole log read up front (the sweep's reader),
// measured, reduced, derived, cut into segments and replayed through the
// grid, as the tuning pass did before it streamed the log.
type inMemory struct {
	evidence tuning.Evidence
	configs  []breaker.Config
	segments map[string][]tuning.Segment
	enough   bool
	decision tuning.Decision
}

func passInMemory(t *testing.T, st *store.Store, class string, since, until time.Time) inMemory {
	t.Helper()
	ctx := context.Background()
	c, err := st.GetClass(ctx, class)
	require.NoError(t, err)
	ids, err := st.ClassEndpointIDs(ctx, class)
	require.NoError(t, err)
	opens, err := st.ListOpens(ctx, ids, since, until)
	require.NoError(t, err)
	recorded := map[string][]tuning.RecordedOpen{}
	for _, o := range opens {
		if !o.Shadow {
			recorded[o.EndpointID] = append(recorded[o.EndpointID], tuning.RecordedOpen{At: o.At, Observations: o.Observations, Failures: o.Failures})
		}
	}
	logs := make([][]replay.Row, len(ids))
	evs := make([]tuning.EndpointEvidence, len(ids))
	for i, id := range ids {
		logs[i], err = replay.LoadAttempts(ctx, st, id, since, until)
		require.NoError(t, err)
		evs[i] = tuning.Measure(id, logs[i], since, until, recorded[id])
	}
	ev := tuning.Reduce(since, until, evs)
	bounds := tuning.BoundsOf(c)
	out := inMemory{configs: tuning.Grid(tuning.Derive(ev, c.Breaker, bounds), c.Breaker, bounds), segments: map[string][]tuning.Segment{}}
	lead := tuning.LeadFor(out.configs)
	var quietSum, quietWeight float64
	for i, id := range ids {
		if !evs[i].Counted() {
			continue
		}
		out.segments[id] = tuning.Segments(since, until, evs[i].Incidents, lead)
		quietSum += float64(evs[i].Attempts) * tuning.ActiveQuiet(logs[i], out.segments[id], since).Seconds()
		quietWeight += float64(evs[i].Attempts)
	}
	var quiet time.Duration
	if quietWeight > 0 {
		quiet = time.Duration(quietSum / quietWeight * float64(time.Second)).Round(time.Second)
	}
	out.evidence = ev.View(quiet)
	if out.enough, _ = tuning.EnoughEvidence(ev, quiet); !out.enough {
		return out
	}
	tallies := make([]replay.Tally, len(out.configs))
	for i, id := range ids {
		traces := tuning.Traces(logs[i], out.segments[id])
		if len(traces) == 0 || !evs[i].Counted() {
			continue
		}
		part, err := replay.Score(out.configs, traces, replay.SweepOptions{Seed: replay.DefaultSeed, Workers: 1})
		require.NoError(t, err)
		for j := range tallies {
			tallies[j].Add(part[j])
		}
	}
	out.decision = tuning.DecideWith(c.Breaker, replay.Ranked(out.configs, tallies), tuning.History{})
	return out
}

// TestStreamedPassMatchesTheInMemoryPass: a pass that reads the log one
// endpoint at a time finds, on the same logs, what a pass holding every
// attempt at once finds: the evidence, the grid, the segments, the ranking
// and the proposal.
func TestStreamedPassMatchesTheInMemoryPass(t *testing.T) {
	t.Parallel()
	consecutive := breaker.DefaultConfig()
	consecutive.Trip, consecutive.ConsecutiveFailures = breaker.TripConsecutive, 3
	cases := []struct {
		name    string
		current breaker.Config
		logs    []func(t *testing.T) []replay.Row
		status  tuning.Status
	}{
		{
			name:    "an outage beside noise and a quiet endpoint",
			current: breaker.DefaultConfig(),
			logs:    []func(t *testing.T) []replay.Row{outageShape, noisyShape, quietShape},
		},
		{
			name:    "a false-tripping class",
			current: consecutive,
			logs:    []func(t *testing.T) []replay.Row{noisyShape, outageShape},
			status:  tuning.StatusProposed,
		},
		{
			name:    "a flaky endpoint beside repeated incidents",
			current: breaker.DefaultConfig(),
			logs: []func(t *testing.T) []replay.Row{
				func(t *testing.T) []replay.Row { return repeated(t, 8, 21, span, 0.01, 4, 20*time.Second, 0.9) },
				func(t *testing.T) []replay.Row { return synth(t, 6, 22, phase("flaky", span, 0.15)) },
				func(t *testing.T) []replay.Row { return synth(t, 4, 23, phase("steady", span, 0.01)) },
			},
		},
		{
			name:    "too little evidence",
			current: consecutive,
			logs: []func(t *testing.T) []replay.Row{
				func(t *testing.T) []replay.Row { return synth(t, 0.05, 4, phase("noisy", span, 0.2)) },
				quietShape,
			},
			status: tuning.StatusKept,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tuning.Config{})
			ctx := context.Background()
			b.class(t, "c", tc.current, trafficclass.AutoTuneRecommend)
			for _, rows := range tc.logs {
				b.log(t, b.endpoint(t, "c"), start, rows(t))
			}
			b.now = start.Add(span)
			want := passInMemory(t, b.st, "c", start, start.Add(span))
			rec, configs, segments, err := b.tuner.PassDetail(ctx, "c", start, start.Add(span))
			require.NoError(t, err)
			if tc.status != "" {
				require.Equal(t, tc.status, rec.Status, rec.Reasons)
			}
			require.Equal(t, want.evidence, *rec.Evidence)
			require.Equal(t, want.configs, configs)
			require.Equal(t, want.segments, segments)
			if !want.enough {
				require.Equal(t, tuning.StatusKept, rec.Status)
				require.Nil(t, rec.Proposed)
				require.Zero(t, rec.Configs)
				return
			}
			d := want.decision
			require.Equal(t, len(want.configs), rec.Configs)
			require.Equal(t, d.Status, rec.Status)
			require.Equal(t, d.Reasons, rec.Reasons)
			require.Equal(t, tuning.NewFigures(*d.Current), rec.Figures.Current)
			if d.Proposed == nil {
				require.Nil(t, rec.Proposed)
				return
			}
			require.Equal(t, *d.Proposed, breaker.Config(*rec.Proposed))
			require.Equal(t, tuning.NewFigures(*d.Best), rec.Figures.Proposed)
		})
	}
}

// TestPassHoldsOneEndpointsLogAtATime: the most rows of the log a pass
// holds at once is one endpoint's log and its traces, the same for a class
// of two endpoints as for one of eight with the same logs: it grows with
// the largest endpoint's log, never with the class's attempts.
func TestPassHoldsOneEndpointsLogAtATime(t *testing.T) {
	t.Parallel()
	b := setup(t, tuning.Config{})
	ctx := context.Background()
	// Every endpoint logs the same attempts: about 5 a second, one
	// outage.
	rows := repeated(t, 5, 30, span, 0.01, 1, 30*time.Second, 1)
	perEndpoint := len(rows)
	held := map[int]int{}
	for _, n := range []int{2, 8} {
		class := fmt.Sprintf("held-%d", n)
		b.class(t, class, breaker.DefaultConfig(), trafficclass.AutoTuneRecommend)
		for range n {
			b.log(t, b.endpoint(t, class), start, rows)
		}
		b.now = start.Add(span)
		rec, h, err := b.tuner.PassHeld(ctx, class, start, start.Add(span))
		require.NoError(t, err)
		require.Equal(t, n*perEndpoint, rec.Evidence.Attempts)
		require.Equal(t, n, rec.Evidence.Incidents)
		require.NotZero(t, rec.Configs, "the pass replayed the grid: %v", rec.Reasons)
		held[n] = h
	}
	t.Logf("rows held at once: %v", held)
	require.Equal(t, held[2], held[8], "the same with four times the attempts")
	require.GreaterOrEqual(t, held[8], perEndpoint, "one endpoint's log")
	require.LessOrEqual(t, held[8], 2*perEndpoint, "one endpoint's log and its traces, no more")
}
