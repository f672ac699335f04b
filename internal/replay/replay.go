// Package replay owns offline tuning of circuit breakers: it replays a trace
// of recorded or synthetic request outcomes, in virtual time, through the one
// breaker implementation the dispatcher runs (internal/breaker), scores what
// a config would have done per phase of the trace, sweeps a grid of configs
// over a quiet and an incident trace to recommend a traffic class, and
// writes synthetic traces from phases. It holds the `dispatcher replay` and
// `dispatcher trace synth` commands. A replay is a pure CPU loop: it reads no
// clock and draws its open jitter from a seeded source, so the same trace,
// config and seed always give the same figures.
package replay

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hookd/hookd/internal/breaker"
)

// DefaultSeed is the seed of a replay's jitter source when none is given.
const DefaultSeed = 1

// Row is one request of a trace.
type Row struct {
	// TS is when the request was made, as a duration since the Unix epoch:
	// a synthetic trace starting at 0 holds offsets, a trace read from the
	// delivery log holds real instants. Rows of a trace are in TS order.
	TS time.Duration
	// Outcome is what the request would tell the breaker if it were sent.
	Outcome breaker.Outcome
	// Phase is the row's free-text phase label; it may be empty.
	Phase string
}

// Time returns r.TS as an instant in UTC.
func (r Row) Time() time.Time {
	return time.Unix(0, int64(r.TS)).UTC()
}

// Stats are what a breaker did to the rows of one phase, or of a whole
// trace.
//
// TimeOpen is the time the breaker spent not closed (open, or half-open
// waiting on or running trials), measured on the rows' own clock: the
// breaker only changes state at a row, so the interval from a row to the
// next one is spent in the state the first row left it in, and counts
// towards the first row's phase. The last row of a trace starts no
// interval.
type Stats struct {
	// Requests is the number of rows.
	Requests int
	// Sent is the number of rows the breaker admitted, trials included.
	Sent int
	// Rejected is the number of rows the breaker refused.
	Rejected int
	// BlockedHealthy is the number of rejected rows whose outcome was
	// success: requests that would have succeeded.
	BlockedHealthy int
	// Wasted is the number of sent rows whose outcome was failure.
	Wasted int
	// Opens is the number of transitions to open made at a row of the
	// phase: trips from closed and re-opens after a failed trial.
	Opens int
	// Suppressed is the number of sent rows after which the min_throughput
	// guard held back a trip: the failure rate had reached the threshold
	// but the window held too few observations.
	Suppressed int
	// FirstOpen is the time from the phase's first row to its first open,
	// or nil when nothing opened in the phase.
	FirstOpen *time.Duration
	// TimeOpen is the time the breaker spent not closed in the phase.
	TimeOpen time.Duration
}

// PhaseStats are the Stats of one phase.
type PhaseStats struct {
	// Name is the phase label.
	Name string
	Stats
}

// Report is the outcome of one replay.
type Report struct {
	// Config is the breaker config replayed.
	Config breaker.Config
	// Total covers every row.
	Total Stats
	// Phases covers each phase label in the order it first appears. A trace
	// whose rows all have an empty label has no phases.
	Phases []PhaseStats
}

// Phase returns the stats of the phase called name.
func (r Report) Phase(name string) (Stats, bool) {
	for _, p := range r.Phases {
		if p.Name == name {
			return p.Stats, true
		}
	}
	return Stats{}, false
}

// What a row became, in Event.Became.
const (
	// BecameSent is a request admitted by a closed breaker.
	BecameSent = "sent"
	// BecameRejected is a request refused by the breaker.
	BecameRejected = "rejected"
	// BecameTrial is a request admitted as a half-open trial.
	BecameTrial = "trial"
)

// Event is one transition of the breaker during a replay, with the row that
// caused it.
type Event struct {
	// Index is the row's position in the trace, from 0.
	Index int
	// Row is the row that caused the transition.
	Row Row
	// Offset is the row's time since the first row of the trace.
	Offset time.Duration
	// Transition is the breaker's transition, with the window's failure
	// rate and observations at that moment.
	Transition breaker.Transition
	// Became says what the request became: BecameSent, BecameRejected or
	// BecameTrial.
	Became string
}

// Options tune a replay.
type Options struct {
	// Seed seeds the source the open jitter is drawn from.
	Seed uint64
	// OnEvent, when set, is called with every transition as it happens.
	OnEvent func(Event)
	// Progress, when set, is called with the number of rows replayed since
	// the previous call, every ProgressEvery rows and once at the end.
	Progress func(rows int)
}

// ProgressEvery is how many rows a replay handles between Progress calls.
const ProgressEvery = 1 << 16

// ErrUnsorted is returned for a trace whose rows are not in time order.
var ErrUnsorted = errors.New("rows are not in time order")

// NewRand returns the jitter source of a replay with the given seed: a
// uniform value in [0, 1) per call, the same sequence for the same seed.
func NewRand(seed uint64) func() float64 {
	return rand.New(rand.NewPCG(seed, 0x6a69747465720000)).Float64 // "jitter"
}

// Replay feeds rows, in order, through a new breaker with config c in
// virtual time and reports what it did. Each row is a request at its TS:
// breaker.Allow decides it, and an admitted request's outcome is recorded
// with breaker.Record at the same TS, so a trial completes before the next
// row (trials never overlap, whatever half_open_concurrency says). The
// config must validate and the rows must be in TS order.
func Replay(c breaker.Config, rows []Row, opts Options) (Report, error) {
	if err := c.Validate(); err != nil {
		return Report{}, fmt.Errorf("breaker config: %w", err)
	}
	r := replayer{
		cfg:    c,
		b:      breaker.New(c),
		rnd:    NewRand(opts.Seed),
		opts:   opts,
		phases: map[string]int{},
	}
	report, err := r.run(rows)
	if err != nil {
		return Report{}, err
	}
	report.Config = c
	return report, nil
}

type replayer struct {
	cfg  breaker.Config
	b    breaker.Breaker
	rnd  func() float64
	opts Options

	phases     map[string]int
	phaseStats []PhaseStats
	phaseFirst []time.Duration
}

// phase returns the index of the stats of label, adding it on first sight.
func (r *replayer) phase(label string, ts time.Duration) int {
	i, ok := r.phases[label]
	if !ok {
		i = len(r.phaseStats)
		r.phases[label] = i
		r.phaseStats = append(r.phaseStats, PhaseStats{Name: label})
		r.phaseFirst = append(r.phaseFirst, ts)
	}
	return i
}

func (r *replayer) run(rows []Row) (Report, error) {
	var (
		total      Stats
		first      time.Duration
		lastTS     time.Duration
		lastPhase  = -1
		lastLabel  string
		notClosed  bool
		sinceCall  int
		labelled   bool
		transition = func(i int, row Row, ph int, t *breaker.Transition, became string) {
			if t.To == breaker.StateOpen {
				total.Opens++
				r.phaseStats[ph].Opens++
				if total.FirstOpen == nil {
					d := row.TS - first
					total.FirstOpen = &d
				}
				if r.phaseStats[ph].FirstOpen == nil {
					d := row.TS - r.phaseFirst[ph]
					r.phaseStats[ph].FirstOpen = &d
				}
			}
			if r.opts.OnEvent != nil {
				r.opts.OnEvent(Event{Index: i, Row: row, Offset: row.TS - first, Transition: *t, Became: became})
			}
		}
	)
	if len(rows) > 0 {
		first = rows[0].TS
	}
	for i, row := range rows {
		if i > 0 && row.TS < lastTS {
			return Report{}, fmt.Errorf("row %d at %s before %s: %w", i+1, formatSeconds(row.TS), formatSeconds(lastTS), ErrUnsorted)
		}
		ph := lastPhase
		if ph < 0 || row.Phase != lastLabel {
			ph = r.phase(row.Phase, row.TS)
			lastLabel = row.Phase
			labelled = labelled || row.Phase != ""
		}
		if notClosed && i > 0 {
			d := row.TS - lastTS
			total.TimeOpen += d
			r.phaseStats[lastPhase].TimeOpen += d
		}
		lastPhase, lastTS = ph, row.TS
		ps := &r.phaseStats[ph].Stats
		ps.Requests++
		total.Requests++

		now := row.Time()
		d := r.b.Allow(r.cfg, now)
		became := BecameSent
		switch d.Admission {
		case breaker.Rejected:
			became = BecameRejected
		case breaker.Trial:
			became = BecameTrial
		}
		if d.Transition != nil {
			transition(i, row, ph, d.Transition, became)
		}
		if d.Admission == breaker.Rejected {
			ps.Rejected++
			total.Rejected++
			if row.Outcome == breaker.OutcomeSuccess {
				ps.BlockedHealthy++
				total.BlockedHealthy++
			}
		} else {
			ps.Sent++
			total.Sent++
			if row.Outcome == breaker.OutcomeFailure {
				ps.Wasted++
				total.Wasted++
			}
			res := r.b.Record(r.cfg, now, d.Ticket, row.Outcome, r.rnd)
			if res.Suppressed != nil {
				ps.Suppressed++
				total.Suppressed++
			}
			if res.Transition != nil {
				transition(i, row, ph, res.Transition, became)
			}
		}
		notClosed = r.b.State != breaker.StateClosed

		if r.opts.Progress != nil {
			if sinceCall++; sinceCall == ProgressEvery {
				r.opts.Progress(sinceCall)
				sinceCall = 0
			}
		}
	}
	if r.opts.Progress != nil && sinceCall > 0 {
		r.opts.Progress(sinceCall)
	}
	report := Report{Total: total}
	if labelled {
		report.Phases = r.phaseStats
	}
	return report, nil
}
