package trafficclass_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/trafficclass"
)

const twoWeeks = 14 * 24 * 60 // minutes

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		m      trafficclass.Measurement
		want   string
		reason string
	}{
		{"busy endpoint", trafficclass.Measurement{QuietRPS: 400, HealthyErrorRate: 0.01, Minutes: twoWeeks},
			"high", "quiet-time volume 400 rps is in high's range [20, +Inf) rps"},
		{"three a day", trafficclass.Measurement{QuietRPS: 0, HealthyErrorRate: 0, Minutes: twoWeeks},
			"trickle", "quiet-time volume 0 rps is in trickle's range [0, 0.0167) rps"},
		{"brief's low example", trafficclass.Measurement{QuietRPS: 0.8, HealthyErrorRate: 0.02, Minutes: twoWeeks},
			"low", "quiet-time volume 0.8 rps is in low's range [0.0167, 1) rps"},
		{"medium", trafficclass.Measurement{QuietRPS: 5, Minutes: twoWeeks},
			"medium", "quiet-time volume 5 rps is in medium's range [1, 20) rps"},
		{"very busy", trafficclass.Measurement{QuietRPS: 12345.6, Minutes: twoWeeks},
			"high", "quiet-time volume 12346 rps is in high's range [20, +Inf) rps"},
		{"no history", trafficclass.Measurement{},
			"trickle", "only 0 minutes of history, fewer than the 60 needed, so it takes the default class trickle"},
		{"busy but new", trafficclass.Measurement{QuietRPS: 400, Minutes: 59},
			"trickle", "only 59 minutes of history, fewer than the 60 needed, so it takes the default class trickle"},
		{"negative minutes", trafficclass.Measurement{QuietRPS: 400, Minutes: -5},
			"trickle", "only 0 minutes of history, fewer than the 60 needed, so it takes the default class trickle"},
		{"an hour is enough", trafficclass.Measurement{QuietRPS: 400, Minutes: 60},
			"high", "quiet-time volume 400 rps is in high's range [20, +Inf) rps"},
		{"NaN volume", trafficclass.Measurement{QuietRPS: math.NaN(), Minutes: twoWeeks},
			"trickle", "quiet-time volume NaN is not a request rate, so it takes the default class trickle"},
		{"negative volume", trafficclass.Measurement{QuietRPS: -1, Minutes: twoWeeks},
			"trickle", "quiet-time volume -1 is not a request rate, so it takes the default class trickle"},
		{"noisy low endpoint", trafficclass.Measurement{QuietRPS: 0.8, HealthyErrorRate: 0.25, Minutes: twoWeeks},
			"low", "quiet-time volume 0.8 rps is in low's range [0.0167, 1) rps, but its healthy error rate 25% " +
				"is within 3x of low's failure-rate threshold 60%, so expect false trips: give it a custom class " +
				"with a higher threshold or enforce=false (shadow mode)"},
		{"noisy high endpoint", trafficclass.Measurement{QuietRPS: 50, HealthyErrorRate: 0.2, Minutes: twoWeeks},
			"high", "quiet-time volume 50 rps is in high's range [20, +Inf) rps, but its healthy error rate 20% " +
				"is within 3x of high's failure-rate threshold 50%, so expect false trips: give it a custom class " +
				"with a higher threshold or enforce=false (shadow mode)"},
		{"a sixth is not yet noisy at 50%", trafficclass.Measurement{QuietRPS: 50, HealthyErrorRate: 0.5 / 3, Minutes: twoWeeks},
			"high", "quiet-time volume 50 rps is in high's range [20, +Inf) rps"},
		{"NaN healthy error rate", trafficclass.Measurement{QuietRPS: 50, HealthyErrorRate: math.NaN(), Minutes: twoWeeks},
			"high", "quiet-time volume 50 rps is in high's range [20, +Inf) rps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			name, reason := trafficclass.Classify(tt.m, trafficclass.Builtins())
			require.Equal(t, tt.want, name)
			require.Equal(t, tt.reason, reason)
			nilName, nilReason := trafficclass.Classify(tt.m, nil)
			require.Equal(t, name, nilName, "built-ins missing from classes use their shipped values")
			require.Equal(t, reason, nilReason)
		})
	}
}

// TestClassifyBoundaries walks every band edge: the lower end belongs to the
// band, the next float below it to the band under it.
func TestClassifyBoundaries(t *testing.T) {
	t.Parallel()
	for _, r := range trafficclass.Ranges() {
		t.Run(r.Class, func(t *testing.T) {
			t.Parallel()
			name, _ := trafficclass.Classify(trafficclass.Measurement{QuietRPS: r.MinRPS, Minutes: twoWeeks}, nil)
			require.Equal(t, r.Class, name)
			if r.MinRPS == 0 {
				return
			}
			below, ok := trafficclass.RangeFor(math.Nextafter(r.MinRPS, 0))
			require.True(t, ok)
			name, _ = trafficclass.Classify(trafficclass.Measurement{QuietRPS: math.Nextafter(r.MinRPS, 0), Minutes: twoWeeks}, nil)
			require.Equal(t, below.Class, name)
			require.NotEqual(t, r.Class, name)
		})
	}
}

// TestClassifyChecksTheStoredThreshold checks that a tuned built-in's
// threshold, not the shipped one, decides whether the reason warns.
func TestClassifyChecksTheStoredThreshold(t *testing.T) {
	t.Parallel()
	m := trafficclass.Measurement{QuietRPS: 0.8, HealthyErrorRate: 0.25, Minutes: twoWeeks}
	classes := trafficclass.Builtins()
	classes[2].Breaker.FailureRateThreshold = 0.9 // low, tuned
	name, reason := trafficclass.Classify(m, classes)
	require.Equal(t, "low", name)
	require.Equal(t, "quiet-time volume 0.8 rps is in low's range [0.0167, 1) rps", reason)
}

func TestClassifyMeasuredTraffic(t *testing.T) {
	t.Parallel()
	minutes := func(n int, perMinute func(i int) float64) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = perMinute(i)
		}
		return out
	}
	tests := []struct {
		name      string
		perMinute []float64
		want      string
	}{
		{"busy around the clock", minutes(twoWeeks, func(i int) float64 { return 1800 + float64(i%600) }), "high"},
		{"three a day", minutes(twoWeeks, func(i int) float64 {
			if i%480 == 0 {
				return 1
			}
			return 0
		}), "trickle"},
		{"idle every night", minutes(twoWeeks, func(i int) float64 {
			if i%1440 < 360 {
				return 0
			}
			return 3000
		}), "trickle"},
		{"a few a minute", minutes(twoWeeks, func(i int) float64 { return float64(2 + i%5) }), "low"},
		{"a handful a second", minutes(twoWeeks, func(i int) float64 { return float64(300 + i%60) }), "medium"},
		{"ten minutes old", minutes(10, func(int) float64 { return 6000 }), "trickle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			name, reason := trafficclass.Classify(trafficclass.Measure(tt.perMinute, nil), nil)
			require.Equal(t, tt.want, name, reason)
		})
	}
}

// TestPercentileMatchesPrometheus pins Prometheus' quantile semantics:
// linear interpolation at rank p*(n-1).
func TestPercentileMatchesPrometheus(t *testing.T) {
	t.Parallel()
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1)
	}
	tests := []struct {
		name   string
		sorted []float64
		p      float64
		want   float64
	}{
		{"median of four", []float64{1, 2, 3, 4}, 0.5, 2.5},
		{"minimum", []float64{1, 2, 3, 4}, 0, 1},
		{"maximum", []float64{1, 2, 3, 4}, 1, 4},
		{"quarter", []float64{1, 2, 3, 4}, 0.25, 1.75},
		{"5th of 1..100", hundred, 0.05, 5.95},
		{"99th of 1..100", hundred, 0.99, 99.01},
		{"single sample", []float64{7}, 0.05, 7},
		{"equal samples", []float64{3, 3, 3}, 0.9, 3},
		{"empty", nil, 0.5, math.NaN()},
		{"NaN p", []float64{1}, math.NaN(), math.NaN()},
		{"p below zero", []float64{1, 2}, -0.1, math.Inf(-1)},
		{"p above one", []float64{1, 2}, 1.1, math.Inf(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := trafficclass.Percentile(tt.sorted, tt.p)
			if math.IsNaN(tt.want) {
				require.True(t, math.IsNaN(got), "%v", got)
				return
			}
			require.InDelta(t, tt.want, got, 1e-9)
		})
	}
}

func TestQuietRPS(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		counts []float64
		want   float64
	}{
		{"steady 60 a minute", []float64{60, 60, 60, 60}, 1},
		{"unordered", []float64{600, 60, 6000, 60, 60}, 1},
		{"one idle minute in twenty", append(repeat(120, 19), 0), 1.9}, // rank 0.95: (0*0.05 + 120*0.95) / 60
		{"NaN skipped", []float64{math.NaN(), 30, 30}, 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.InDelta(t, tt.want, trafficclass.QuietRPS(tt.counts), 1e-9)
		})
	}
	require.True(t, math.IsNaN(trafficclass.QuietRPS(nil)))
	require.True(t, math.IsNaN(trafficclass.QuietRPS([]float64{math.NaN()})))
}

func TestHealthyErrorRate(t *testing.T) {
	t.Parallel()
	// Fourteen days of 5-minute buckets at a 2% background error rate, with a
	// spike to 30% every spikeEvery buckets and no counted outcome in every
	// 7th bucket.
	buckets := func(spikeEvery int) []float64 {
		rates := make([]float64, 0, 4032)
		for i := range 4032 {
			switch {
			case i%spikeEvery == 0:
				rates = append(rates, 0.3)
			case i%7 == 0:
				rates = append(rates, math.NaN())
			default:
				rates = append(rates, 0.02)
			}
		}
		return rates
	}
	tests := []struct {
		name  string
		rates []float64
		want  float64
	}{
		{"rare spikes (under 1% of buckets) are not health", buckets(200), 0.02},
		{"frequent spikes (2% of buckets) are", buckets(50), 0.3},
		{"steady", []float64{0.02, 0.02, 0.02}, 0.02},
		{"interpolated", []float64{0, 0.5}, 0.495},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.InDelta(t, tt.want, trafficclass.HealthyErrorRate(tt.rates), 1e-12)
		})
	}
	require.True(t, math.IsNaN(trafficclass.HealthyErrorRate(nil)))
	require.True(t, math.IsNaN(trafficclass.HealthyErrorRate([]float64{math.NaN()})))
}

func TestMeasure(t *testing.T) {
	t.Parallel()
	m := trafficclass.Measure([]float64{60, 60}, []float64{0.1, math.NaN()})
	require.Equal(t, trafficclass.Measurement{QuietRPS: 1, HealthyErrorRate: 0.1, Minutes: 2}, m)
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}
