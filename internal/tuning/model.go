package tuning

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/replay"
	"github.com/hookd/hookd/internal/trafficclass"
)

// ClassConfig is a breaker config under a traffic class's JSON names.
type ClassConfig breaker.Config

type configJSON struct {
	Trip                 string  `json:"trip"`
	FailureRateThreshold float64 `json:"failure_rate_threshold"`
	Window               string  `json:"window"`
	MinThroughput        int     `json:"min_throughput"`
	ConsecutiveFailures  int     `json:"consecutive_failures"`
	OpenDuration         string  `json:"open_duration"`
	OpenJitter           float64 `json:"open_jitter"`
	OpenBackoff          float64 `json:"open_backoff"`
	MaxOpenDuration      string  `json:"max_open_duration"`
	HalfOpenTrials       int     `json:"half_open_trials"`
	HalfOpenConcurrency  int     `json:"half_open_concurrency"`
}

// MarshalJSON encodes c with durations as Go duration strings.
func (c ClassConfig) MarshalJSON() ([]byte, error) {
	return json.Marshal(configJSON{
		Trip: string(c.Trip), FailureRateThreshold: c.FailureRateThreshold, Window: trafficclass.FormatDuration(c.Window),
		MinThroughput: c.MinThroughput, ConsecutiveFailures: c.ConsecutiveFailures,
		OpenDuration: trafficclass.FormatDuration(c.OpenDuration), OpenJitter: c.OpenJitter, OpenBackoff: c.OpenBackoff,
		MaxOpenDuration: trafficclass.FormatDuration(c.MaxOpenDuration), HalfOpenTrials: c.HalfOpenTrials,
		HalfOpenConcurrency: c.HalfOpenConcurrency,
	})
}

// UnmarshalJSON decodes what MarshalJSON encodes.
func (c *ClassConfig) UnmarshalJSON(data []byte) error {
	var w configJSON
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	var durs [3]time.Duration
	for i, s := range []string{w.Window, w.OpenDuration, w.MaxOpenDuration} {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("decode config: %w", err)
		}
		durs[i] = d
	}
	*c = ClassConfig{Trip: breaker.Trip(w.Trip), FailureRateThreshold: w.FailureRateThreshold, Window: durs[0],
		MinThroughput: w.MinThroughput, ConsecutiveFailures: w.ConsecutiveFailures, OpenDuration: durs[1],
		OpenJitter: w.OpenJitter, OpenBackoff: w.OpenBackoff, MaxOpenDuration: durs[2],
		HalfOpenTrials: w.HalfOpenTrials, HalfOpenConcurrency: w.HalfOpenConcurrency}
	return nil
}

// Figures are a config's replayed figures as a recommendation shows them.
type Figures struct {
	OpensQuiet        int      `json:"opens_quiet"`
	BlockedHealthy    int      `json:"blocked_healthy"`
	Wasted            int      `json:"wasted"`
	DetectSMedian     *float64 `json:"detect_s_median"`
	DetectSMax        *float64 `json:"detect_s_max"`
	IncidentsDetected int      `json:"incidents_detected"`
	Incidents         int      `json:"incidents"`
	Sent              int      `json:"sent"`
}

// NewFigures returns f as a recommendation shows it; the detection times
// are null when no incident was detected.
func NewFigures(f replay.Figures) *Figures {
	out := &Figures{OpensQuiet: f.OpensQuiet, BlockedHealthy: f.BlockedHealthy, Wasted: f.Wasted,
		IncidentsDetected: f.IncidentsDetected, Incidents: f.Incidents, Sent: f.Sent}
	if f.IncidentsDetected > 0 {
		m, x := round(f.DetectMedian.Seconds(), 3), round(f.DetectMax.Seconds(), 3)
		out.DetectSMedian, out.DetectSMax = &m, &x
	}
	return out
}

// FiguresPair holds the figures of the current and the proposed config.
type FiguresPair struct {
	Current  *Figures `json:"current"`
	Proposed *Figures `json:"proposed"`
}

// Recommendation is a class's latest recommendation, as stored and as
// GET /v1/traffic-classes/{name}/recommendation shows it.
type Recommendation struct {
	Class    string       `json:"class"`
	Status   Status       `json:"status"`
	Mode     string       `json:"auto_tune"`
	Current  *ClassConfig `json:"current"`
	Proposed *ClassConfig `json:"proposed"`
	Figures  FiguresPair  `json:"figures"`
	Evidence *Evidence    `json:"evidence"`
	Reasons  []string     `json:"reasons"`
	// Configs is how many configs the pass ranked.
	Configs int `json:"configs_ranked"`
	// RanAt is when the pass ran; nil for status none.
	RanAt  *time.Time `json:"ran_at"`
	Shadow *Shadow    `json:"shadow"`
	// RejectedBefore are the proposals rejected (by an admin or a shadow)
	// from a config, carried from pass to pass so that none comes back
	// unchanged; stored, not shown.
	RejectedBefore []Rejection `json:"-"`
}

// Rejection is a proposal rejected from a current config.
type Rejection struct {
	Current  ClassConfig `json:"current"`
	Proposed ClassConfig `json:"proposed"`
}

// None is the recommendation of a class no pass has run for.
func None(c trafficclass.Class) Recommendation {
	cur := ClassConfig(c.Breaker)
	return Recommendation{Class: c.Name, Status: StatusNone, Mode: c.AutoTune, Current: &cur, Reasons: []string{"no tuning pass has run for the class"}}
}

// Shadow is a proposal's run beside the live config: its range, the
// would-be opens of its shadow breakers and, once judged, both configs'
// live figures.
type Shadow struct {
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// ReadUntil is how far the shadow breakers have read the log.
	ReadUntil time.Time `json:"read_until"`
	// Attempts is how many logged outcomes fed them.
	Attempts int `json:"attempts"`
	// Opens are the would-be trips of the shadow breakers.
	Opens []ShadowOpen `json:"opens"`
	// Live and Proposed are the judged figures, once the shadow ended.
	Live     *LiveFigures `json:"live"`
	Proposed *LiveFigures `json:"proposed"`
}

// ShadowOpen is one would-be trip of a shadow breaker.
type ShadowOpen struct {
	EndpointID string    `json:"endpoint_id"`
	At         time.Time `json:"at"`
}

// LiveFigures are what a config did on live traffic during a shadow.
type LiveFigures struct {
	OpensQuiet        int      `json:"opens_quiet"`
	Incidents         int      `json:"incidents"`
	IncidentsDetected int      `json:"incidents_detected"`
	DetectSMedian     *float64 `json:"detect_s_median"`
	DetectSMax        *float64 `json:"detect_s_max"`
}
