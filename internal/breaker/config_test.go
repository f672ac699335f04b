package breaker_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
)

// TestDefaultConfig pins the defaults: half the window failing over 30 s,
// never on fewer than 20 observations, open 30 s, three serialized trials.
func TestDefaultConfig(t *testing.T) {
	t.Parallel()
	c := breaker.DefaultConfig()
	require.NoError(t, c.Validate())
	require.Equal(t, breaker.Config{
		Trip:                 breaker.TripRate,
		FailureRateThreshold: 0.5,
		Window:               30 * time.Second,
		MinThroughput:        20,
		ConsecutiveFailures:  5,
		OpenDuration:         30 * time.Second,
		OpenJitter:           0.3,
		OpenBackoff:          1,
		MaxOpenDuration:      10 * time.Minute,
		HalfOpenTrials:       3,
		HalfOpenConcurrency:  1,
	}, c)
}

func TestValidateReportsEachBadField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		edit  func(*breaker.Config)
		field string
	}{
		{"empty trip", func(c *breaker.Config) { c.Trip = "" }, "trip"},
		{"unknown trip", func(c *breaker.Config) { c.Trip = "count" }, "trip"},
		{"zero threshold", func(c *breaker.Config) { c.FailureRateThreshold = 0 }, "failure_rate_threshold"},
		{"negative threshold", func(c *breaker.Config) { c.FailureRateThreshold = -0.1 }, "failure_rate_threshold"},
		{"threshold above one", func(c *breaker.Config) { c.FailureRateThreshold = 1.01 }, "failure_rate_threshold"},
		{"NaN threshold", func(c *breaker.Config) { c.FailureRateThreshold = math.NaN() }, "failure_rate_threshold"},
		{"zero window", func(c *breaker.Config) { c.Window = 0 }, "window"},
		{"negative window", func(c *breaker.Config) { c.Window = -time.Second }, "window"},
		{"window under 100ms", func(c *breaker.Config) { c.Window = 99 * time.Millisecond }, "window"},
		{"zero min throughput", func(c *breaker.Config) { c.MinThroughput = 0 }, "min_throughput"},
		{"zero consecutive failures", func(c *breaker.Config) { c.ConsecutiveFailures = 0 }, "consecutive_failures"},
		{"zero open duration", func(c *breaker.Config) { c.OpenDuration = 0 }, "open_duration"},
		{"negative jitter", func(c *breaker.Config) { c.OpenJitter = -0.01 }, "open_jitter"},
		{"jitter above one", func(c *breaker.Config) { c.OpenJitter = 1.5 }, "open_jitter"},
		{"NaN jitter", func(c *breaker.Config) { c.OpenJitter = math.NaN() }, "open_jitter"},
		{"backoff below one", func(c *breaker.Config) { c.OpenBackoff = 0.5 }, "open_backoff"},
		{"zero backoff", func(c *breaker.Config) { c.OpenBackoff = 0 }, "open_backoff"},
		{"infinite backoff", func(c *breaker.Config) { c.OpenBackoff = math.Inf(1) }, "open_backoff"},
		{"max open below open", func(c *breaker.Config) { c.MaxOpenDuration = 29 * time.Second }, "max_open_duration"},
		{"zero max open", func(c *breaker.Config) { c.MaxOpenDuration = 0 }, "max_open_duration"},
		{"zero trials", func(c *breaker.Config) { c.HalfOpenTrials = 0 }, "half_open_trials"},
		{"zero concurrency", func(c *breaker.Config) { c.HalfOpenConcurrency = 0 }, "half_open_concurrency"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := breaker.DefaultConfig()
			tt.edit(&c)
			err := c.Validate()
			var fields breaker.FieldErrors
			require.ErrorAs(t, err, &fields)
			require.Len(t, fields, 1)
			require.Equal(t, tt.field, fields[0].Field)
			require.NotEmpty(t, fields[0].Message)
		})
	}
}

func TestValidateAcceptsBoundaryValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*breaker.Config)
	}{
		{"consecutive trip", func(c *breaker.Config) { c.Trip = breaker.TripConsecutive }},
		{"threshold of one", func(c *breaker.Config) { c.FailureRateThreshold = 1 }},
		{"100ms window", func(c *breaker.Config) { c.Window = 100 * time.Millisecond }},
		{"no jitter", func(c *breaker.Config) { c.OpenJitter = 0 }},
		{"full jitter", func(c *breaker.Config) { c.OpenJitter = 1 }},
		{"max open equal to open", func(c *breaker.Config) { c.MaxOpenDuration = c.OpenDuration }},
		{"minimal counts", func(c *breaker.Config) {
			c.MinThroughput, c.ConsecutiveFailures, c.HalfOpenTrials, c.HalfOpenConcurrency = 1, 1, 1, 1
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := breaker.DefaultConfig()
			tt.edit(&c)
			require.NoError(t, c.Validate())
		})
	}
}

func TestValidateReportsEveryBadFieldAtOnce(t *testing.T) {
	t.Parallel()
	err := breaker.Config{}.Validate()
	var fields breaker.FieldErrors
	require.True(t, errors.As(err, &fields))
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.Field
	}
	require.Equal(t, []string{
		"trip", "failure_rate_threshold", "window", "min_throughput",
		"consecutive_failures", "open_duration", "open_backoff",
		"max_open_duration", "half_open_trials", "half_open_concurrency",
	}, names)

	c := breaker.DefaultConfig()
	c.Window = 0
	c.MinThroughput = 0
	require.EqualError(t, c.Validate(), "window: must be positive; min_throughput: must be at least 1")
}

func TestOpenDurationForStaysWithinJitterBounds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		open   time.Duration
		jitter float64
	}{
		{"default jitter", 30 * time.Second, 0.3},
		{"no jitter", 30 * time.Second, 0},
		{"full jitter", 5 * time.Second, 1},
		{"odd duration", 1234567 * time.Microsecond, 0.17},
	}
	draws := []float64{0, 1e-12, 0.25, 0.5, 0.75, 0.999, math.Nextafter(1, 0)}
	for i := range 1000 {
		draws = append(draws, float64(i)/1000)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := breaker.DefaultConfig()
			c.OpenDuration, c.MaxOpenDuration, c.OpenJitter = tt.open, tt.open, tt.jitter
			upper := tt.open + time.Duration(float64(tt.open)*tt.jitter)
			for _, r := range draws {
				got := breaker.OpenDurationFor(c, 1, func() float64 { return r })
				require.GreaterOrEqual(t, got, tt.open, "rnd=%v", r)
				require.LessOrEqual(t, got, upper, "rnd=%v", r)
			}
			require.Equal(t, tt.open, breaker.OpenDurationFor(c, 1, func() float64 { return 0 }))
			require.Equal(t, tt.open, breaker.OpenDurationFor(c, 1, nil), "nil rnd adds no jitter")
		})
	}
}

// TestOpenDurationForBacksOffAndCapsAfterJitter: jitter is added to the
// backed-off duration and the sum is capped, so no open outlasts
// max_open_duration (it used to cap first and add jitter after: up to
// 1.5x the cap here).
func TestOpenDurationForBacksOffAndCapsAfterJitter(t *testing.T) {
	t.Parallel()
	c := breaker.DefaultConfig()
	c.OpenDuration = 10 * time.Second
	c.OpenBackoff = 2
	c.MaxOpenDuration = 60 * time.Second
	c.OpenJitter = 0.5
	noJitter := func() float64 { return 0 }
	fullJitter := func() float64 { return math.Nextafter(1, 0) }

	tests := []struct {
		streak   int
		base     time.Duration
		withMost time.Duration
	}{
		{0, 10 * time.Second, 15 * time.Second},
		{1, 10 * time.Second, 15 * time.Second},
		{2, 20 * time.Second, 30 * time.Second},
		{3, 40 * time.Second, 60 * time.Second}, // 40s + 20s jitter, at the cap
		{4, 60 * time.Second, 60 * time.Second}, // 80s capped to 60s; jitter cannot pass the cap
		{5, 60 * time.Second, 60 * time.Second},
		{1000, 60 * time.Second, 60 * time.Second},
	}
	for _, tt := range tests {
		require.Equal(t, tt.base, breaker.OpenDurationFor(c, tt.streak, noJitter), "streak %d", tt.streak)
		got := breaker.OpenDurationFor(c, tt.streak, fullJitter)
		require.InDelta(t, float64(tt.withMost), float64(got), float64(time.Microsecond), "streak %d", tt.streak)
		require.LessOrEqual(t, got, tt.withMost)
	}
}
