// Package tuning owns automatic breaker tuning: a pass per traffic class
// that measures the evidence in its endpoints' delivery log (healthy error
// rate, quiet-time volume, incidents, recovery times), derives a candidate
// config from the traffic-class rules, replays every endpoint through a
// grid around the candidate and the current config with the sweep's own
// code (replay.Score, replay.Rank), and keeps the current config unless a
// candidate beats it by a margin on enough evidence. It also judges a
// proposal's live shadow against its replay. The measuring, deriving and
// judging are pure functions of rows and configs; Tuner wraps them with the
// store.
package tuning

import (
	"math"
	"slices"
	"time"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/replay"
	"github.com/hookd/hookd/internal/trafficclass"
)

// Constants of the incident finder.
const (
	// IncidentBucket is the width of the buckets whose failure rates the
	// incident finder reads.
	IncidentBucket = 5 * time.Second
	// IncidentLevel is the failure rate a bucket reaches to be failing; a
	// run of failing buckets is an incident candidate.
	IncidentLevel = 0.5
	// IncidentGap is the longest stretch without requests a run of failing
	// buckets spans.
	IncidentGap = 5 * time.Minute
	// IncidentSurprise is how unlikely a run's failures must be under the
	// endpoint's baseline failure rate for it to be an incident: its
	// Chernoff bound exp(-n * KL(failures/n || baseline)) is below
	// exp(-IncidentSurprise), about one in a million.
	IncidentSurprise = 13.8
	// RecoveryStreak is the run of successes that ends a recovery.
	RecoveryStreak = 3
	// MinEndpointAttempts is the fewest attempts in the range an endpoint
	// needs for its log to count as evidence (its class's figures, the
	// replay, the evidence minimums): with fewer, no window of a breaker
	// with the floor's min_throughput ever judges it.
	MinEndpointAttempts = 20
	// MinBucketAttempts is the fewest requests a 5-minute bucket holds for
	// its failure rate to count towards the healthy error rate and the
	// baseline: one failure in a bucket of one request is not a 100%
	// error rate (the breaker's own floor of 20).
	MinBucketAttempts = 20
)

// Interval is a stretch of time, [From, To).
type Interval struct {
	From time.Time
	To   time.Time
}

// Contains reports whether t is in the interval.
func (i Interval) Contains(t time.Time) bool { return !t.Before(i.From) && t.Before(i.To) }

// Incident is a stretch of an endpoint's log where it was failing.
type Incident struct {
	// Interval runs from the incident's first failure to its last.
	Interval
	// Attempts and Failures are the requests logged in it.
	Attempts, Failures int
	// Recorded reports that a recorded breaker open found it, rather than
	// the failure rate alone.
	Recorded bool
	// Recovery is the time from the incident's start to the first of
	// RecoveryStreak successes in a row after it; 0 when the log ends first.
	Recovery time.Duration
}

// EndpointEvidence is what one endpoint's log says.
type EndpointEvidence struct {
	// EndpointID names the endpoint.
	EndpointID string
	// Attempts is the requests that count for a breaker (success or
	// failure).
	Attempts int
	// QuietRPS is the 5th percentile of the per-minute request rate, in
	// requests/s (trafficclass.QuietRPS), over the minutes with at least
	// one request: the volume a window fills with while the endpoint takes
	// traffic (idle minutes would make most webhook endpoints 0).
	QuietRPS float64
	// HealthyErrorRate is the p99 of the 5-minute failure rates outside
	// incidents (trafficclass.HealthyErrorRate), over the buckets of at
	// least MinBucketAttempts requests; NaN without one.
	HealthyErrorRate float64
	// HealthyAttempts is the requests of those buckets: the weight of the
	// endpoint's healthy error rate in its class's.
	HealthyAttempts int
	// Baseline is the median failure rate of the 5-minute buckets of at
	// least MinBucketAttempts requests, or the failure rate of the whole
	// log without one: the rate the incident finder judges runs against.
	Baseline float64
	// Incidents are the incidents found, in time order; in a class's
	// evidence (ClassEvidence.Endpoints), only those a recommendation
	// lists (Worst), and IncidentCount counts them all.
	Incidents []Incident
	// Minutes is the minutes of the range.
	Minutes int
	// incidents is how many incidents were found, once Incidents is cut
	// to the listed ones (compacted).
	incidents int
	compacted bool
}

// IncidentCount returns how many incidents the endpoint had.
func (e EndpointEvidence) IncidentCount() int {
	if e.compacted {
		return e.incidents
	}
	return len(e.Incidents)
}

// compact returns e with only the incidents a recommendation lists.
func (e EndpointEvidence) compact() EndpointEvidence {
	if e.compacted {
		return e
	}
	e.incidents, e.compacted = len(e.Incidents), true
	e.Incidents = slices.Clone(Worst(e.Incidents, MaxListedIncidents))
	return e
}

// incidentBounds are the bounds of an endpoint's incidents, in time
// order, in nanoseconds since the epoch: all a pass keeps of them between
// its reads of the log (for the quiet time and the segments), 16 bytes an
// incident.
type incidentBounds []int64

// boundsOf returns the bounds of incidents.
func boundsOf(incidents []Incident) incidentBounds {
	out := make(incidentBounds, 0, 2*len(incidents))
	for _, in := range incidents {
		out = append(out, in.From.UnixNano(), in.To.UnixNano())
	}
	return out
}

// incidents returns the incidents of the bounds, with only their
// intervals: what Segments reads.
func (b incidentBounds) incidents() []Incident {
	out := make([]Incident, len(b)/2)
	for i := range out {
		out[i].Interval = Interval{From: time.Unix(0, b[2*i]).UTC(), To: time.Unix(0, b[2*i+1]).UTC()}
	}
	return out
}

// Measure reads the evidence of one endpoint from its rows in [since,
// until), in time order, and the times its breaker recorded an open (with
// the failures and observations of the window that tripped it).
func Measure(endpointID string, rows []replay.Row, since, until time.Time, opens []RecordedOpen) EndpointEvidence {
	// Only successes and failures fill a breaker's window.
	if slices.ContainsFunc(rows, func(r replay.Row) bool { return !counted(r.Outcome) }) {
		rows = slices.DeleteFunc(slices.Clone(rows), func(r replay.Row) bool { return !counted(r.Outcome) })
	}
	ev := EndpointEvidence{EndpointID: endpointID, Attempts: len(rows)}
	minutes := max(int(math.Ceil(until.Sub(since).Minutes())), 0)
	ev.Minutes = minutes
	perMinute := make([]float64, minutes)
	start := since.UnixNano()
	type five struct{ n, f int }
	fives := make([]five, max((minutes+4)/5, 0))
	for _, r := range rows {
		off := int64(r.TS) - start
		if off < 0 {
			continue
		}
		m := int(off / int64(time.Minute))
		if m >= minutes {
			continue
		}
		perMinute[m]++
		fives[m/5].n++
		if r.Outcome == breaker.OutcomeFailure {
			fives[m/5].f++
		}
	}
	active := slices.DeleteFunc(perMinute, func(n float64) bool { return n == 0 })
	if len(active) > 0 {
		ev.QuietRPS = trafficclass.QuietRPS(active)
	}
	var rates []float64
	failures, total := 0, 0
	for _, b := range fives {
		failures, total = failures+b.f, total+b.n
		if b.n >= MinBucketAttempts {
			rates = append(rates, float64(b.f)/float64(b.n))
		}
	}
	switch {
	case len(rates) > 0:
		slices.Sort(rates)
		ev.Baseline = trafficclass.Percentile(rates, 0.5)
	case total > 0:
		ev.Baseline = float64(failures) / float64(total)
	}
	ev.Incidents = findIncidents(rows, ev.Baseline, opens)
	var healthy []float64
	for i, b := range fives {
		if b.n < MinBucketAttempts {
			continue
		}
		from := since.Add(time.Duration(i) * 5 * time.Minute)
		span := Interval{From: from, To: from.Add(5 * time.Minute)}
		if slices.ContainsFunc(ev.Incidents, func(in Incident) bool { return overlaps(in.Interval, span) }) {
			continue
		}
		healthy = append(healthy, float64(b.f)/float64(b.n))
		ev.HealthyAttempts += b.n
	}
	ev.HealthyErrorRate = trafficclass.HealthyErrorRate(healthy)
	return ev
}

// Counted reports whether the endpoint's log counts as evidence: at least
// MinEndpointAttempts attempts.
func (e EndpointEvidence) Counted() bool { return e.Attempts >= MinEndpointAttempts }

// activeSpans are the minutes of a range, from its start, in each of
// which an endpoint has at least one attempt, a bit a minute: what the
// quiet time with traffic needs of its log, in a bit per minute of the
// range (1.3 KB for a week), whatever the attempts.
type activeSpans []uint64

// activeMinutes returns the minutes from since, of the minutes of the
// range, in which rows (in time order) have at least one attempt.
func activeMinutes(rows []replay.Row, since time.Time, minutes int) activeSpans {
	out := make(activeSpans, (minutes+63)/64)
	base := since.UnixNano()
	for _, r := range rows {
		if int64(r.TS) < base {
			continue
		}
		if m := (int64(r.TS) - base) / int64(time.Minute); m < int64(minutes) {
			out[m/64] |= 1 << (m % 64)
		}
	}
	return out
}

// stretches calls fn with each stretch of active minutes [from, to), in
// time order.
func (a activeSpans) stretches(fn func(from, to int)) {
	from := -1
	for m := range 64 * len(a) {
		on := a[m/64]&(1<<(m%64)) != 0
		switch {
		case on && from < 0:
			from = m
		case !on && from >= 0:
			fn(from, m)
			from = -1
		}
	}
	if from >= 0 {
		fn(from, 64*len(a))
	}
}

// activeQuiet returns how much of the quiet segments (those without an
// incident) falls in the active minutes from since: the quiet time the
// endpoint's traffic saw.
func activeQuiet(since time.Time, active activeSpans, segs []Segment) time.Duration {
	var total time.Duration
	j := 0
	active.stretches(func(from, to int) {
		a := Interval{From: since.Add(time.Duration(from) * time.Minute), To: since.Add(time.Duration(to) * time.Minute)}
		for j < len(segs) && !segs[j].To.After(a.From) {
			j++
		}
		for k := j; k < len(segs) && segs[k].From.Before(a.To); k++ {
			if segs[k].Incident != nil {
				continue
			}
			lo, hi := segs[k].From, segs[k].To
			if lo.Before(a.From) {
				lo = a.From
			}
			if hi.After(a.To) {
				hi = a.To
			}
			total += hi.Sub(lo)
		}
	})
	return total
}

func overlaps(a, b Interval) bool { return a.From.Before(b.To) && b.From.Before(a.To) }

// RecordedOpen is an open the endpoint's live breaker recorded, with the
// window that tripped it.
type RecordedOpen struct {
	At           time.Time
	Observations int
	Failures     int
}

// surprising reports whether failures of n requests are an incident under
// a baseline failure rate: at least IncidentLevel failed and the Chernoff
// bound of seeing that many is below exp(-IncidentSurprise).
func surprising(n, failures int, baseline float64) bool {
	if n == 0 || float64(failures) < IncidentLevel*float64(n) {
		return false
	}
	p := min(max(baseline, 0.001), 0.999)
	q := float64(failures) / float64(n)
	kl := q * math.Log(q/p)
	if q < 1 {
		kl += (1 - q) * math.Log((1-q)/(1-p))
	}
	return float64(n)*kl >= IncidentSurprise
}

// findIncidents finds the runs of failing buckets whose failures are
// surprising under baseline, and adds each recorded open whose tripping
// window was surprising and that no run covers, from the failing stretch
// of rows around it. Each incident gets its recovery time.
func findIncidents(rows []replay.Row, baseline float64, opens []RecordedOpen) []Incident {
	var out []Incident
	// A run is a stretch of failing buckets, empty buckets skipped while
	// the gap stays within IncidentGap.
	var (
		runStart, runEnd = -1, -1 // row indexes, inclusive
		lastRow          = -1
	)
	flush := func() {
		if runStart < 0 {
			return
		}
		if in, ok := incidentOf(rows, runStart, runEnd, baseline); ok {
			out = append(out, in)
		}
		runStart, runEnd = -1, -1
	}
	bucket := int64(IncidentBucket)
	for i := 0; i < len(rows); {
		b := int64(rows[i].TS) / bucket
		j, f := i, 0
		for j < len(rows) && int64(rows[j].TS)/bucket == b {
			if rows[j].Outcome == breaker.OutcomeFailure {
				f++
			}
			j++
		}
		n := j - i
		failing := float64(f) >= IncidentLevel*float64(n)
		if lastRow >= 0 && rows[i].TS-rows[lastRow].TS > IncidentGap {
			flush()
		}
		if failing {
			if runStart < 0 {
				runStart = i
			}
			runEnd = j - 1
		} else {
			flush()
		}
		lastRow = j - 1
		i = j
	}
	flush()
	for _, o := range opens {
		if !surprising(o.Observations, o.Failures, baseline) {
			continue
		}
		at := time.Duration(o.At.UnixNano())
		if slices.ContainsFunc(out, func(in Incident) bool {
			return in.Contains(o.At) || (o.At.Sub(in.To) >= 0 && o.At.Sub(in.To) <= IncidentBucket)
		}) {
			continue
		}
		idx, _ := slices.BinarySearchFunc(rows, at, func(r replay.Row, t time.Duration) int { return cmpDur(r.TS, t) })
		// The failing stretch around the open: back while the suffix and
		// on while the prefix stay failing.
		from, to := idx, idx-1
		f, n := 0, 0
		for k := idx - 1; k >= 0; k-- {
			n++
			if rows[k].Outcome == breaker.OutcomeFailure {
				f++
			}
			if float64(f) < IncidentLevel*float64(n) {
				break
			}
			from = k
		}
		f, n = 0, 0
		for k := idx; k < len(rows); k++ {
			n++
			if rows[k].Outcome == breaker.OutcomeFailure {
				f++
			}
			if float64(f) < IncidentLevel*float64(n) {
				break
			}
			to = k
		}
		if to < from {
			continue
		}
		if in, ok := incidentOf(rows, from, to, -1); ok {
			in.Recorded = true
			out = append(out, in)
		}
	}
	slices.SortFunc(out, func(a, b Incident) int { return a.From.Compare(b.From) })
	return out
}

func cmpDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// incidentOf makes the incident of rows[from..to]: from its first failure
// that starts a failing suffix of the first bucket to its last failure. A
// negative baseline skips the surprise test (a recorded open already
// passed it).
func incidentOf(rows []replay.Row, from, to int, baseline float64) (Incident, bool) {
	n, f := to-from+1, 0
	for k := from; k <= to; k++ {
		if rows[k].Outcome == breaker.OutcomeFailure {
			f++
		}
	}
	if baseline >= 0 && !surprising(n, f, baseline) {
		return Incident{}, false
	}
	// Start at the earliest failure from which the rest of its bucket
	// stays failing: a background failure early in a bucket that the
	// outage starts halfway through does not move the start.
	bucket := int64(rows[from].TS) / int64(IncidentBucket)
	end := from
	for end <= to && int64(rows[end].TS)/int64(IncidentBucket) == bucket {
		end++
	}
	start := -1
	sf, sn := 0, 0
	for k := end - 1; k >= from; k-- {
		sn++
		if rows[k].Outcome == breaker.OutcomeFailure {
			sf++
			if float64(sf) >= IncidentLevel*float64(sn) {
				start = k
			}
		}
	}
	if start < 0 {
		start = from
	}
	last := to
	for last > start && rows[last].Outcome != breaker.OutcomeFailure {
		last--
	}
	in := Incident{
		Interval: Interval{From: rows[start].Time(), To: rows[last].Time().Add(time.Nanosecond)},
		Attempts: last - start + 1,
	}
	for k := start; k <= last; k++ {
		if rows[k].Outcome == breaker.OutcomeFailure {
			in.Failures++
		}
	}
	streak := 0
	for k := last + 1; k < len(rows); k++ {
		if rows[k].Outcome != breaker.OutcomeSuccess {
			streak = 0
			continue
		}
		if streak++; streak == RecoveryStreak {
			in.Recovery = rows[k-RecoveryStreak+1].Time().Sub(in.From)
			break
		}
	}
	return in, true
}

func counted(o breaker.Outcome) bool {
	return o == breaker.OutcomeSuccess || o == breaker.OutcomeFailure
}
