package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/trafficclass"
)

// configJSON is a breaker config under the JSON names of a traffic class.
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

func newConfigJSON(c breaker.Config) configJSON {
	return configJSON{
		Trip:                 string(c.Trip),
		FailureRateThreshold: c.FailureRateThreshold,
		Window:               trafficclass.FormatDuration(c.Window),
		MinThroughput:        c.MinThroughput,
		ConsecutiveFailures:  c.ConsecutiveFailures,
		OpenDuration:         trafficclass.FormatDuration(c.OpenDuration),
		OpenJitter:           c.OpenJitter,
		OpenBackoff:          c.OpenBackoff,
		MaxOpenDuration:      trafficclass.FormatDuration(c.MaxOpenDuration),
		HalfOpenTrials:       c.HalfOpenTrials,
		HalfOpenConcurrency:  c.HalfOpenConcurrency,
	}
}

// statsJSON is the JSON form of Stats, in field order.
type statsJSON struct {
	Requests       int      `json:"requests"`
	Sent           int      `json:"sent"`
	Rejected       int      `json:"rejected"`
	BlockedHealthy int      `json:"blocked_healthy"`
	Wasted         int      `json:"wasted"`
	Opens          int      `json:"opens"`
	FirstOpenS     *float64 `json:"first_open_s"`
	TimeOpenS      float64  `json:"time_open_s"`
	Suppressed     int      `json:"suppressed"`
}

// MarshalJSON encodes s with snake_case names, durations as seconds, and
// first_open_s null when nothing opened.
func (s Stats) MarshalJSON() ([]byte, error) {
	w := statsJSON{
		Requests: s.Requests, Sent: s.Sent, Rejected: s.Rejected, BlockedHealthy: s.BlockedHealthy,
		Wasted: s.Wasted, Opens: s.Opens, TimeOpenS: seconds(s.TimeOpen), Suppressed: s.Suppressed,
	}
	if s.FirstOpen != nil {
		f := seconds(*s.FirstOpen)
		w.FirstOpenS = &f
	}
	return json.Marshal(w)
}

// seconds returns d in seconds rounded to the microsecond, so that 4.86 s
// prints as 4.86.
func seconds(d time.Duration) float64 {
	return math.Round(d.Seconds()*1e6) / 1e6
}

// eventJSON is the JSON form of an Event.
type eventJSON struct {
	TS           float64  `json:"t_s"`
	Row          int      `json:"row"`
	Phase        string   `json:"phase,omitempty"`
	Outcome      string   `json:"outcome"`
	From         string   `json:"from"`
	To           string   `json:"to"`
	Reason       string   `json:"reason"`
	FailureRate  float64  `json:"failure_rate"`
	Observations int      `json:"observations"`
	Failures     int      `json:"failures"`
	Consecutive  int      `json:"consecutive"`
	OpenUntilS   *float64 `json:"open_until_s"`
	Became       string   `json:"became"`
}

func newEventJSON(e Event) eventJSON {
	t := e.Transition
	w := eventJSON{
		TS: seconds(e.Offset), Row: e.Index + 1, Phase: e.Row.Phase, Outcome: e.Row.Outcome.String(),
		From: t.From.String(), To: t.To.String(), Reason: t.Reason,
		FailureRate: math.Round(t.FailureRate*1e6) / 1e6, Observations: t.Observations, Failures: t.Failures,
		Consecutive: t.Consecutive, Became: e.Became,
	}
	if !t.OpenUntil.IsZero() {
		until := seconds(e.Offset + t.OpenUntil.Sub(t.At))
		w.OpenUntilS = &until
	}
	return w
}

// MarshalJSON encodes r as {"config": ..., "total": ..., "phases": {...}}:
// the config under a traffic class's JSON names, and the phases as one
// object whose members keep their first-appearance order.
func (r Report) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString(`{"config":`)
	if err := appendJSON(&buf, newConfigJSON(r.Config)); err != nil {
		return nil, err
	}
	buf.WriteString(`,"total":`)
	if err := appendJSON(&buf, r.Total); err != nil {
		return nil, err
	}
	buf.WriteString(`,"phases":{`)
	for i, p := range r.Phases {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := appendJSON(&buf, p.Name); err != nil {
			return nil, err
		}
		buf.WriteByte(':')
		if err := appendJSON(&buf, p.Stats); err != nil {
			return nil, err
		}
	}
	buf.WriteString(`}}`)
	return buf.Bytes(), nil
}

// WriteJSON writes r as one indented JSON object, as Report.MarshalJSON
// encodes it, with an "events" array last when events is not nil.
func WriteJSON(w io.Writer, r Report, events []Event) error {
	data, err := r.MarshalJSON()
	if err != nil {
		return err
	}
	if events != nil {
		list := make([]eventJSON, len(events))
		for i, e := range events {
			list[i] = newEventJSON(e)
		}
		buf := bytes.NewBuffer(data[:len(data)-1])
		buf.WriteString(`,"events":`)
		if err := appendJSON(buf, list); err != nil {
			return err
		}
		buf.WriteByte('}')
		data = buf.Bytes()
	}
	return writeIndented(w, data)
}

func appendJSON(buf *bytes.Buffer, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	buf.Write(data)
	return nil
}

func writeIndented(w io.Writer, data []byte) error {
	var out bytes.Buffer
	if err := json.Indent(&out, data, "", "  "); err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	out.WriteByte('\n')
	if _, err := w.Write(out.Bytes()); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// DescribeConfig returns c on one line as name=value pairs under the JSON
// names of a traffic class.
func DescribeConfig(c breaker.Config) string {
	j := newConfigJSON(c)
	parts := []string{"trip=" + j.Trip}
	if c.Trip == breaker.TripRate {
		parts = append(parts,
			"failure_rate_threshold="+strconv.FormatFloat(j.FailureRateThreshold, 'g', -1, 64),
			"window="+j.Window,
			"min_throughput="+strconv.Itoa(j.MinThroughput))
	} else {
		parts = append(parts, "consecutive_failures="+strconv.Itoa(j.ConsecutiveFailures))
	}
	parts = append(parts,
		"open_duration="+j.OpenDuration,
		"open_jitter="+strconv.FormatFloat(j.OpenJitter, 'g', -1, 64),
		"open_backoff="+strconv.FormatFloat(j.OpenBackoff, 'g', -1, 64),
		"max_open_duration="+j.MaxOpenDuration,
		"half_open_trials="+strconv.Itoa(j.HalfOpenTrials),
		"half_open_concurrency="+strconv.Itoa(j.HalfOpenConcurrency))
	return strings.Join(parts, " ")
}

// WriteText writes r as a table: one line per phase in first-appearance
// order, then the total.
func WriteText(w io.Writer, r Report, seed uint64) error {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "breaker: %s (seed %d)\n\n", DescribeConfig(r.Config), seed)
	t := table{header: []string{"phase", "requests", "sent", "rejected", "blocked_healthy", "wasted", "opens", "first_open_s", "time_open_s", "suppressed"}}
	row := func(name string, s Stats) {
		first := "-"
		if s.FirstOpen != nil {
			first = fmt.Sprintf("%.3f", s.FirstOpen.Seconds())
		}
		t.add(name, strconv.Itoa(s.Requests), strconv.Itoa(s.Sent), strconv.Itoa(s.Rejected),
			strconv.Itoa(s.BlockedHealthy), strconv.Itoa(s.Wasted), strconv.Itoa(s.Opens),
			first, fmt.Sprintf("%.3f", s.TimeOpen.Seconds()), strconv.Itoa(s.Suppressed))
	}
	for _, p := range r.Phases {
		name := p.Name
		if name == "" {
			name = "(none)"
		}
		row(name, p.Stats)
	}
	row("total", r.Total)
	t.write(&buf)
	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// FormatEvent returns e as one line of a transcript: the time since the first row, the row, its outcome, the
// transition and its reason, the window at that moment, and what the
// request became. When abs is set the row's instant follows the offset.
func FormatEvent(e Event, abs bool) string {
	t := e.Transition
	at := "t=" + fmt.Sprintf("%.3fs", e.Offset.Seconds())
	if abs {
		at += " (" + e.Row.Time().Format(time.RFC3339Nano) + ")"
	}
	became := e.Became
	if !t.OpenUntil.IsZero() {
		became += fmt.Sprintf(", open until t=%.3fs", (e.Offset + t.OpenUntil.Sub(t.At)).Seconds())
	}
	window := fmt.Sprintf("window %5.1f%% of %d", 100*t.FailureRate, t.Observations)
	if t.Reason == breaker.ReasonConsecutiveFailures {
		window = fmt.Sprintf("%d consecutive failures", t.Consecutive)
	}
	return fmt.Sprintf("%-10s row %-7d %-12s %-9s -> %-9s  %-20s  %-22s  %s",
		at, e.Index+1, e.Row.Outcome, t.From, t.To, t.Reason, window, became)
}

// table lays out rows of cells: the first column left-aligned, the others
// right-aligned, two spaces apart.
type table struct {
	header []string
	rows   [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(buf *bytes.Buffer) {
	widths := make([]int, len(t.header))
	for _, r := range append([][]string{t.header}, t.rows...) {
		for i, c := range r {
			widths[i] = max(widths[i], len(c))
		}
	}
	for _, r := range append([][]string{t.header}, t.rows...) {
		for i, c := range r {
			switch {
			case i == 0:
				fmt.Fprintf(buf, "%-*s", widths[i], c)
			default:
				fmt.Fprintf(buf, "  %*s", widths[i], c)
			}
		}
		buf.WriteByte('\n')
	}
}

// classFor returns the traffic class a sweep recommends: name with config c
// and every other field at its default.
func classFor(name string, c breaker.Config) trafficclass.Class {
	class := trafficclass.Default(name)
	class.Breaker = c
	return class
}

// rankedJSON is one candidate of a sweep in its JSON output.
type rankedJSON struct {
	Rank         int        `json:"rank"`
	Config       configJSON `json:"config"`
	FalseTrips   *int       `json:"false_trips"`
	DetectionS   *float64   `json:"detection_s"`
	IncidentSent *int       `json:"incident_sent"`
	Quiet        *Stats     `json:"quiet"`
	Incident     *Stats     `json:"incident"`
}

// putJSON is the request a sweep recommends.
type putJSON struct {
	Method string             `json:"method"`
	Path   string             `json:"path"`
	Body   trafficclass.Class `json:"body"`
}

// WriteSweepJSON writes the ranking and the winner as a ready PUT of a
// traffic class called name.
func WriteSweepJSON(w io.Writer, ranked []Candidate, name string) error {
	out := struct {
		Ranking []rankedJSON `json:"ranking"`
		Winner  *putJSON     `json:"winner"`
	}{Ranking: make([]rankedJSON, len(ranked))}
	for i, c := range ranked {
		r := rankedJSON{Rank: i + 1, Config: newConfigJSON(c.Config)}
		if c.Quiet != nil {
			n := c.FalseTrips()
			r.FalseTrips, r.Quiet = &n, &c.Quiet.Total
		}
		if c.Incident != nil {
			n := c.IncidentSent()
			r.IncidentSent, r.Incident = &n, &c.Incident.Total
			if d, ok := c.Detection(); ok {
				s := seconds(d)
				r.DetectionS = &s
			}
		}
		out.Ranking[i] = r
	}
	if len(ranked) > 0 {
		out.Winner = &putJSON{Method: "PUT", Path: "/v1/traffic-classes/" + name, Body: classFor(name, ranked[0].Config)}
	}
	data, err := json.Marshal(out)
	if err != nil {
		return fmt.Errorf("encode sweep: %w", err)
	}
	return writeIndented(w, data)
}

// WriteSweepText writes the ranking as a table, then the winner as a ready
// PUT /v1/traffic-classes/{name} request with its JSON body.
func WriteSweepText(w io.Writer, ranked []Candidate, name string, seed uint64) error {
	var buf bytes.Buffer
	if len(ranked) == 0 {
		return nil
	}
	hasQuiet, hasIncident := ranked[0].Quiet != nil, ranked[0].Incident != nil
	fmt.Fprintf(&buf, "sweep: %d configs (seed %d); fixed: %s\n", len(ranked), seed, describeFixed(ranked[0].Config))
	fmt.Fprintf(&buf, "ranked by zero false trips on the quiet trace (then fewest healthy requests blocked), then fastest detection of the incident, then fewest failures and requests sent during it\n")
	if hasIncident && ranked[0].IncidentPhase != "" {
		fmt.Fprintf(&buf, "the incident starts at the first row of phase %q; earlier rows are a lead-in\n", ranked[0].IncidentPhase)
	}
	buf.WriteByte('\n')
	t := table{header: []string{"rank", "failure_rate", "window", "min_throughput"}}
	if hasQuiet {
		t.header = append(t.header, "false_trips", "quiet_blocked_healthy")
	}
	if hasIncident {
		t.header = append(t.header, "detection_s", "incident_sent", "incident_rejected")
	}
	for i, c := range ranked {
		cells := []string{strconv.Itoa(i + 1), strconv.FormatFloat(c.Config.FailureRateThreshold, 'g', -1, 64),
			trafficclass.FormatDuration(c.Config.Window), strconv.Itoa(c.Config.MinThroughput)}
		if hasQuiet {
			cells = append(cells, strconv.Itoa(c.FalseTrips()), strconv.Itoa(c.Quiet.Total.BlockedHealthy))
		}
		if hasIncident {
			detect := "never"
			if d, ok := c.Detection(); ok {
				detect = fmt.Sprintf("%.3f", d.Seconds())
			}
			cells = append(cells, detect, strconv.Itoa(c.IncidentSent()), strconv.Itoa(c.Incident.Total.Rejected))
		}
		t.add(cells...)
	}
	t.write(&buf)
	best := ranked[0]
	buf.WriteByte('\n')
	if hasQuiet && best.FalseTrips() > 0 {
		fmt.Fprintf(&buf, "warning: every config tripped on the quiet trace; the winner tripped %d times\n", best.FalseTrips())
	}
	if _, ok := best.Detection(); hasIncident && !ok {
		fmt.Fprintf(&buf, "warning: no config opened during the incident\n")
	}
	body, err := json.MarshalIndent(classFor(name, best.Config), "", "  ")
	if err != nil {
		return fmt.Errorf("encode winner: %w", err)
	}
	fmt.Fprintf(&buf, "winner: failure_rate_threshold %s, window %s, min_throughput %d\n\nPUT /v1/traffic-classes/%s\n%s\n",
		strconv.FormatFloat(best.Config.FailureRateThreshold, 'g', -1, 64), trafficclass.FormatDuration(best.Config.Window),
		best.Config.MinThroughput, name, body)
	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("write sweep: %w", err)
	}
	return nil
}

// describeFixed names the settings a sweep does not vary.
func describeFixed(c breaker.Config) string {
	j := newConfigJSON(c)
	return fmt.Sprintf("open_duration=%s open_jitter=%s open_backoff=%s max_open_duration=%s half_open_trials=%d half_open_concurrency=%d",
		j.OpenDuration, strconv.FormatFloat(j.OpenJitter, 'g', -1, 64), strconv.FormatFloat(j.OpenBackoff, 'g', -1, 64),
		j.MaxOpenDuration, j.HalfOpenTrials, j.HalfOpenConcurrency)
}
