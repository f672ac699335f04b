package tuning_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/trafficclass"
	"github.com/hookd/hookd/internal/tuning"
)

// TestCadenceSurvivesDailyRestarts: over a simulated month in which the
// tuning leader restarts every day (a new Tuner, as a deploy makes), each
// class not off gets a pass per interval, due from its stored last pass.
func TestCadenceSurvivesDailyRestarts(t *testing.T) {
	t.Parallel()
	b := setup(t, tuning.Config{})
	ctx := context.Background()
	b.class(t, "daily", breaker.DefaultConfig(), trafficclass.AutoTuneRecommend)
	b.class(t, "applied", breaker.DefaultConfig(), trafficclass.AutoTuneApply)
	b.class(t, "never", breaker.DefaultConfig(), trafficclass.AutoTuneOff)
	passes := map[string][]time.Time{}
	seen := func(class string) {
		rec, err := tuning.Get(ctx, b.st, class)
		require.NoError(t, err)
		if rec.RanAt != nil && (len(passes[class]) == 0 || !passes[class][len(passes[class])-1].Equal(*rec.RanAt)) {
			passes[class] = append(passes[class], *rec.RanAt)
		}
	}
	const days = 30
	for day := range days {
		// A deploy: a new leader, which polls every simulated hour (a
		// little after the hour, as a deploy is never on the dot).
		leader := tuning.New(tuning.Config{Window: time.Hour, Actor: "tuning-test"},
			tuning.Deps{Store: b.st, Now: func() time.Time { return b.now }})
		for hour := range 24 {
			b.now = start.Add(time.Duration(day)*24*time.Hour + time.Duration(hour)*time.Hour + 7*time.Minute)
			leader.PassDue(ctx)
			for _, class := range []string{"daily", "applied", "never"} {
				seen(class)
			}
		}
	}
	for _, class := range []string{"daily", "applied"} {
		require.GreaterOrEqual(t, len(passes[class]), days-1, "%s: %v", class, passes[class])
		for i := 1; i < len(passes[class]); i++ {
			gap := passes[class][i].Sub(passes[class][i-1])
			require.GreaterOrEqual(t, gap, tuning.DefaultInterval, "%s: no two passes within an interval", class)
			require.LessOrEqual(t, gap, tuning.DefaultInterval+time.Hour, "%s: the next pass comes at the first poll after the interval", class)
		}
	}
	require.Empty(t, passes["never"])
}
