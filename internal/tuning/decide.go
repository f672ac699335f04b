package tuning

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/replay"
	"github.com/hookd/hookd/internal/trafficclass"
)

// Status is where a class's recommendation stands.
type Status string

// The statuses of a recommendation.
const (
	// StatusNone: no pass has run for the class.
	StatusNone Status = "none"
	// StatusKept: the last pass kept the current config.
	StatusKept Status = "kept"
	// StatusProposed: the last pass proposed a config, not yet applied.
	StatusProposed Status = "proposed"
	// StatusShadowing: the proposal runs in shadow beside the live config.
	StatusShadowing Status = "shadowing"
	// StatusApplied: the proposal is the class's config now.
	StatusApplied Status = "applied"
	// StatusRejected: an admin or the shadow dropped the proposal.
	StatusRejected Status = "rejected"
)

// Auto-tune modes of a class.
const (
	// ModeOff: no periodic pass, nothing ever changes.
	ModeOff = trafficclass.AutoTuneOff
	// ModeRecommend: passes propose; an admin applies.
	ModeRecommend = trafficclass.AutoTuneRecommend
	// ModeApply: proposals run in shadow, then apply when the shadow
	// agrees.
	ModeApply = trafficclass.AutoTuneApply
)

// Evidence minimums, per minute of the pass's range, so that a short range
// needs proportionally less.
const (
	// MinAttemptsPerMinute is the fewest attempts per minute of the range
	// (summed over the class's endpoints) a pass needs: 0.1 requests/s.
	MinAttemptsPerMinute = 6
	// MinQuietShare is the least quiet traffic a pass needs: the quiet
	// ranges of the class's endpoints together span at least this share
	// of the range.
	MinQuietShare = 0.5
	// Margin is the least relative improvement, on the first figure of the
	// ranking where a candidate differs from the current config, that
	// makes a proposal; smaller improvements are noise.
	Margin = 0.1
)

// Evidence is what a pass read, as a recommendation shows it.
type Evidence struct {
	Since            time.Time      `json:"since"`
	Until            time.Time      `json:"until"`
	Endpoints        int            `json:"endpoints"`
	Attempts         int            `json:"attempts"`
	Incidents        int            `json:"incidents"`
	QuietRPS         float64        `json:"quiet_rps"`
	HealthyErrorRate float64        `json:"healthy_error_rate"`
	RecoveryS        float64        `json:"recovery_s_median"`
	QuietS           float64        `json:"quiet_s"`
	PerEndpoint      []EndpointView `json:"per_endpoint"`
}

// MaxListedIncidents is how many of an endpoint's incidents a
// recommendation lists: the worst (most failures, the earlier of a tie),
// in time order. IncidentsTotal counts them all, so that a recommendation's
// size (stored, served and held by the pass) grows with the endpoints,
// never with the incidents.
const MaxListedIncidents = 20

// EndpointView is one endpoint's evidence as a recommendation shows it.
type EndpointView struct {
	EndpointID       string   `json:"endpoint_id"`
	Attempts         int      `json:"attempts"`
	QuietRPS         float64  `json:"quiet_rps"`
	HealthyErrorRate *float64 `json:"healthy_error_rate"`
	// Incidents are at most MaxListedIncidents of its incidents.
	Incidents []IncidentView `json:"incidents"`
	// IncidentsTotal is how many incidents it had.
	IncidentsTotal int `json:"incidents_total"`
}

// IncidentView is one incident as a recommendation shows it.
type IncidentView struct {
	From      time.Time `json:"from"`
	To        time.Time `json:"to"`
	Attempts  int       `json:"attempts"`
	Failures  int       `json:"failures"`
	Recorded  bool      `json:"recorded"`
	RecoveryS float64   `json:"recovery_s"`
}

// View returns the evidence as a recommendation shows it.
func (ce ClassEvidence) View(quiet time.Duration) Evidence {
	ev := Evidence{Since: ce.Since, Until: ce.Until, Endpoints: len(ce.Endpoints), Attempts: ce.Attempts, Incidents: ce.Incidents,
		QuietRPS: round(ce.QuietRPS, 6), HealthyErrorRate: round(ce.HealthyErrorRate, 6), RecoveryS: ce.Recovery.Seconds(),
		QuietS: quiet.Seconds(), PerEndpoint: []EndpointView{}}
	for _, e := range ce.Endpoints {
		ev.PerEndpoint = append(ev.PerEndpoint, e.view())
	}
	return ev
}

// upgrade brings evidence stored before the endpoints counted their
// incidents (each listed every one) to the shape shown now: the count of
// all and at most MaxListedIncidents listed.
func (ev *Evidence) upgrade() {
	for i := range ev.PerEndpoint {
		e := &ev.PerEndpoint[i]
		if e.IncidentsTotal == 0 {
			e.IncidentsTotal = len(e.Incidents)
		}
		e.Incidents = worst(e.Incidents, MaxListedIncidents, func(in IncidentView) int { return in.Failures })
	}
}

// StoredEvidence returns the evidence of a change in a class's history
// (store.Tuning.Evidence) as the API shows it now: a change applied before
// the endpoints counted their incidents listed every one. Evidence that
// does not decode is returned as it is.
func StoredEvidence(raw json.RawMessage) json.RawMessage {
	var ev *Evidence
	if err := json.Unmarshal(raw, &ev); err != nil || ev == nil {
		return raw
	}
	ev.upgrade()
	out, err := json.Marshal(ev)
	if err != nil {
		return raw
	}
	return out
}

// view returns the endpoint's evidence as a recommendation shows it.
func (e EndpointEvidence) view() EndpointView {
	v := EndpointView{EndpointID: e.EndpointID, Attempts: e.Attempts, QuietRPS: round(e.QuietRPS, 6), Incidents: []IncidentView{},
		IncidentsTotal: e.IncidentCount()}
	if !math.IsNaN(e.HealthyErrorRate) {
		h := round(e.HealthyErrorRate, 6)
		v.HealthyErrorRate = &h
	}
	for _, in := range Worst(e.Incidents, MaxListedIncidents) {
		v.Incidents = append(v.Incidents, IncidentView{From: in.From, To: in.To, Attempts: in.Attempts, Failures: in.Failures,
			Recorded: in.Recorded, RecoveryS: in.Recovery.Seconds()})
	}
	return v
}

// Worst returns the n incidents of incidents (in time order) with the
// most failures, the earlier of a tie, in time order; all of them when
// there are no more than n.
func Worst(incidents []Incident, n int) []Incident {
	return worst(incidents, n, func(in Incident) int { return in.Failures })
}

// worst returns the n of list (in time order) with the most failures,
// the earlier of a tie, in time order; list itself when it has no more.
func worst[T any](list []T, n int, failures func(T) int) []T {
	if len(list) <= n {
		return list
	}
	idx := make([]int, len(list))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(failures(list[b]), failures(list[a])) })
	idx = idx[:n]
	slices.Sort(idx)
	out := make([]T, n)
	for i, k := range idx {
		out[i] = list[k]
	}
	return out
}

func round(x float64, digits int) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// Decision is what a pass concludes.
type Decision struct {
	// Status is StatusKept or StatusProposed.
	Status Status
	// Proposed is the config proposed; nil when kept.
	Proposed *breaker.Config
	// Current and Best are the figures of the current config and of the
	// best candidate; nil when the pass did not replay (too little
	// evidence).
	Current, Best *replay.Figures
	// Reasons say why, in words.
	Reasons []string
}

// EnoughEvidence reports whether a class's evidence over its range
// suffices, and why not: the endpoints whose log counts (at least
// MinEndpointAttempts attempts each) together make MinAttemptsPerMinute,
// and quiet, the quiet time with traffic of those endpoints (weighted by
// their attempts), spans MinQuietShare of the range.
func EnoughEvidence(ev ClassEvidence, quiet time.Duration) (bool, []string) {
	minutes := ev.Until.Sub(ev.Since).Minutes()
	var why []string
	if need := int(math.Ceil(minutes * MinAttemptsPerMinute)); ev.Counted < need {
		left := ""
		if ev.Sparse > 0 {
			left = fmt.Sprintf(" (%d endpoints of fewer than %d attempts each left out)", ev.Sparse, MinEndpointAttempts)
		}
		why = append(why, fmt.Sprintf("too little evidence: %d attempts in the range%s, fewer than the %d needed (%d a minute)", ev.Counted, left, need, MinAttemptsPerMinute))
	}
	if need := time.Duration(float64(ev.Until.Sub(ev.Since)) * MinQuietShare); quiet < need {
		why = append(why, fmt.Sprintf("too little evidence: %s of quiet traffic, less than the %s needed (%.0f%% of the range)",
			trafficclass.FormatDuration(quiet.Round(time.Second)), trafficclass.FormatDuration(need.Round(time.Second)), MinQuietShare*100))
	}
	return len(why) == 0, why
}

// DetectSlack is how much later than the current config a proposal may
// detect, in replay, an incident the current config detects: one bucket of
// the incident finder, the precision an incident's start is known to.
const DetectSlack = IncidentBucket

// Decide picks from a pass's ranked candidates (replay.Rank's order) the
// first one, ranked before the current config, that detects every incident
// the current config detects no later than DetectSlack after it (and at
// least one incident when the evidence has any), and that beats the
// current config by Margin on quiet-time opens, on the healthy requests
// they blocked or, with at least MinDetectionIncidents incidents, on
// detection (improvement); else it keeps the current config.
func Decide(current breaker.Config, ranked []replay.Candidate) Decision {
	return DecideWith(current, ranked, History{})
}

// UndoPasses is how many intervals back a change counts as recent: a
// proposal that undoes a change applied that recently needs twice the
// margin, so that two configs do not take turns.
const UndoPasses = 7

// History is what a class's past says about a pass's proposals.
type History struct {
	// Rejected are the proposals rejected (by an admin or a shadow) from
	// the current config: none is proposed again while the config is the
	// same.
	Rejected []breaker.Config
	// Recent are the changes applied to the class within the last
	// UndoPasses intervals.
	Recent []Change
}

// Change is one applied change of a class's config.
type Change struct{ From, To breaker.Config }

// DecideWith is Decide with the class's history: a rejected proposal is
// skipped, and one that undoes a recent change (Undoes) must beat the
// current config by twice the margin.
func DecideWith(current breaker.Config, ranked []replay.Candidate, h History) Decision {
	return DecideCompared(current, ranked, CompareIncidents(current, ranked), h)
}

// Loss is what a config loses of the current config's detection, incident
// by incident: the incidents the current config detects that it misses,
// and those it detects more than DetectSlack later.
type Loss struct{ Missed, Later int }

// Add compares, incident by incident, a config's detections (by, as in
// replay.Tally.ByIncident) with the current config's over the same
// incidents (cur), and adds what it loses; by and cur line up.
func (l *Loss) Add(cur, by []time.Duration) {
	for i, at := range cur {
		switch {
		case at == replay.Undetected:
		case by[i] == replay.Undetected:
			l.Missed++
		case by[i] > at+DetectSlack:
			l.Later++
		}
	}
}

// CompareIncidents returns the losses of the ranked candidates whose
// detections, incident by incident (replay.Candidate.ByIncident), line up
// with the current config's: what DecideCompared reads.
func CompareIncidents(current breaker.Config, ranked []replay.Candidate) map[breaker.Config]Loss {
	i := slices.IndexFunc(ranked, func(c replay.Candidate) bool { return c.Config == current })
	if i < 0 {
		return nil
	}
	cur := ranked[i]
	if len(cur.ByIncident) != cur.Figures.Incidents {
		return nil
	}
	out := map[breaker.Config]Loss{}
	for _, c := range ranked {
		if len(c.ByIncident) != len(cur.ByIncident) {
			continue
		}
		var l Loss
		l.Add(cur.ByIncident, c.ByIncident)
		out[c.Config] = l
	}
	return out
}

// DecideCompared is DecideWith with the candidates' losses against the
// current config already counted (losses, by config; Loss.Add), as a pass
// counts them endpoint by endpoint without keeping every incident's
// detections: a candidate without one is judged on the sums (the
// incidents detected, the slowest detection).
func DecideCompared(current breaker.Config, ranked []replay.Candidate, losses map[breaker.Config]Loss, h History) Decision {
	var cur *replay.Candidate
	for i := range ranked {
		if ranked[i].Config == current {
			cur = &ranked[i]
			break
		}
	}
	best := ranked[0]
	d := Decision{Status: StatusKept, Best: &best.Figures}
	if cur == nil {
		d.Reasons = []string{"the current config was not replayed"}
		return d
	}
	d.Current = &cur.Figures
	if best.Config == current {
		d.Reasons = []string{"the current config (" + describe(current) + ") ranks first of the grid"}
		return d
	}
	var why []string
	note := func(format string, args ...any) {
		if len(why) < 3 {
			why = append(why, fmt.Sprintf(format, args...))
		}
	}
	for _, c := range ranked {
		if c.Config == current {
			break
		}
		if slices.Contains(h.Rejected, c.Config) {
			note("%s was rejected before from the same config and is not proposed again (change the class or its bounds to tune it again)", describe(c.Config))
			continue
		}
		loss, compared := losses[c.Config]
		if miss := detectionLoss(*cur, c, loss, compared); miss != "" {
			note("the best candidate (%s) %s", describe(c.Config), miss)
			continue
		}
		margin, undo := Margin, Undoes(h.Recent, current, c.Config)
		if undo {
			margin *= 2
		}
		name, by, ok := improvement(cur.Figures, c.Figures, margin)
		if ok && detectionDriven(name) && cur.Figures.Incidents < MinDetectionIncidents {
			note("the best candidate that detects what the current config detects (%s) beats it on %s by %s, but %d incidents are fewer than the %d a change for detection needs",
				describe(c.Config), name, by, cur.Figures.Incidents, MinDetectionIncidents)
			continue
		}
		if !ok {
			extra := ""
			if undo {
				extra = ", doubled since it undoes a recent change"
			}
			note("the best candidate that detects what the current config detects (%s) beats it on %s by %s, less than the %.0f%% margin%s",
				describe(c.Config), name, by, margin*100, extra)
			continue
		}
		p := c.Config
		f := c.Figures
		d.Status, d.Proposed, d.Best = StatusProposed, &p, &f
		d.Reasons = []string{fmt.Sprintf("%s beats the current config (%s) on %s by %s, and detects every incident it detects", describe(p), describe(current), name, by)}
		if undo {
			d.Reasons = append(d.Reasons, fmt.Sprintf("it undoes a change applied within the last %d passes, and beats the current config by twice the margin", UndoPasses))
		}
		return d
	}
	if len(why) == 0 {
		why = []string{"no candidate ranks before the current config"}
	}
	d.Reasons = why
	return d
}

// Undoes reports whether moving from current to next takes back a setting
// one of the recent changes made: the trip back to what it was, or a
// threshold, window, minimum or open duration moved back the way it came.
func Undoes(recent []Change, current, next breaker.Config) bool {
	back := func(from, to, cur, nxt float64) bool {
		return from != to && nxt != cur && (from-to > 0) == (nxt-cur > 0)
	}
	for _, ch := range recent {
		if ch.From.Trip != ch.To.Trip && next.Trip == ch.From.Trip && current.Trip != next.Trip {
			return true
		}
		if back(ch.From.FailureRateThreshold, ch.To.FailureRateThreshold, current.FailureRateThreshold, next.FailureRateThreshold) ||
			back(float64(ch.From.Window), float64(ch.To.Window), float64(current.Window), float64(next.Window)) ||
			back(float64(ch.From.MinThroughput), float64(ch.To.MinThroughput), float64(current.MinThroughput), float64(next.MinThroughput)) ||
			back(float64(ch.From.OpenDuration), float64(ch.To.OpenDuration), float64(current.OpenDuration), float64(next.OpenDuration)) {
			return true
		}
	}
	return false
}

// MinDetectionIncidents is the fewest incidents in the evidence a change
// made for detection (more incidents detected, a faster median) needs:
// the detection of one or two incidents is one draw of the noise.
const MinDetectionIncidents = 3

// detectionDriven reports whether an improvement named so is one of
// detection.
func detectionDriven(name string) bool {
	return name == "incidents detected" || name == "median detection"
}

// detectionLoss says what c loses of cur's detection, in words, or "" when
// it detects every incident cur detects, none more than DetectSlack later,
// and at least one when there are incidents: from its loss compared
// incident by incident, or without it, from the sums.
func detectionLoss(cur, c replay.Candidate, loss Loss, compared bool) string {
	if cur.Figures.Incidents > 0 && c.Figures.IncidentsDetected == 0 {
		return fmt.Sprintf("detects none of the %d incidents", cur.Figures.Incidents)
	}
	missed, later := loss.Missed, loss.Later
	if !compared {
		// Without the incidents one by one, the sums.
		missed, later = max(cur.Figures.IncidentsDetected-c.Figures.IncidentsDetected, 0), 0
		if missed == 0 && c.Figures.DetectMax > cur.Figures.DetectMax+DetectSlack {
			later = 1
		}
	}
	switch {
	case missed > 0:
		return fmt.Sprintf("misses %d of the %d incidents the current config detects", missed, cur.Figures.IncidentsDetected)
	case later > 0:
		return fmt.Sprintf("detects %d of the incidents the current config detects more than %s later", later, trafficclass.FormatDuration(DetectSlack))
	}
	return ""
}

// improvement names the figure on which best beats cur, by how much, and
// whether that passes margin: fewer quiet-time opens (by margin of the
// current count and at least one); or, with no more quiet-time opens,
// fewer healthy requests blocked (by margin and at least one), more
// incidents detected, or a median detection faster by margin. A smaller
// difference is noise.
func improvement(cur, best replay.Figures, margin float64) (string, string, bool) {
	by := func(gain, b, c float64, unit string) string {
		return fmt.Sprintf("%g%s (%g against %g)", math.Round(gain*1000)/1000, unit, math.Round(b*1000)/1000, math.Round(c*1000)/1000)
	}
	counts := func(c, b int) bool { return c-b >= 1 && float64(c-b) >= margin*float64(c) }
	if gain := cur.OpensQuiet - best.OpensQuiet; gain != 0 {
		return "quiet-time opens", by(float64(gain), float64(best.OpensQuiet), float64(cur.OpensQuiet), ""), counts(cur.OpensQuiet, best.OpensQuiet)
	}
	if counts(cur.BlockedHealthy, best.BlockedHealthy) {
		return "healthy requests blocked", by(float64(cur.BlockedHealthy-best.BlockedHealthy), float64(best.BlockedHealthy), float64(cur.BlockedHealthy), ""), true
	}
	if best.BlockedHealthy > cur.BlockedHealthy {
		return "healthy requests blocked", by(float64(cur.BlockedHealthy-best.BlockedHealthy), float64(best.BlockedHealthy), float64(cur.BlockedHealthy), ""), false
	}
	if best.IncidentsDetected > cur.IncidentsDetected {
		return "incidents detected", by(float64(best.IncidentsDetected-cur.IncidentsDetected), float64(best.IncidentsDetected), float64(cur.IncidentsDetected), ""), true
	}
	if best.IncidentsDetected > 0 && cur.IncidentsDetected > 0 {
		gain := (cur.DetectMedian - best.DetectMedian).Seconds()
		return "median detection", by(gain, best.DetectMedian.Seconds(), cur.DetectMedian.Seconds(), " s"), gain > 0 && gain >= margin*cur.DetectMedian.Seconds()
	}
	return "nothing", "0", false
}

// OpenDurationSlack is how far apart two open durations may be, relative
// to the longer, for proposals to be equivalent: the median recovery that
// sets one moves as incidents come and go.
const OpenDurationSlack = 0.25

// Equivalent reports whether two proposals are the same but for their open
// durations, within OpenDurationSlack of each other (and the max open
// durations that follow them): a shadow of one stands for the other.
func Equivalent(a, b breaker.Config) bool {
	longer := max(a.OpenDuration, b.OpenDuration)
	if float64(max(a.OpenDuration-b.OpenDuration, b.OpenDuration-a.OpenDuration)) > OpenDurationSlack*float64(longer) {
		return false
	}
	a.OpenDuration, a.MaxOpenDuration = b.OpenDuration, b.MaxOpenDuration
	return a == b
}
