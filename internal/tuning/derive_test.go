package tuning_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/tuning"
)

// TestGridStaysWithinLimitsAndBounds: every config of the grid but the
// current one (the one to beat) is inside the documented limits and the
// class's bounds, wherever the derived and current configs sit.
func TestGridStaysWithinLimitsAndBounds(t *testing.T) {
	t.Parallel()
	rate := func(threshold float64, window time.Duration, minimum int) breaker.Config {
		c := breaker.DefaultConfig()
		c.FailureRateThreshold, c.Window, c.MinThroughput = threshold, window, minimum
		return c
	}
	cases := []struct {
		name             string
		derived, current breaker.Config
		bounds           tuning.Bounds
	}{
		{"at the top edge", rate(0.9, 10*time.Minute, 9000), rate(0.9, 10*time.Minute, 20), tuning.Bounds{}},
		{"at the bottom edge", rate(0.5, 5*time.Second, 20), rate(0.5, 5*time.Second, 20), tuning.Bounds{}},
		{"current outside the limits", rate(0.5, 30*time.Second, 20), rate(0.2, 2*time.Second, 5), tuning.Bounds{}},
		{"class floors", rate(0.5, 30*time.Second, 20), rate(0.6, time.Minute, 40), tuning.Bounds{MinThroughputFloor: 30, FailureRateFloor: 0.6}},
		{"class ceilings", rate(0.9, 30*time.Second, 400), rate(0.8, time.Minute, 200), tuning.Bounds{MinThroughputCeiling: 300, FailureRateCeiling: 0.7}},
		{"class floors and ceilings", rate(0.9, 30*time.Second, 20), rate(0.5, time.Minute, 20),
			tuning.Bounds{MinThroughputFloor: 30, MinThroughputCeiling: 60, FailureRateFloor: 0.6, FailureRateCeiling: 0.7}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			grid := tuning.Grid(tc.derived, tc.current, tc.bounds)
			require.Equal(t, tc.current, grid[0])
			require.Greater(t, len(grid), 1)
			for _, c := range grid[1:] {
				require.True(t, tc.bounds.Allows(c), "%+v", c)
				require.GreaterOrEqual(t, c.FailureRateThreshold, tuning.MinThreshold, "%+v", c)
				require.LessOrEqual(t, c.FailureRateThreshold, tuning.MaxThreshold, "%+v", c)
				require.GreaterOrEqual(t, c.Window, tuning.MinWindow, "%+v", c)
				require.LessOrEqual(t, c.Window, tuning.MaxWindow, "%+v", c)
				require.GreaterOrEqual(t, c.MinThroughput, tuning.MinThroughputFloor, "%+v", c)
				require.LessOrEqual(t, c.MinThroughput, tuning.MaxMinThroughput, "%+v", c)
				require.GreaterOrEqual(t, c.MinThroughput, tc.bounds.MinThroughputFloor, "%+v", c)
				require.GreaterOrEqual(t, c.FailureRateThreshold, tc.bounds.FailureRateFloor, "%+v", c)
				if tc.bounds.MinThroughputCeiling > 0 {
					require.LessOrEqual(t, c.MinThroughput, tc.bounds.MinThroughputCeiling, "%+v", c)
				}
				if tc.bounds.FailureRateCeiling > 0 {
					require.LessOrEqual(t, c.FailureRateThreshold, tc.bounds.FailureRateCeiling, "%+v", c)
				}
			}
		})
	}
}

// TestDeriveStaysWithinLimitsAndBounds: whatever the evidence says, the
// derived config is inside the limits and the class's bounds.
func TestDeriveStaysWithinLimitsAndBounds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		ev     tuning.ClassEvidence
		bounds tuning.Bounds
	}{
		{"idle", tuning.ClassEvidence{}, tuning.Bounds{}},
		{"noisy and busy", tuning.ClassEvidence{QuietRPS: 5000, HealthyErrorRate: 0.6}, tuning.Bounds{}},
		{"clean and slow", tuning.ClassEvidence{QuietRPS: 0.01, HealthyErrorRate: 0}, tuning.Bounds{}},
		{"bounded", tuning.ClassEvidence{QuietRPS: 5000, HealthyErrorRate: 0.6},
			tuning.Bounds{MinThroughputFloor: 30, MinThroughputCeiling: 60, FailureRateFloor: 0.6, FailureRateCeiling: 0.7}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := tuning.Derive(tc.ev, breaker.DefaultConfig(), tc.bounds)
			require.True(t, tuning.Within(c, tc.bounds), "%+v", c)
		})
	}
}
