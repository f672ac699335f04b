package trafficclass_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/trafficclass"
)

// TestBuiltinNumbers pins every number of every built-in class, as
// docs/traffic-classes.md lists them.
func TestBuiltinNumbers(t *testing.T) {
	t.Parallel()
	shared := func(name string, window time.Duration, threshold float64, minThroughput int, open time.Duration) trafficclass.Class {
		return trafficclass.Class{
			Name: name,
			Breaker: breaker.Config{
				Trip:                 breaker.TripRate,
				FailureRateThreshold: threshold,
				Window:               window,
				MinThroughput:        minThroughput,
				ConsecutiveFailures:  5,
				OpenDuration:         open,
				OpenJitter:           0.3,
				OpenBackoff:          2,
				MaxOpenDuration:      2 * time.Minute,
				HalfOpenTrials:       3,
				HalfOpenConcurrency:  1,
			},
			Enforce:                  true,
			AuthDisableAfter:         10,
			AuthDisableMinDuration:   5 * time.Minute,
			AutoTune:                 trafficclass.AutoTuneRecommend,
			TuneMinThroughputFloor:   1,
			TuneMinThroughputCeiling: trafficclass.DefaultTuneMinThroughputCeiling,
			TuneFailureRateCeiling:   1,
			Builtin:                  true,
		}
	}
	require.Equal(t, []trafficclass.Class{
		shared("high", 5*time.Second, 0.5, 50, 15*time.Second),
		shared("medium", 30*time.Second, 0.5, 20, 30*time.Second),
		shared("low", 10*time.Minute, 0.6, 10, 30*time.Second),
		shared("trickle", time.Minute, 0.5, 20, 30*time.Second),
	}, trafficclass.Builtins())
}

func TestBuiltinsValidate(t *testing.T) {
	t.Parallel()
	for _, c := range trafficclass.Builtins() {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			require.NoError(t, c.Validate())
			require.True(t, c.Builtin)
			require.True(t, trafficclass.IsBuiltin(c.Name))
			got, ok := trafficclass.Builtin(c.Name)
			require.True(t, ok)
			require.Equal(t, c, got)
		})
	}
	_, ok := trafficclass.Builtin("bulk")
	require.False(t, ok)
	require.False(t, trafficclass.IsBuiltin("bulk"))
	require.False(t, trafficclass.IsBuiltin(trafficclass.Auto))
}

func TestBuiltinsAreFreshCopies(t *testing.T) {
	t.Parallel()
	first := trafficclass.Builtins()
	first[0].Breaker.MinThroughput = 1
	first[0].Name = "changed"
	ranges := trafficclass.Ranges()
	ranges[0].Floor = 1
	require.Equal(t, "high", trafficclass.Builtins()[0].Name)
	require.Equal(t, 50, trafficclass.Builtins()[0].Breaker.MinThroughput)
	require.Equal(t, 20, trafficclass.Ranges()[0].Floor)
}

// TestBuiltinMinThroughputFollowsTheRule recomputes every built-in's
// min_throughput from the bottom of its documented band and its window with
// the rule: half the requests one window holds, never below the floor.
func TestBuiltinMinThroughputFollowsTheRule(t *testing.T) {
	t.Parallel()
	tests := []struct {
		class  string
		rps    float64
		window time.Duration
		floor  int
		want   int
	}{
		{"high", 20, 5 * time.Second, 20, 50},       // max(20, ceil(20*5*0.5)=50)
		{"medium", 1, 30 * time.Second, 20, 20},     // max(20, ceil(1*30*0.5)=15)
		{"low", 1.0 / 60, 10 * time.Minute, 10, 10}, // max(10, ceil(1/60*600*0.5)=5)
		{"trickle", 0, time.Minute, 20, 20},         // max(20, ceil(0)=0)
	}
	ranges := trafficclass.Ranges()
	for i, tt := range tests {
		t.Run(tt.class, func(t *testing.T) {
			t.Parallel()
			c, ok := trafficclass.Builtin(tt.class)
			require.True(t, ok)
			r := ranges[i]
			require.Equal(t, tt.class, r.Class)
			require.Equal(t, tt.rps, r.MinRPS)
			require.Equal(t, tt.floor, r.Floor)
			require.Equal(t, tt.window, c.Breaker.Window)
			require.Equal(t, tt.want, trafficclass.MinThroughputFor(r.MinRPS, c.Breaker.Window, r.Floor))
			require.Equal(t, tt.want, c.Breaker.MinThroughput)
		})
	}
}

// TestWindowsHoldEnoughEvidence checks that a window can gather evidence: at the
// bottom of its band each class's window holds at least min_throughput
// requests, except trickle, whose window cannot hold it anywhere in its band
// (the breaker cannot gather evidence at trickle rates, so it stays closed).
func TestWindowsHoldEnoughEvidence(t *testing.T) {
	t.Parallel()
	for _, r := range trafficclass.Ranges() {
		t.Run(r.Class, func(t *testing.T) {
			t.Parallel()
			c, ok := trafficclass.Builtin(r.Class)
			require.True(t, ok)
			atFloor := r.MinRPS * c.Breaker.Window.Seconds()
			atCeiling := r.MaxRPS * c.Breaker.Window.Seconds()
			if r.Class == trafficclass.Trickle {
				require.Less(t, atCeiling, float64(c.Breaker.MinThroughput))
				require.LessOrEqual(t, atCeiling*20, float64(c.Breaker.MinThroughput), "20x headroom at the ceiling")
				return
			}
			require.GreaterOrEqual(t, math.Round(atFloor*1e9)/1e9, float64(c.Breaker.MinThroughput))
		})
	}
}

// TestDetectionTimes pins the time_to_open estimate for every built-in at its
// threshold and a 2% baseline, as the docs quote them.
func TestDetectionTimes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		class string
		want  time.Duration
	}{
		{"high", 2449 * time.Millisecond},
		{"medium", 14694 * time.Millisecond},
		{"low", 355102 * time.Millisecond},
		{"trickle", 29388 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.class, func(t *testing.T) {
			t.Parallel()
			c, ok := trafficclass.Builtin(tt.class)
			require.True(t, ok)
			got := trafficclass.TimeToOpen(c.Breaker.Window, c.Breaker.FailureRateThreshold, 0.02)
			require.Equal(t, tt.want, got.Round(time.Millisecond))
		})
	}
}

func TestTimeToOpen(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                string
		window              time.Duration
		threshold, baseline float64
		want                time.Duration
	}{
		{"50% over 10s", 10 * time.Second, 0.5, 0.02, 4897959183 * time.Nanosecond},
		{"50% over 2s", 2 * time.Second, 0.5, 0.02, 979591836 * time.Nanosecond},
		{"no baseline", 10 * time.Second, 0.5, 0, 5 * time.Second},
		{"threshold at baseline", 10 * time.Second, 0.2, 0.2, 0},
		{"threshold below baseline", 10 * time.Second, 0.1, 0.2, 0},
		{"baseline of one", 10 * time.Second, 0.5, 1, 10 * time.Second},
		{"NaN baseline", 10 * time.Second, 0.5, math.NaN(), 10 * time.Second},
		{"NaN threshold", 10 * time.Second, math.NaN(), 0.02, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, trafficclass.TimeToOpen(tt.window, tt.threshold, tt.baseline))
		})
	}
}

func TestMinThroughputFor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		rps    float64
		window time.Duration
		floor  int
		want   int
	}{
		{"busy, 40 rps", 40, 30 * time.Second, 20, 600},
		{"quiet, 0.01 rps", 0.01, 30 * time.Second, 20, 20},
		{"rounds up", 3, 5 * time.Second, 1, 8},
		{"float noise in 1/60 adds nothing", 1.0 / 60, 10 * time.Minute, 1, 5},
		{"float noise in 0.1", 0.1, 100 * time.Second, 1, 5},
		{"sub-second window", 100, 500 * time.Millisecond, 1, 25},
		{"zero rps", 0, time.Minute, 20, 20},
		{"negative rps", -5, time.Minute, 20, 20},
		{"NaN rps", math.NaN(), time.Minute, 20, 20},
		{"zero window", 100, 0, 20, 20},
		{"negative window", 100, -time.Second, 20, 20},
		{"floor below one", 0, time.Minute, 0, 1},
		{"negative floor", 0.01, time.Second, -3, 1},
		{"infinite rps", math.Inf(1), time.Second, 20, math.MaxInt},
		{"huge product", 1e300, time.Hour, 20, math.MaxInt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, trafficclass.MinThroughputFor(tt.rps, tt.window, tt.floor))
		})
	}
}

// TestRangesCoverTheLine checks that the built-in bands cover [0, +Inf)
// requests/s with no gaps or overlaps, one per built-in class.
func TestRangesCoverTheLine(t *testing.T) {
	t.Parallel()
	ranges := trafficclass.Ranges()
	builtins := trafficclass.Builtins()
	require.Len(t, ranges, len(builtins))
	for i, r := range ranges {
		require.Equal(t, builtins[i].Name, r.Class)
		require.Less(t, r.MinRPS, r.MaxRPS)
		if i == 0 {
			require.True(t, math.IsInf(r.MaxRPS, 1))
		} else {
			require.Equal(t, ranges[i-1].MinRPS, r.MaxRPS, "no gap or overlap below %s", ranges[i-1].Class)
		}
	}
	require.Zero(t, ranges[len(ranges)-1].MinRPS)
}

func TestRangeFor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rps  float64
		want string
	}{
		{0, "trickle"},
		{3.0 / 86400, "trickle"}, // three a day
		{math.Nextafter(1.0/60, 0), "trickle"},
		{1.0 / 60, "low"},
		{0.5, "low"},
		{math.Nextafter(1, 0), "low"},
		{1, "medium"},
		{19.999, "medium"},
		{20, "high"},
		{400, "high"},
		{math.MaxFloat64, "high"},
		{math.Inf(1), "high"},
	}
	for _, tt := range tests {
		r, ok := trafficclass.RangeFor(tt.rps)
		require.True(t, ok, "%v", tt.rps)
		require.Equal(t, tt.want, r.Class, "%v", tt.rps)
	}
	for _, rps := range []float64{-1e-9, -1, math.Inf(-1), math.NaN()} {
		_, ok := trafficclass.RangeFor(rps)
		require.False(t, ok, "%v", rps)
	}
}

func TestDefault(t *testing.T) {
	t.Parallel()
	c := trafficclass.Default("bulk")
	require.NoError(t, c.Validate())
	require.Equal(t, trafficclass.Class{
		Name:                     "bulk",
		Breaker:                  breaker.DefaultConfig(),
		Enforce:                  true,
		AuthDisableAfter:         10,
		AuthDisableMinDuration:   5 * time.Minute,
		AutoTune:                 trafficclass.AutoTuneRecommend,
		TuneMinThroughputFloor:   1,
		TuneMinThroughputCeiling: 10000,
		TuneFailureRateCeiling:   1,
	}, c)
	require.True(t, trafficclass.Default("high").Builtin)
}

// TestValidateReportsEachBadField covers a custom class with one bad field at
// a time, named by its JSON name.
func TestValidateReportsEachBadField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		edit  func(*trafficclass.Class)
		field string
	}{
		{"empty name", func(c *trafficclass.Class) { c.Name = "" }, "name"},
		{"upper-case name", func(c *trafficclass.Class) { c.Name = "Bulk" }, "name"},
		{"name starting with a dash", func(c *trafficclass.Class) { c.Name = "-bulk" }, "name"},
		{"name with a space", func(c *trafficclass.Class) { c.Name = "bulk jobs" }, "name"},
		{"name of 65 characters", func(c *trafficclass.Class) { c.Name = strings.Repeat("a", 65) }, "name"},
		{"reserved name", func(c *trafficclass.Class) { c.Name = "auto" }, "name"},
		{"unknown trip", func(c *trafficclass.Class) { c.Breaker.Trip = "count" }, "trip"},
		{"zero threshold", func(c *trafficclass.Class) { c.Breaker.FailureRateThreshold = 0 }, "failure_rate_threshold"},
		{"threshold above one", func(c *trafficclass.Class) { c.Breaker.FailureRateThreshold = 1.5 }, "failure_rate_threshold"},
		{"negative threshold", func(c *trafficclass.Class) { c.Breaker.FailureRateThreshold = -0.5 }, "failure_rate_threshold"},
		{"zero window", func(c *trafficclass.Class) { c.Breaker.Window = 0 }, "window"},
		{"negative window", func(c *trafficclass.Class) { c.Breaker.Window = -time.Second }, "window"},
		{"window under 100ms", func(c *trafficclass.Class) { c.Breaker.Window = 50 * time.Millisecond }, "window"},
		{"zero min throughput", func(c *trafficclass.Class) { c.Breaker.MinThroughput = 0 }, "min_throughput"},
		{"zero consecutive failures", func(c *trafficclass.Class) { c.Breaker.ConsecutiveFailures = 0 }, "consecutive_failures"},
		{"zero open duration", func(c *trafficclass.Class) { c.Breaker.OpenDuration = 0 }, "open_duration"},
		{"jitter above one", func(c *trafficclass.Class) { c.Breaker.OpenJitter = 2 }, "open_jitter"},
		{"backoff below one", func(c *trafficclass.Class) { c.Breaker.OpenBackoff = 0.5 }, "open_backoff"},
		{"max open below open", func(c *trafficclass.Class) { c.Breaker.MaxOpenDuration = time.Second }, "max_open_duration"},
		{"zero trials", func(c *trafficclass.Class) { c.Breaker.HalfOpenTrials = 0 }, "half_open_trials"},
		{"zero concurrency", func(c *trafficclass.Class) { c.Breaker.HalfOpenConcurrency = 0 }, "half_open_concurrency"},
		{"zero auth disable after", func(c *trafficclass.Class) { c.AuthDisableAfter = 0 }, "auth_disable_after"},
		{"negative auth min duration", func(c *trafficclass.Class) { c.AuthDisableMinDuration = -time.Second }, "auth_disable_min_duration"},
		{"unknown auto-tune mode", func(c *trafficclass.Class) { c.AutoTune = "always" }, "auto_tune"},
		{"empty auto-tune mode", func(c *trafficclass.Class) { c.AutoTune = "" }, "auto_tune"},
		{"zero min throughput floor", func(c *trafficclass.Class) { c.TuneMinThroughputFloor = 0 }, "tune_min_throughput_floor"},
		{"failure rate floor above one", func(c *trafficclass.Class) { c.TuneFailureRateFloor = 1.5 }, "tune_failure_rate_floor"},
		{"NaN failure rate floor", func(c *trafficclass.Class) { c.TuneFailureRateFloor = math.NaN() }, "tune_failure_rate_floor"},
		{"min throughput ceiling below the floor", func(c *trafficclass.Class) { c.TuneMinThroughputFloor, c.TuneMinThroughputCeiling = 50, 40 }, "tune_min_throughput_ceiling"},
		{"zero min throughput ceiling", func(c *trafficclass.Class) { c.TuneMinThroughputCeiling = 0 }, "tune_min_throughput_ceiling"},
		{"failure rate ceiling above one", func(c *trafficclass.Class) { c.TuneFailureRateCeiling = 1.5 }, "tune_failure_rate_ceiling"},
		{"failure rate ceiling below the floor", func(c *trafficclass.Class) { c.TuneFailureRateFloor, c.TuneFailureRateCeiling = 0.6, 0.5 }, "tune_failure_rate_ceiling"},
		{"NaN failure rate ceiling", func(c *trafficclass.Class) { c.TuneFailureRateCeiling = math.NaN() }, "tune_failure_rate_ceiling"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := trafficclass.Default("bulk")
			tt.edit(&c)
			var fields breaker.FieldErrors
			require.ErrorAs(t, c.Validate(), &fields)
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
		edit func(*trafficclass.Class)
	}{
		{"one-character name", func(c *trafficclass.Class) { c.Name = "x" }},
		{"64-character name", func(c *trafficclass.Class) { c.Name = strings.Repeat("a", 64) }},
		{"digits, dash and underscore", func(c *trafficclass.Class) { c.Name = "0-bulk_jobs" }},
		{"name of a built-in", func(c *trafficclass.Class) { c.Name = "high" }},
		{"name containing auto", func(c *trafficclass.Class) { c.Name = "autopilot" }},
		{"threshold of one", func(c *trafficclass.Class) { c.Breaker.FailureRateThreshold = 1 }},
		{"100ms window", func(c *trafficclass.Class) { c.Breaker.Window = 100 * time.Millisecond }},
		{"min throughput of one", func(c *trafficclass.Class) { c.Breaker.MinThroughput = 1 }},
		{"one trial", func(c *trafficclass.Class) { c.Breaker.HalfOpenTrials = 1 }},
		{"auth disable after one", func(c *trafficclass.Class) { c.AuthDisableAfter = 1 }},
		{"no auth min duration", func(c *trafficclass.Class) { c.AuthDisableMinDuration = 0 }},
		{"shadow mode", func(c *trafficclass.Class) { c.Enforce = false }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := trafficclass.Default("bulk")
			tt.edit(&c)
			require.NoError(t, c.Validate())
		})
	}
}

// TestValidateReportsSeveralFieldsAtOnce checks that every bad field comes
// back in one error, in JSON field order.
func TestValidateReportsSeveralFieldsAtOnce(t *testing.T) {
	t.Parallel()
	c := trafficclass.Default("auto")
	c.Breaker.FailureRateThreshold = 1.2
	c.Breaker.Window = 0
	c.Breaker.MinThroughput = 0
	c.Breaker.HalfOpenTrials = 0
	c.AuthDisableAfter = 0
	err := c.Validate()
	var fields breaker.FieldErrors
	require.ErrorAs(t, err, &fields)
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.Field
	}
	require.Equal(t, []string{
		"name", "failure_rate_threshold", "window", "min_throughput", "half_open_trials", "auth_disable_after",
	}, names)
	require.Equal(t, `name: "auto" is reserved; failure_rate_threshold: must be in (0, 1]; `+
		`window: must be positive; min_throughput: must be at least 1; `+
		`half_open_trials: must be at least 1; auth_disable_after: must be at least 1`, err.Error())
}

func TestNoisy(t *testing.T) {
	t.Parallel()
	low, _ := trafficclass.Builtin("low")     // threshold 0.6
	high, _ := trafficclass.Builtin("high")   // threshold 0.5
	consecutive := trafficclass.Default("c5") // rate by default
	consecutive.Breaker.Trip = breaker.TripConsecutive
	tests := []struct {
		name    string
		class   trafficclass.Class
		healthy float64
		want    bool
	}{
		{"quiet endpoint", high, 0.01, false},
		{"exactly a third of the threshold", high, 0.5 / 3, false},
		{"just over a third", high, 0.17, true},
		{"low's higher threshold", low, 0.17, false},
		{"low noisy", low, 0.25, true},
		{"no failures", high, 0, false},
		{"NaN", high, math.NaN(), false},
		{"consecutive trip", consecutive, 0.9, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.class.Noisy(tt.healthy))
		})
	}
}
