package tuning

import (
	"fmt"
	"math"
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

// EndpointView is one endpoint's evidence as a recommendation shows it.
type EndpointView struct {
	EndpointID       string         `json:"endpoint_id"`
	Attempts         int            `json:"attempts"`
	QuietRPS         float64        `json:"quiet_rps"`
	HealthyErrorRate *float64       `json:"healthy_error_rate"`
	Incidents        []IncidentView `json:"incidents"`
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
		v := EndpointView{EndpointID: e.EndpointID, Attempts: e.Attempts, QuietRPS: round(e.QuietRPS, 6), Incidents: []IncidentView{}}
		if !math.IsNaN(e.HealthyErrorRate) {
			h := round(e.HealthyErrorRate, 6)
			v.HealthyErrorRate = &h
		}
		for _, in := range e.Incidents {
			v.Incidents = append(v.Incidents, IncidentView{From: in.From, To: in.To, Attempts: in.Attempts, Failures: in.Failures,
				Recorded: in.Recorded, RecoveryS: in.Recovery.Seconds()})
		}
		ev.PerEndpoint = append(ev.PerEndpoint, v)
	}
	return ev
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
// (quiet is the time its quiet ranges span) suffices, and why not.
func EnoughEvidence(ev ClassEvidence, quiet time.Duration) (bool, []string) {
	minutes := ev.Until.Sub(ev.Since).Minutes()
	var why []string
	if need := int(math.Ceil(minutes * MinAttemptsPerMinute)); ev.Attempts < need {
		why = append(why, fmt.Sprintf("too little evidence: %d attempts in the range, fewer than the %d needed (%d a minute)", ev.Attempts, need, MinAttemptsPerMinute))
	}
	if need := time.Duration(float64(ev.Until.Sub(ev.Since)) * MinQuietShare); quiet < need {
		why = append(why, fmt.Sprintf("too little evidence: %s of quiet traffic, less than the %s needed (%.0f%% of the range)",
			trafficclass.FormatDuration(quiet.Round(time.Second)), trafficclass.FormatDuration(need.Round(time.Second)), MinQuietShare*100))
	}
	return len(why) == 0, why
}

// Decide picks from a pass's ranked candidates: the best one when it beats
// the current config by Margin on the first figure of the ranking where
// they differ, else the current config.
func Decide(current breaker.Config, ranked []replay.Candidate) Decision {
	var cur *replay.Figures
	for i := range ranked {
		if ranked[i].Config == current {
			cur = &ranked[i].Figures
			break
		}
	}
	best := ranked[0]
	d := Decision{Status: StatusKept, Current: cur, Best: &best.Figures}
	if cur == nil {
		d.Reasons = []string{"the current config was not replayed"}
		return d
	}
	if best.Config == current {
		d.Reasons = []string{"the current config (" + describe(current) + ") ranks first of the grid"}
		return d
	}
	name, by, ok := improvement(*cur, best.Figures)
	if !ok {
		d.Reasons = []string{fmt.Sprintf("the best candidate (%s) beats the current config on %s by %s, less than the %.0f%% margin",
			describe(best.Config), name, by, Margin*100)}
		return d
	}
	c := best.Config
	d.Status, d.Proposed = StatusProposed, &c
	d.Reasons = []string{fmt.Sprintf("%s beats the current config (%s) on %s by %s", describe(c), describe(current), name, by)}
	return d
}

// improvement names the first figure of the ranking where best differs
// from cur, how much better it is, and whether that passes the margin.
func improvement(cur, best replay.Figures) (string, string, bool) {
	type key struct {
		name      string
		cur, best float64
		higher    bool // more is better
		unit      string
	}
	keys := []key{
		{"quiet-time opens", float64(cur.OpensQuiet), float64(best.OpensQuiet), false, ""},
		{"healthy requests blocked", float64(cur.BlockedHealthy), float64(best.BlockedHealthy), false, ""},
		{"incidents detected", float64(cur.IncidentsDetected), float64(best.IncidentsDetected), true, ""},
		{"median detection", cur.DetectMedian.Seconds(), best.DetectMedian.Seconds(), false, " s"},
		{"slowest detection", cur.DetectMax.Seconds(), best.DetectMax.Seconds(), false, " s"},
		{"failures sent in incidents", float64(cur.Wasted), float64(best.Wasted), false, ""},
		{"requests sent in incidents", float64(cur.Sent), float64(best.Sent), false, ""},
	}
	for _, k := range keys {
		if k.cur == k.best {
			continue
		}
		gain := k.cur - k.best
		if k.higher {
			gain = -gain
		}
		by := fmt.Sprintf("%g%s (%g against %g)", math.Round(gain*1000)/1000, k.unit, math.Round(k.best*1000)/1000, math.Round(k.cur*1000)/1000)
		// A count improves by at least one; a detection only counts from
		// a tenth of the current one on.
		return k.name, by, gain > 0 && gain >= Margin*math.Abs(k.cur)
	}
	return "nothing", "0", false
}
