package tuning_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/replay"
	"github.com/hookd/hookd/internal/tuning"
)

// TestDecideNeverTradesDetectionForQuiet: a candidate is proposed only when
// it detects every incident the current config detects (none more than
// DetectSlack later, at least one when there are incidents) and beats it
// by the margin; the proposal is the best-ranked such candidate.
func TestDecideNeverTradesDetectionForQuiet(t *testing.T) {
	t.Parallel()
	current := breaker.DefaultConfig()
	other := func(threshold float64) breaker.Config {
		c := current
		c.FailureRateThreshold = threshold
		return c
	}
	s := func(n ...int) []time.Duration {
		out := make([]time.Duration, len(n))
		for i, x := range n {
			out[i] = time.Duration(x) * time.Second
			if x < 0 {
				out[i] = replay.Undetected
			}
		}
		return out
	}
	cand := func(c breaker.Config, quiet int, by []time.Duration) replay.Candidate {
		var tl replay.Tally
		tl.OpensQuiet, tl.Incidents = quiet, len(by)
		for _, d := range by {
			tl.ByIncident = append(tl.ByIncident, d)
			if d != replay.Undetected {
				tl.Detections = append(tl.Detections, d)
			}
		}
		return replay.Candidate{Config: c, Figures: tl.Figures(), ByIncident: tl.ByIncident}
	}
	ten := s(5, 5, 5, 5, 5, 5, 5, 5, 5, 5)
	cases := []struct {
		name       string
		candidates []replay.Candidate
		want       *breaker.Config
	}{
		{"quiet bought with eight missed incidents", []replay.Candidate{
			cand(other(0.9), 0, s(5, 6, -1, -1, -1, -1, -1, -1, -1, -1)), cand(current, 1, ten)}, nil},
		{"quiet bought with one late detection", []replay.Candidate{
			cand(other(0.9), 0, s(5, 5, 5, 5, 5, 5, 5, 5, 5, 11)), cand(current, 1, ten)}, nil},
		{"late within the slack", []replay.Candidate{
			cand(other(0.9), 0, s(5, 5, 5, 5, 5, 5, 5, 5, 5, 10)), cand(current, 1, ten)}, ptr(other(0.9))},
		{"the next best keeps detection", []replay.Candidate{
			cand(other(0.9), 0, s(-1, 5, 5, 5, 5, 5, 5, 5, 5, 5)), cand(other(0.6), 0, s(6, 6, 6, 6, 6, 6, 6, 6, 6, 6)), cand(current, 3, ten)}, ptr(other(0.6))},
		{"a config that opens on no incident", []replay.Candidate{
			cand(other(0.9), 0, s(-1, -1, -1)), cand(current, 4, s(-1, -1, -1))}, nil},
		{"detecting an incident the current config misses", []replay.Candidate{
			cand(other(0.6), 2, s(3, 4, 5)), cand(current, 2, s(-1, 4, 5))}, ptr(other(0.6))},
		{"a faster detection of too few incidents", []replay.Candidate{
			cand(other(0.6), 2, s(2, 20)), cand(current, 2, s(3, 20))}, nil},
		{"a faster detection of enough incidents", []replay.Candidate{
			cand(other(0.6), 2, s(2, 2, 20)), cand(current, 2, s(3, 3, 20))}, ptr(other(0.6))},
		{"one more incident detected of too few", []replay.Candidate{
			cand(other(0.6), 2, s(3, 4)), cand(current, 2, s(-1, 4))}, nil},
		{"a faster detection within the margin", []replay.Candidate{
			cand(other(0.6), 2, s(19, 19)), cand(current, 2, s(20, 20))}, nil},
		{"quiet within the margin", []replay.Candidate{
			cand(other(0.6), 19, ten), cand(current, 20, ten)}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := tuning.Decide(current, tc.candidates)
			if tc.want == nil {
				require.Equal(t, tuning.StatusKept, d.Status, d.Reasons)
				require.Nil(t, d.Proposed)
				return
			}
			require.Equal(t, tuning.StatusProposed, d.Status, d.Reasons)
			require.Equal(t, *tc.want, *d.Proposed)
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestDecideConsultsHistory: each case's candidate is proposed without
// history (as Decide did before it read any); with the class's history, a
// rejected proposal is skipped for the next best, and one that undoes a
// recent change needs twice the margin.
func TestDecideConsultsHistory(t *testing.T) {
	t.Parallel()
	current := breaker.DefaultConfig()
	with := func(threshold float64, window time.Duration) breaker.Config {
		c := current
		c.FailureRateThreshold, c.Window = threshold, window
		return c
	}
	cand := func(c breaker.Config, quiet int) replay.Candidate {
		tl := replay.Tally{OpensQuiet: quiet, Incidents: 1, Detections: []time.Duration{time.Second}, ByIncident: []time.Duration{time.Second}}
		return replay.Candidate{Config: c, Figures: tl.Figures(), ByIncident: tl.ByIncident}
	}
	higher, longer := with(0.6, 30*time.Second), with(0.5, time.Minute)
	cases := []struct {
		name       string
		candidates []replay.Candidate
		history    tuning.History
		want       *breaker.Config
	}{
		{"rejected before: the next best", []replay.Candidate{cand(higher, 5), cand(longer, 6), cand(current, 10)},
			tuning.History{Rejected: []breaker.Config{higher}}, ptr(longer)},
		{"rejected before, and nothing else beats it", []replay.Candidate{cand(higher, 5), cand(current, 10)},
			tuning.History{Rejected: []breaker.Config{higher}}, nil},
		{"undoing a recent change by 15%", []replay.Candidate{cand(higher, 17), cand(current, 20)},
			tuning.History{Recent: []tuning.Change{{From: with(0.7, 30*time.Second), To: current}}}, nil},
		{"undoing a recent change by 25%", []replay.Candidate{cand(higher, 15), cand(current, 20)},
			tuning.History{Recent: []tuning.Change{{From: with(0.7, 30*time.Second), To: current}}}, ptr(higher)},
		{"going on the way a recent change went, by 15%", []replay.Candidate{cand(higher, 17), cand(current, 20)},
			tuning.History{Recent: []tuning.Change{{From: with(0.4, 30*time.Second), To: current}}}, ptr(higher)},
		{"undoing a window change by 15%", []replay.Candidate{cand(longer, 17), cand(current, 20)},
			tuning.History{Recent: []tuning.Change{{From: with(0.5, 2*time.Minute), To: current}}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			blind := tuning.Decide(current, tc.candidates)
			require.Equal(t, tuning.StatusProposed, blind.Status, "without history: %v", blind.Reasons)
			d := tuning.DecideWith(current, tc.candidates, tc.history)
			if tc.want == nil {
				require.Equal(t, tuning.StatusKept, d.Status, d.Reasons)
				return
			}
			require.Equal(t, tuning.StatusProposed, d.Status, d.Reasons)
			require.Equal(t, *tc.want, *d.Proposed)
		})
	}
}

// TestEquivalentProposals: proposals that differ only in open durations
// within the slack stand for each other; any ranked setting apart does not.
func TestEquivalentProposals(t *testing.T) {
	t.Parallel()
	base := breaker.DefaultConfig()
	edit := func(f func(*breaker.Config)) breaker.Config {
		c := base
		f(&c)
		return c
	}
	cases := []struct {
		name string
		b    breaker.Config
		want bool
	}{
		{"identical", base, true},
		{"open 34s against 30s", edit(func(c *breaker.Config) { c.OpenDuration = 34 * time.Second }), true},
		{"open 34s, max open 11m", edit(func(c *breaker.Config) { c.OpenDuration, c.MaxOpenDuration = 34*time.Second, 11*time.Minute }), true},
		{"open 60s against 30s", edit(func(c *breaker.Config) { c.OpenDuration = time.Minute }), false},
		{"another threshold", edit(func(c *breaker.Config) { c.FailureRateThreshold = 0.6 }), false},
		{"another window", edit(func(c *breaker.Config) { c.Window = time.Minute }), false},
		{"another minimum", edit(func(c *breaker.Config) { c.MinThroughput = 40 }), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tuning.Equivalent(base, tc.b))
			require.Equal(t, tc.want, tuning.Equivalent(tc.b, base))
		})
	}
}
