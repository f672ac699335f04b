package tuning_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/replay"
	"github.com/hookd/hookd/internal/trafficclass"
	"github.com/hookd/hookd/internal/tuning"
)

// TestMonthUnderApply: a simulated month on an injected clock of a class in
// apply whose config (3 consecutive failures) trips on its endpoint's 15%
// noise, with a 10-minute outage a week, a new tuning leader every day
// (a deploy) polling every two hours with the default interval and shadow: a
// change is applied, none is reverted within the month, and the config in
// force when each outage comes detects it.
func TestMonthUnderApply(t *testing.T) {
	t.Parallel()
	const (
		days = 30
		rps  = 0.2
	)
	b := setup(t, tuning.Config{})
	ctx := context.Background()
	first := breaker.DefaultConfig()
	first.Trip, first.ConsecutiveFailures = breaker.TripConsecutive, 3
	b.class(t, "monthly", first, trafficclass.AutoTuneApply)
	id := b.endpoint(t, "monthly")

	// An outage in the fourth hour of days 3, 10, 17 and 24.
	var phases []replay.Phase
	var outages []time.Time
	at := time.Duration(0)
	for _, day := range []int{3, 10, 17, 24} {
		from := time.Duration(day)*24*time.Hour + 3*time.Hour
		phases = append(phases, phase("noise", from-at, 0.15), phase("outage", 10*time.Minute, 1))
		outages = append(outages, start.Add(from))
		at = from + 10*time.Minute
	}
	phases = append(phases, phase("noise", days*24*time.Hour-at, 0.15))
	rows := synth(t, rps, 11, phases...)
	b.log(t, id, start, rows)

	// The tuner reads the log up to its clock; the test writes the month
	// at once.
	// A day of history per pass keeps the month's replays small.
	window := 24 * time.Hour
	for day := range days {
		leader := tuning.New(tuning.Config{Window: window, Actor: fmt.Sprintf("leader-%d", day)},
			tuning.Deps{Store: b.st, Now: func() time.Time { return b.now }})
		// A new leader each day (a deploy), polling every two hours.
		for hour := 0; hour < 24; hour += 2 {
			b.now = start.Add(time.Duration(day)*24*time.Hour + time.Duration(hour)*time.Hour + 7*time.Minute)
			leader.PassDue(ctx)
			require.NoError(t, leader.Advance(ctx))
		}
	}

	history, err := b.st.ListTunings(ctx, "monthly", 100)
	require.NoError(t, err)
	require.NotEmpty(t, history, "a change is applied within the month")
	type change struct {
		at       time.Time
		from, to breaker.Config
	}
	var changes []change // oldest first
	for i := len(history) - 1; i >= 0; i-- {
		var from, to tuning.ClassConfig
		require.NoError(t, json.Unmarshal(history[i].OldConfig, &from))
		require.NoError(t, json.Unmarshal(history[i].NewConfig, &to))
		var shadow struct {
			Shadow struct {
				Until time.Time `json:"until"`
			} `json:"shadow"`
		}
		require.NoError(t, json.Unmarshal(history[i].Figures, &shadow))
		changes = append(changes, change{at: shadow.Shadow.Until, from: breaker.Config(from), to: breaker.Config(to)})
		t.Logf("applied after the shadow that ended %s: %+v", shadow.Shadow.Until.Sub(start), breaker.Config(to))
	}
	for i, c := range changes {
		for _, earlier := range changes[:i] {
			require.NotEqual(t, earlier.from, c.to, "change %d reverts an earlier one", i)
		}
	}
	// The config in force at each outage (the one applied by a shadow that
	// ended before it) detects it: replayed from a window before it.
	for _, o := range outages {
		cfg := first
		for _, c := range changes {
			if c.at.Before(o) {
				cfg = c.to
			}
		}
		lead := time.Duration(o.Sub(start)) - 2*cfg.Window
		var trace []replay.Row
		for _, r := range rows {
			if r.TS >= lead && r.TS < time.Duration(o.Sub(start))+10*time.Minute {
				trace = append(trace, r)
			}
		}
		rep, err := replay.Replay(cfg, trace, replay.Options{Seed: replay.DefaultSeed})
		require.NoError(t, err)
		s, ok := rep.Phase("outage")
		require.True(t, ok)
		require.NotNil(t, s.FirstOpen, "the outage of %s is detected by %+v", o.Sub(start), cfg)
	}
	cl, err := b.st.GetClass(ctx, "monthly")
	require.NoError(t, err)
	require.Equal(t, breaker.TripRate, cl.Breaker.Trip, "the class no longer trips on its noise")
}
