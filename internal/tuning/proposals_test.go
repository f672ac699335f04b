package tuning_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/replay"
	"github.com/hookd/hookd/internal/trafficclass"
	"github.com/hookd/hookd/internal/tuning"
)

// repeated returns rps traffic over span at failure rate base with n
// incidents of length each at failure rate level, evenly spread (the first
// a spacing in).
func repeated(t *testing.T, rps float64, seed uint64, span time.Duration, base float64, n int, each time.Duration, level float64) []replay.Row {
	t.Helper()
	var phases []replay.Phase
	gap := span / time.Duration(n+1)
	at := time.Duration(0)
	for range n {
		phases = append(phases, phase("base", gap-each, base), phase("incident", each, level))
		at += gap
	}
	phases = append(phases, phase("base", span-at, base))
	return synth(t, rps, seed, phases...)
}

// classLog is one endpoint's log in a proposal case.
type classLog struct {
	rows func(t *testing.T, i int) []replay.Row
	n    int // endpoints with this log (seeded apart)
}

// TestPassProposals runs a pass over classes whose logs look like a fleet's
// and checks what each may (and may not) be proposed.
func TestPassProposals(t *testing.T) {
	t.Parallel()
	const hours = 2 * time.Hour
	rate := func(threshold float64, window time.Duration, minimum int) breaker.Config {
		c := breaker.DefaultConfig()
		c.FailureRateThreshold, c.Window, c.MinThroughput = threshold, window, minimum
		return c
	}
	cases := []struct {
		name    string
		current breaker.Config
		span    time.Duration
		logs    []classLog
		check   func(t *testing.T, rec tuning.Recommendation)
	}{
		{
			// The live config catches ten degraded-service incidents and
			// trips now and then on a flaky endpoint; a config quiet on
			// the flaky endpoint that misses incidents is no proposal.
			name:    "flaky endpoint beside ten incidents",
			current: rate(0.5, 10*time.Second, 20),
			span:    hours,
			logs: []classLog{
				{n: 1, rows: func(t *testing.T, i int) []replay.Row {
					return repeated(t, 10, 21, hours, 0.02, 10, time.Minute, 0.7)
				}},
				{n: 1, rows: func(t *testing.T, i int) []replay.Row { return synth(t, 5, 22, phase("flaky", hours, 0.45)) }},
			},
			check: func(t *testing.T, rec tuning.Recommendation) {
				require.Equal(t, 10, rec.Evidence.Incidents, "the ten incidents, nothing on the flaky endpoint")
				require.NotNil(t, rec.Figures.Current)
				require.Equal(t, 10, rec.Figures.Current.IncidentsDetected, "the live config detects the ten")
				require.Positive(t, rec.Figures.Current.OpensQuiet, "and trips on the flaky endpoint")
				if rec.Status == tuning.StatusProposed {
					require.Equal(t, 10, rec.Figures.Proposed.IncidentsDetected, "a proposal detects every incident: %v", rec.Reasons)
					require.LessOrEqual(t, *rec.Figures.Proposed.DetectSMax, *rec.Figures.Current.DetectSMax+tuning.DetectSlack.Seconds())
				}
			},
		},
		{
			// Forty endpoints of a request a minute (2% errors: a 5-minute
			// bucket of five requests with one failure is 20%, and most
			// minutes of the p5 are idle) beside one busy endpoint with an
			// outage: the class's numbers are the busy endpoint's, which
			// carries the volume.
			name:    "many quiet small endpoints and one incident",
			current: breaker.DefaultConfig(),
			span:    hours,
			logs: []classLog{
				{n: 40, rows: func(t *testing.T, i int) []replay.Row {
					return synth(t, 1.0/60, uint64(100+i), phase("trickle", hours, 0.02))
				}},
				{n: 1, rows: func(t *testing.T, i int) []replay.Row {
					return synth(t, 10, 23, phase("before", time.Hour, 0.02), phase("outage", time.Minute, 1), phase("after", hours-time.Hour-time.Minute, 0.02))
				}},
			},
			check: func(t *testing.T, rec tuning.Recommendation) {
				require.Equal(t, 1, rec.Evidence.Incidents)
				require.Less(t, rec.Evidence.HealthyErrorRate, 0.05, "the busy endpoint's 2%, not a small one's 1 failure in 5")
				require.Greater(t, rec.Evidence.QuietRPS, 5.0, "the busy endpoint's quiet volume, not the idle minutes' 0")
				if rec.Status == tuning.StatusProposed {
					require.LessOrEqual(t, rec.Proposed.FailureRateThreshold, 0.6)
					require.LessOrEqual(t, rec.Proposed.Window, time.Minute)
					require.Equal(t, 1, rec.Figures.Proposed.IncidentsDetected)
					within(t, breaker.Config(*rec.Proposed))
				}
			},
		},
		{
			// The live config sits at the ceilings (0.9, 10 minutes) and the
			// noise derives 0.9 again: the grid around them goes no
			// further, and no proposal leaves the limits.
			name:    "a class at the grid's edge",
			current: rate(0.9, 10*time.Minute, 20),
			span:    hours,
			logs: []classLog{
				{n: 2, rows: func(t *testing.T, i int) []replay.Row {
					return synth(t, 2, uint64(30+i), phase("noisy", time.Hour, 0.3), phase("outage", 3*time.Minute, 1), phase("after", time.Hour-3*time.Minute, 0.3))
				}},
			},
			check: func(t *testing.T, rec tuning.Recommendation) {
				require.Equal(t, 2, rec.Evidence.Incidents)
				if rec.Status == tuning.StatusProposed {
					within(t, breaker.Config(*rec.Proposed))
				}
			},
		},
		{
			// Three hundred endpoints of five attempts each, in one minute:
			// enough attempts for the class, but no endpoint says anything
			// about a breaker, and their quiet time is a minute each, not
			// the range each.
			name:    "many endpoints of a handful of attempts",
			current: breaker.DefaultConfig(),
			span:    hours,
			logs: []classLog{
				{n: 300, rows: func(t *testing.T, i int) []replay.Row {
					rows := synth(t, 5.0/60, uint64(200+i), phase("burst", time.Minute, 0.2))
					for j := range rows {
						rows[j].TS += time.Duration(i%100) * time.Minute
					}
					return rows
				}},
			},
			check: func(t *testing.T, rec tuning.Recommendation) {
				require.Equal(t, tuning.StatusKept, rec.Status)
				require.Contains(t, fmt.Sprint(rec.Reasons), "too little evidence")
				require.LessOrEqual(t, rec.Evidence.QuietS, hours.Seconds())
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tuning.Config{})
			ctx := context.Background()
			b.class(t, "fleet", tc.current, trafficclass.AutoTuneRecommend)
			for _, l := range tc.logs {
				for i := range l.n {
					b.log(t, b.endpoint(t, "fleet"), start, l.rows(t, i))
				}
			}
			b.now = start.Add(tc.span)
			rec, err := b.tuner.Pass(ctx, "fleet", start, start.Add(tc.span), false)
			require.NoError(t, err)
			t.Logf("%s: evidence quiet %.3g rps, healthy %.3g, %d incidents; reasons %v", rec.Status, rec.Evidence.QuietRPS,
				rec.Evidence.HealthyErrorRate, rec.Evidence.Incidents, rec.Reasons)
			tc.check(t, rec)
		})
	}
}

// within checks c against the documented limits of a grid.
func within(t *testing.T, c breaker.Config) {
	t.Helper()
	require.GreaterOrEqual(t, c.FailureRateThreshold, tuning.MinThreshold, "%+v", c)
	require.LessOrEqual(t, c.FailureRateThreshold, tuning.MaxThreshold, "%+v", c)
	require.GreaterOrEqual(t, c.Window, tuning.MinWindow, "%+v", c)
	require.LessOrEqual(t, c.Window, tuning.MaxWindow, "%+v", c)
	require.GreaterOrEqual(t, c.MinThroughput, tuning.MinThroughputFloor, "%+v", c)
	require.LessOrEqual(t, c.MinThroughput, tuning.MaxMinThroughput, "%+v", c)
}

// TestRejectedProposalIsNotProposedAgain: a proposal an admin rejected is
// not proposed again from the same config, even after passes that kept
// the config in between.
func TestRejectedProposalIsNotProposedAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, tuning.Config{})
	ctx := context.Background()
	c := breaker.DefaultConfig()
	c.Trip, c.ConsecutiveFailures = breaker.TripConsecutive, 3
	b.class(t, "noisy", c, trafficclass.AutoTuneRecommend)
	b.log(t, b.endpoint(t, "noisy"), start, noisyShape(t))
	b.log(t, b.endpoint(t, "noisy"), start, outageShape(t))
	b.now = start.Add(span)
	first, err := b.tuner.Pass(ctx, "noisy", start, start.Add(span), false)
	require.NoError(t, err)
	require.Equal(t, tuning.StatusProposed, first.Status, first.Reasons)
	_, err = tuning.Reject(ctx, b.st, "noisy")
	require.NoError(t, err)

	// A pass over too little of the log keeps the config in between.
	between, err := b.tuner.Pass(ctx, "noisy", start.Add(span), start.Add(span+time.Minute), false)
	require.NoError(t, err)
	require.Equal(t, tuning.StatusKept, between.Status)

	again, err := b.tuner.Pass(ctx, "noisy", start, start.Add(span), false)
	require.NoError(t, err)
	if again.Proposed != nil {
		require.NotEqual(t, *first.Proposed, *again.Proposed, "the rejected proposal came back: %v", again.Reasons)
	}
}
