package tuning

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/replay"
	"github.com/hookd/hookd/internal/trafficclass"
)

// Limits of every config a pass derives or ranks besides the current one.
const (
	// MinOpenDuration and MaxOpenDuration bound the open duration a
	// recovery time anchors: the aggressive floor and the point past which
	// dead-lettering beats waiting.
	MinOpenDuration = 15 * time.Second
	MaxOpenDuration = 120 * time.Second
	// MinThroughputFloor is the floor of the min_throughput rule.
	MinThroughputFloor = 20
	// MaxMinThroughput caps min_throughput: a busy class's window holds
	// many more requests, and a breaker that waits for more than this many
	// before judging barely protects anything.
	MaxMinThroughput = trafficclass.DefaultTuneMinThroughputCeiling
	// MinThreshold is the floor of a failure-rate threshold: below half
	// failing, a threshold trips on degraded service rather than outages.
	MinThreshold = 0.5
	// MaxThreshold caps a failure-rate threshold: above it the breaker
	// barely trips at all.
	MaxThreshold = 0.9
	// MinWindow and MaxWindow are the ends of the window ladder.
	MinWindow = 5 * time.Second
	MaxWindow = 10 * time.Minute
)

// windowLadder are the windows a derivation picks from.
var windowLadder = []time.Duration{
	MinWindow, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, MaxWindow,
}

// Bounds are the limits an admin sets on what tuning may propose for a
// class, on both sides; a zero ceiling does not bound.
type Bounds struct {
	// MinThroughputFloor and MinThroughputCeiling bound min_throughput.
	MinThroughputFloor, MinThroughputCeiling int
	// FailureRateFloor and FailureRateCeiling bound
	// failure_rate_threshold.
	FailureRateFloor, FailureRateCeiling float64
}

// BoundsOf returns the tuning bounds an admin set on c.
func BoundsOf(c trafficclass.Class) Bounds {
	return Bounds{MinThroughputFloor: c.TuneMinThroughputFloor, MinThroughputCeiling: c.TuneMinThroughputCeiling,
		FailureRateFloor: c.TuneFailureRateFloor, FailureRateCeiling: c.TuneFailureRateCeiling}
}

// Allows reports whether c is within b.
func (b Bounds) Allows(c breaker.Config) bool {
	return c.MinThroughput >= b.MinThroughputFloor && (b.MinThroughputCeiling <= 0 || c.MinThroughput <= b.MinThroughputCeiling) &&
		c.FailureRateThreshold >= b.FailureRateFloor && (b.FailureRateCeiling <= 0 || c.FailureRateThreshold <= b.FailureRateCeiling)
}

// thresholds returns the range of failure-rate thresholds within the limits
// and b; lo > hi when they leave none.
func (b Bounds) thresholds() (lo, hi float64) {
	lo, hi = math.Max(MinThreshold, b.FailureRateFloor), MaxThreshold
	if b.FailureRateCeiling > 0 {
		hi = math.Min(hi, b.FailureRateCeiling)
	}
	return lo, hi
}

// minimums returns the range of min_throughput within the limits and b.
func (b Bounds) minimums() (lo, hi int) {
	lo, hi = max(MinThroughputFloor, b.MinThroughputFloor), MaxMinThroughput
	if b.MinThroughputCeiling > 0 {
		hi = min(hi, b.MinThroughputCeiling)
	}
	return lo, hi
}

// Within reports whether a rate config is inside the limits and b.
func Within(c breaker.Config, b Bounds) bool {
	tlo, thi := b.thresholds()
	mlo, mhi := b.minimums()
	return c.Trip == breaker.TripRate && c.FailureRateThreshold >= tlo-1e-9 && c.FailureRateThreshold <= thi+1e-9 &&
		c.Window >= MinWindow && c.Window <= MaxWindow && c.MinThroughput >= mlo && c.MinThroughput <= mhi && b.Allows(c)
}

// ClassEvidence is the evidence of every endpoint of a class, reduced.
type ClassEvidence struct {
	Since, Until time.Time
	// Endpoints are the endpoints' evidence, each with only the incidents
	// a recommendation lists (MaxListedIncidents) and the count of all.
	Endpoints []EndpointEvidence
	// Attempts sums the endpoints'; Counted sums those of the endpoints
	// whose log counts as evidence (EndpointEvidence.Counted), and Sparse
	// is how many do not. Incidents sums the counted endpoints'.
	Attempts, Counted, Sparse, Incidents int
	// QuietRPS is the median of the endpoints' quiet-time volumes, each
	// weighted by its attempts: the volume most of the class's requests
	// see.
	QuietRPS float64
	// HealthyErrorRate is the 99th percentile of the endpoints' healthy
	// error rates, each weighted by the requests it was measured over: the
	// threshold stays clear of the noise of all but 1% of the volume.
	HealthyErrorRate float64
	// Recovery is the median recovery time over every incident; 0 without
	// one. Past replay.ExactDetections recoveries it is within
	// replay.DetectPrecision of it (replay.Durations).
	Recovery time.Duration
}

// Reduce sums and summarises the endpoints' evidence; the class's figures
// come from the endpoints whose log counts (EndpointEvidence.Counted).
func Reduce(since, until time.Time, eps []EndpointEvidence) ClassEvidence {
	r := newReducer(since, until)
	for _, e := range eps {
		r.add(e)
	}
	return r.result()
}

// reducer reduces the endpoints' evidence one endpoint at a time, as
// Reduce does, keeping of each endpoint only what its class's evidence
// needs: O(endpoints), whatever the number of incidents.
type reducer struct {
	ce                               ClassEvidence
	quiet, quietW, healthy, healthyW []float64
	recoveries                       replay.Durations
}

func newReducer(since, until time.Time) *reducer {
	return &reducer{ce: ClassEvidence{Since: since, Until: until, Endpoints: []EndpointEvidence{}}}
}

// add adds an endpoint's evidence.
func (r *reducer) add(e EndpointEvidence) {
	r.ce.Endpoints = append(r.ce.Endpoints, e.compact())
	r.ce.Attempts += e.Attempts
	if !e.Counted() {
		r.ce.Sparse++
		return
	}
	r.ce.Counted += e.Attempts
	r.ce.Incidents += e.IncidentCount()
	if e.Attempts > 0 {
		r.quiet, r.quietW = append(r.quiet, e.QuietRPS), append(r.quietW, float64(e.Attempts))
	}
	if !math.IsNaN(e.HealthyErrorRate) && e.HealthyAttempts > 0 {
		r.healthy, r.healthyW = append(r.healthy, e.HealthyErrorRate), append(r.healthyW, float64(e.HealthyAttempts))
	}
	for _, in := range e.Incidents {
		if in.Recovery > 0 {
			r.recoveries.Add(in.Recovery)
		}
	}
}

// result returns the class's evidence.
func (r *reducer) result() ClassEvidence {
	ce := r.ce
	ce.QuietRPS = WeightedQuantile(r.quiet, r.quietW, 0.5)
	ce.HealthyErrorRate = WeightedQuantile(r.healthy, r.healthyW, trafficclass.HealthyQuantile)
	ce.Recovery = r.recoveries.Median()
	return ce
}

// WeightedQuantile returns the smallest of values at which the weights of
// the values up to it reach p of the total weight; 0 without a positive
// weight.
func WeightedQuantile(values, weights []float64, p float64) float64 {
	idx := make([]int, 0, len(values))
	total := 0.0
	for i, w := range weights {
		if w > 0 && !math.IsNaN(values[i]) {
			idx = append(idx, i)
			total += w
		}
	}
	if total == 0 {
		return 0
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(values[a], values[b]) })
	cum := 0.0
	for _, i := range idx {
		cum += weights[i]
		if cum >= p*total*(1-1e-12) {
			return values[i]
		}
	}
	return values[idx[len(idx)-1]]
}

// Derive returns the config the traffic-class rules give for the
// evidence, from current's other settings: the threshold NoiseFactor times
// the healthy error rate (at least 0.5, rounded up to 0.05, at most
// MaxThreshold), the shortest window of the ladder in which half the
// quiet-time requests reach the floor of 20, min_throughput by
// MinThroughputFor, and the open duration the median recovery time within
// [15 s, 120 s] (current's without a recovery). The threshold and the
// minimum are then brought inside the limits and b.
func Derive(ev ClassEvidence, current breaker.Config, b Bounds) breaker.Config {
	c := current
	c.Trip = breaker.TripRate
	lo, hi := b.thresholds()
	t := math.Max(0.5, trafficclass.NoiseFactor*ev.HealthyErrorRate)
	t = math.Ceil(t*20-1e-9) / 20
	c.FailureRateThreshold = math.Min(math.Max(t, lo), hi)
	c.Window = windowLadder[len(windowLadder)-1]
	for _, w := range windowLadder {
		if trafficclass.MinThroughputFor(ev.QuietRPS, w, 0) >= MinThroughputFloor {
			c.Window = w
			break
		}
	}
	mlo, mhi := b.minimums()
	c.MinThroughput = min(max(trafficclass.MinThroughputFor(ev.QuietRPS, c.Window, MinThroughputFloor), mlo), mhi)
	if ev.Recovery > 0 {
		c.OpenDuration = min(max(ev.Recovery.Round(time.Second), MinOpenDuration), MaxOpenDuration)
	}
	c.MaxOpenDuration = max(c.MaxOpenDuration, c.OpenDuration)
	return c
}

// Grid returns the configs a pass ranks: current first, then rates 0.1
// either side, windows half and double, and minimums half and double,
// around derived and around current (a consecutive current contributes
// only itself), each setting brought inside the limits (MinThreshold to
// MaxThreshold, MinWindow to MaxWindow, MinThroughputFloor to
// MaxMinThroughput) and b, without duplicates and without the configs
// outside them (current stays, as the one to beat).
func Grid(derived, current breaker.Config, b Bounds) []breaker.Config {
	out := []breaker.Config{current}
	seen := map[breaker.Config]bool{current: true}
	tlo, thi := b.thresholds()
	mlo, mhi := b.minimums()
	around := func(c breaker.Config) {
		for _, dr := range []float64{0, -0.1, 0.1} {
			for _, w := range []time.Duration{c.Window, c.Window / 2, c.Window * 2} {
				for _, m := range []int{c.MinThroughput, c.MinThroughput / 2, c.MinThroughput * 2} {
					x := c
					x.FailureRateThreshold = math.Round(math.Min(math.Max(c.FailureRateThreshold+dr, tlo), thi)*100) / 100
					x.Window, x.MinThroughput = min(max(w, MinWindow), MaxWindow), min(max(m, mlo), mhi)
					if x.Validate() != nil || !Within(x, b) || seen[x] {
						continue
					}
					seen[x] = true
					out = append(out, x)
				}
			}
		}
	}
	around(derived)
	if current.Trip == breaker.TripRate {
		around(current)
	}
	return out
}

// Lead-in and tail of an incident's trace.
const (
	// IncidentTail is how long an incident's trace runs on after its last
	// failure, so that opens that last past it count against the incident
	// rather than the quiet traffic.
	IncidentTail = 2 * time.Minute
)

// Segment is a range of an endpoint's log that a pass replays as one
// trace: quiet traffic, or an incident after a lead-in.
type Segment struct {
	Interval
	// Incident, when set, is when the incident starts; the rows before are
	// the lead-in.
	Incident *time.Time
}

// Segments cuts [since, until) into the ranges a pass replays: each
// incident from lead before its start (no earlier than the previous
// range's end) to IncidentTail after its end, and the quiet ranges
// between them.
func Segments(since, until time.Time, incidents []Incident, lead time.Duration) []Segment {
	var out []Segment
	at := since
	for _, in := range incidents {
		if n := len(out); n > 0 && out[n-1].Incident != nil && in.From.Before(at) {
			// It starts inside the previous incident's trace: one trace.
			to := in.To.Add(IncidentTail)
			if to.After(until) {
				to = until
			}
			if to.After(at) {
				out[n-1].To, at = to, to
			}
			continue
		}
		from := in.From.Add(-lead)
		if from.Before(at) {
			from = at
		}
		if from.After(at) {
			out = append(out, Segment{Interval: Interval{From: at, To: from}})
		}
		to := in.To.Add(IncidentTail)
		if to.After(until) {
			to = until
		}
		if !to.After(from) {
			continue
		}
		start := in.From
		out = append(out, Segment{Interval: Interval{From: from, To: to}, Incident: &start})
		at = to
	}
	if until.After(at) {
		out = append(out, Segment{Interval: Interval{From: at, To: until}})
	}
	return out
}

// Traces cuts rows (in time order) into the segments' traces, labelling an
// incident's rows replay.PhaseLeadIn and replay.PhaseIncident as the
// sweep's --from-db does.
func Traces(rows []replay.Row, segs []Segment) []replay.Trace {
	out := make([]replay.Trace, 0, len(segs))
	for _, s := range segs {
		lo, _ := slices.BinarySearchFunc(rows, time.Duration(s.From.UnixNano()), func(r replay.Row, t time.Duration) int { return cmpDur(r.TS, t) })
		hi, _ := slices.BinarySearchFunc(rows, time.Duration(s.To.UnixNano()), func(r replay.Row, t time.Duration) int { return cmpDur(r.TS, t) })
		part := slices.Clone(rows[lo:hi])
		if len(part) == 0 {
			continue
		}
		t := replay.Trace{Rows: part}
		if s.Incident != nil {
			start := time.Duration(s.Incident.UnixNano())
			for i := range part {
				part[i].Phase = replay.PhaseIncident
				if part[i].TS < start {
					part[i].Phase = replay.PhaseLeadIn
				}
			}
			t.Incident, t.IncidentPhase = true, replay.PhaseIncident
		}
		out = append(out, t)
	}
	return out
}

// LeadFor returns the lead-in a pass reads before each incident: the
// largest window of configs, as the sweep's --from-db does.
func LeadFor(configs []breaker.Config) time.Duration {
	var lead time.Duration
	for _, c := range configs {
		lead = max(lead, c.Window)
	}
	return lead
}

// describe names a config's ranked settings in words.
func describe(c breaker.Config) string {
	if c.Trip == breaker.TripConsecutive {
		return fmt.Sprintf("%d consecutive failures, open %s", c.ConsecutiveFailures, trafficclass.FormatDuration(c.OpenDuration))
	}
	return fmt.Sprintf("rate >= %g over %s, min %d, open %s", c.FailureRateThreshold, trafficclass.FormatDuration(c.Window),
		c.MinThroughput, trafficclass.FormatDuration(c.OpenDuration))
}
