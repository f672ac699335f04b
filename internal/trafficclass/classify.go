package trafficclass

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// Constants of the reclassification of endpoints whose class is Auto.
const (
	// HistoryWindow is how far back a Measurement looks.
	HistoryWindow = 14 * 24 * time.Hour
	// ReclassifyInterval is how often the reclassification job re-evaluates
	// every Auto endpoint by default.
	ReclassifyInterval = 24 * time.Hour
	// MinHistoryMinutes is the fewest minutes of history Classify needs;
	// with less it returns DefaultClass.
	MinHistoryMinutes = 60
	// QuietQuantile is the quantile of the per-minute request rate taken as
	// quiet-time volume (the 5th percentile over 14 days).
	QuietQuantile = 0.05
	// HealthyQuantile is the quantile of the 5-minute failure rates taken as
	// the healthy error rate (the p99 outside incidents).
	HealthyQuantile = 0.99
)

// Measurement is what an endpoint's delivery log says about its traffic over
// the last HistoryWindow: the input to Classify.
type Measurement struct {
	// QuietRPS is the quiet-time volume: the 5th percentile of the
	// per-minute request rate over the last 14 days, in requests/s. See
	// QuietRPS.
	QuietRPS float64
	// HealthyErrorRate is the p99 of the 5-minute failure rates outside
	// breaker-open periods, as a fraction. See HealthyErrorRate.
	HealthyErrorRate float64
	// Minutes is the number of minutes of history the figures rest on.
	Minutes int
}

// Measure builds a Measurement from an endpoint's per-minute request counts
// (see QuietRPS) and its 5-minute failure rates (see HealthyErrorRate); each
// per-minute count is one minute of history.
func Measure(perMinuteCounts, fiveMinuteRates []float64) Measurement {
	return Measurement{
		QuietRPS:         QuietRPS(perMinuteCounts),
		HealthyErrorRate: HealthyErrorRate(fiveMinuteRates),
		Minutes:          len(perMinuteCounts),
	}
}

// Classify returns the built-in class a measurement implies and one
// sentence saying why, such as "quiet-time volume 0.8 rps is in low's range
// [0.0167, 1) rps".
//
// The class is the built-in whose band (Ranges) holds m.QuietRPS. With fewer
// than MinHistoryMinutes minutes of history, or a QuietRPS that is not a
// request rate (NaN or negative), it is DefaultClass and the reason says so.
//
// When the chosen class is Noisy for m.HealthyErrorRate (its failure-rate
// threshold sits within NoiseFactor of the healthy error rate) the reason
// says so, but the class is still chosen by volume alone: no built-in has a
// threshold three times a healthy error rate above 20%, and moving the
// endpoint to shadow mode would silently drop its outage protection, so that
// decision is left to an operator (a custom class with a higher threshold,
// or enforce=false). classes holds the stored classes, so that a tuned
// built-in's threshold is the one checked; a built-in missing from classes
// is checked with its shipped values.
func Classify(m Measurement, classes []Class) (name, reason string) {
	if m.Minutes < MinHistoryMinutes {
		return DefaultClass, fmt.Sprintf("only %d minutes of history, fewer than the %d needed, so it takes the default class %s",
			max(m.Minutes, 0), MinHistoryMinutes, DefaultClass)
	}
	r, ok := RangeFor(m.QuietRPS)
	if !ok {
		return DefaultClass, fmt.Sprintf("quiet-time volume %v is not a request rate, so it takes the default class %s",
			m.QuietRPS, DefaultClass)
	}
	reason = fmt.Sprintf("quiet-time volume %s rps is in %s's range [%s, %s) rps",
		formatNumber(m.QuietRPS), r.Class, formatNumber(r.MinRPS), formatNumber(r.MaxRPS))
	c, ok := Builtin(r.Class)
	if i := slices.IndexFunc(classes, func(c Class) bool { return c.Name == r.Class }); i >= 0 {
		c, ok = classes[i], true
	}
	if ok && c.Noisy(m.HealthyErrorRate) {
		reason += fmt.Sprintf(", but its healthy error rate %s is within %dx of %s's failure-rate threshold %s, "+
			"so expect false trips: give it a custom class with a higher threshold or enforce=false (shadow mode)",
			formatPercent(m.HealthyErrorRate), NoiseFactor, r.Class, formatPercent(c.Breaker.FailureRateThreshold))
	}
	return r.Class, reason
}

// Percentile returns the p-quantile of sorted, which must be in ascending
// order, with p a fraction (0.05 for the 5th percentile). It interpolates
// linearly between the two nearest ranks exactly as Prometheus' quantile and
// quantile_over_time do: rank p*(n-1), weighted between its floor and the
// next sample. As there, it returns NaN for no samples or a NaN p, -Inf for
// p < 0 and +Inf for p > 1.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 || math.IsNaN(p) {
		return math.NaN()
	}
	if p < 0 {
		return math.Inf(-1)
	}
	if p > 1 {
		return math.Inf(1)
	}
	n := float64(len(sorted))
	rank := p * (n - 1)
	lower := math.Max(0, math.Floor(rank))
	upper := math.Min(n-1, lower+1)
	weight := rank - math.Floor(rank)
	return sorted[int(lower)]*(1-weight) + sorted[int(upper)]*weight
}

// QuietRPS returns the quiet-time volume, in requests/s, of an endpoint
// whose request count in each minute of its history is perMinuteCounts, in
// any order: the QuietQuantile (5th percentile) of the per-minute rate, as
// Prometheus' quantile_over_time(0.05, ...[14d:1m]). Every minute of the
// history must be present, idle minutes as 0: leaving them out would make a
// quiet endpoint look busy. The count that matters is of attempts the
// breaker counts (success or failure), since those fill its window; NaN
// counts are skipped. It returns NaN for no minutes.
func QuietRPS(perMinuteCounts []float64) float64 {
	return quantile(perMinuteCounts, QuietQuantile) / 60
}

// HealthyErrorRate returns the healthy error rate of an endpoint whose
// failure rate (failures / (successes + failures)) in each 5-minute bucket of
// its history is fiveMinuteRates, in any order: the HealthyQuantile (p99),
// as Prometheus' quantile_over_time(0.99, ...[14d:5m]). Buckets that overlap
// a period the breaker was open or isolated must be left out (they are the
// incidents, not the health), as must buckets with no counted outcome; NaN
// rates are skipped. It returns NaN when no bucket is left.
func HealthyErrorRate(fiveMinuteRates []float64) float64 {
	return quantile(fiveMinuteRates, HealthyQuantile)
}

// quantile returns Percentile of the non-NaN values of values.
func quantile(values []float64, p float64) float64 {
	sorted := make([]float64, 0, len(values))
	for _, v := range values {
		if !math.IsNaN(v) {
			sorted = append(sorted, v)
		}
	}
	slices.Sort(sorted)
	return Percentile(sorted, p)
}

// formatNumber formats a rate with three significant digits, whole numbers
// from 1000 to a million without an exponent, and +Inf as "+Inf".
func formatNumber(x float64) string {
	if math.Abs(x) >= 1000 && math.Abs(x) < 1e6 {
		return strconv.FormatFloat(math.Round(x), 'f', -1, 64)
	}
	return strconv.FormatFloat(x, 'g', 3, 64)
}

// formatPercent formats a fraction as a percentage with three significant
// digits.
func formatPercent(x float64) string {
	return strconv.FormatFloat(x*100, 'g', 3, 64) + "%"
}
