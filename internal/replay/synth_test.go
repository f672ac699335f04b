package replay_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/replay"
)

func TestParsePhase(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want replay.Phase
		err  string
	}{
		{in: "outage:10s:1", want: replay.Phase{Name: "outage", Duration: 10 * time.Second, FailureRate: 1}},
		{in: "base:1m30s:0.02", want: replay.Phase{Name: "base", Duration: 90 * time.Second, FailureRate: 0.02}},
		{in: "quiet hours:500ms:0", want: replay.Phase{Name: "quiet hours", Duration: 500 * time.Millisecond}},
		{in: "base:30s", err: `phase "base:30s": want name:duration:failure probability, such as base:30s:0.02`},
		{in: ":30s:0.1", err: `phase ":30s:0.1": the name must be non-empty text`},
		{in: "base:30:0.1", err: `phase "base:30:0.1": duration "30" must be a positive Go duration such as 30s`},
		{in: "base:-1s:0.1", err: `phase "base:-1s:0.1": duration "-1s" must be a positive Go duration such as 30s`},
		{in: "base:30s:1.5", err: `phase "base:30s:1.5": failure probability "1.5" must be a number from 0 to 1`},
		{in: "base:30s:NaN", err: `phase "base:30s:NaN": failure probability "NaN" must be a number from 0 to 1`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := replay.ParsePhase(tt.in)
			if tt.err != "" {
				require.EqualError(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			again, err := replay.ParsePhase(got.String())
			require.NoError(t, err)
			require.Equal(t, got, again)
		})
	}
}

// referencePhases is the reference simulation's trace: 2% background errors, a 10 s outage,
// healthy traffic, 20 s at 20% errors, healthy traffic; 100 s in all.
func referencePhases() []replay.Phase {
	return []replay.Phase{
		{Name: "before", Duration: 30 * time.Second, FailureRate: 0.02},
		{Name: "outage", Duration: 10 * time.Second, FailureRate: 1},
		{Name: "between", Duration: 20 * time.Second, FailureRate: 0.02},
		{Name: "degraded", Duration: 20 * time.Second, FailureRate: 0.2},
		{Name: "after", Duration: 20 * time.Second, FailureRate: 0.02},
	}
}

func TestSynthFixedSpacing(t *testing.T) {
	t.Parallel()
	rows, err := replay.Synth(replay.SynthConfig{RPS: 100, Phases: referencePhases(), Spacing: replay.SpacingFixed, Seed: 7})
	require.NoError(t, err)
	require.Len(t, rows, 10000)
	counts := map[string]int{}
	failures := map[string]int{}
	for i, r := range rows {
		require.Equal(t, time.Duration(i)*10*time.Millisecond, r.TS, "row %d", i)
		counts[r.Phase]++
		if r.Outcome == F {
			failures[r.Phase]++
		}
	}
	require.Equal(t, map[string]int{"before": 3000, "outage": 1000, "between": 2000, "degraded": 2000, "after": 2000}, counts)
	require.Equal(t, 1000, failures["outage"])
	require.InDelta(t, 0.2, float64(failures["degraded"])/2000, 0.03)
	require.InDelta(t, 0.02, float64(failures["before"])/3000, 0.01)
}

func TestSynthIsDeterministicBySeed(t *testing.T) {
	t.Parallel()
	for _, spacing := range []replay.Spacing{replay.SpacingFixed, replay.SpacingPoisson} {
		t.Run(string(spacing), func(t *testing.T) {
			t.Parallel()
			gen := func(seed uint64) []replay.Row {
				rows, err := replay.Synth(replay.SynthConfig{RPS: 50, Phases: referencePhases(), Spacing: spacing, Seed: seed})
				require.NoError(t, err)
				return rows
			}
			require.Equal(t, gen(7), gen(7))
			require.NotEqual(t, gen(7), gen(8))
		})
	}
}

func TestSynthPoissonSpacing(t *testing.T) {
	t.Parallel()
	rows, err := replay.Synth(replay.SynthConfig{RPS: 100, Phases: referencePhases(), Spacing: replay.SpacingPoisson, Seed: 3})
	require.NoError(t, err)
	// 10000 expected, standard deviation 100.
	require.InDelta(t, 10000, len(rows), 500)
	for i := 1; i < len(rows); i++ {
		require.LessOrEqual(t, rows[i-1].TS, rows[i].TS)
	}
	for _, r := range rows {
		if r.Phase == "outage" {
			require.GreaterOrEqual(t, r.TS, 30*time.Second)
			require.Less(t, r.TS, 40*time.Second)
		}
	}
}

func TestSynthRejectsBadConfig(t *testing.T) {
	t.Parallel()
	one := []replay.Phase{{Name: "a", Duration: time.Second}}
	tests := []struct {
		name string
		cfg  replay.SynthConfig
		err  string
	}{
		{"zero rps", replay.SynthConfig{RPS: 0, Phases: one, Spacing: replay.SpacingFixed}, "rps must be a positive number"},
		{"infinite rps", replay.SynthConfig{RPS: math.Inf(1), Phases: one, Spacing: replay.SpacingFixed}, "rps must be a positive number"},
		{"no phases", replay.SynthConfig{RPS: 1, Spacing: replay.SpacingFixed}, "at least one phase is required"},
		{"bad spacing", replay.SynthConfig{RPS: 1, Phases: one, Spacing: "even"}, `spacing "even" must be "fixed" or "poisson"`},
		{"too many rows", replay.SynthConfig{RPS: 1e6, Phases: []replay.Phase{{Name: "a", Duration: time.Hour}}, Spacing: replay.SpacingFixed}, "3600000000 rows expected: at most 100000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := replay.Synth(tt.cfg)
			require.EqualError(t, err, tt.err)
		})
	}
}
