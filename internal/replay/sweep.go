package replay

import (
	"cmp"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/hookd/hookd/internal/breaker"
)

// Grid is the rate-breaker settings a sweep tries: every combination of
// its failure-rate thresholds, windows and minimum throughputs.
type Grid struct {
	// Rates are the failure_rate_threshold values.
	Rates []float64
	// Windows are the window values.
	Windows []time.Duration
	// Mins are the min_throughput values.
	Mins []int
}

// DefaultGrid returns the 27-config grid: rates 0.3, 0.5 and 0.7 x windows
// of 30, 60 and 120 s x minimum throughputs of 10, 20 and 50, spanning a
// strict-to-lenient threshold, a short-to-long window and a low-to-high
// evidence floor around the class defaults.
func DefaultGrid() Grid {
	return Grid{
		Rates:   []float64{0.3, 0.5, 0.7},
		Windows: []time.Duration{30 * time.Second, 60 * time.Second, 120 * time.Second},
		Mins:    []int{10, 20, 50},
	}
}

// Configs returns base with trip set to rate and each combination of the
// grid applied, rates outermost and minimums innermost.
func (g Grid) Configs(base breaker.Config) []breaker.Config {
	out := make([]breaker.Config, 0, len(g.Rates)*len(g.Windows)*len(g.Mins))
	for _, r := range g.Rates {
		for _, w := range g.Windows {
			for _, m := range g.Mins {
				c := base
				c.Trip = breaker.TripRate
				c.FailureRateThreshold = r
				c.Window = w
				c.MinThroughput = m
				out = append(out, c)
			}
		}
	}
	return out
}

// Candidate is one config of a sweep with what it did on each trace.
type Candidate struct {
	// Config is the candidate config.
	Config breaker.Config
	// Quiet is its replay of the quiet trace, nil without one.
	Quiet *Report
	// Incident is its replay of the incident trace, nil without one.
	Incident *Report
	// IncidentPhase is the phase of the incident trace where the incident
	// starts, after a lead-in that fills the window as production traffic
	// would; empty when the incident starts with the trace.
	IncidentPhase string
}

// incident returns the stats of the incident itself: its phase, or the
// whole incident trace.
func (c Candidate) incident() (Stats, bool) {
	if c.Incident == nil {
		return Stats{}, false
	}
	if c.IncidentPhase == "" {
		return c.Incident.Total, true
	}
	return c.Incident.Phase(c.IncidentPhase)
}

// FalseTrips returns the opens on the quiet trace: each one is a trip on
// traffic that should not have tripped. It is 0 without a quiet trace.
func (c Candidate) FalseTrips() int {
	if c.Quiet == nil {
		return 0
	}
	return c.Quiet.Total.Opens
}

// Detection returns the time from the start of the incident (the first row
// of IncidentPhase, or of the incident trace) to the breaker's first open
// during it, and false when it never opened then or there is no incident
// trace.
func (c Candidate) Detection() (time.Duration, bool) {
	s, ok := c.incident()
	if !ok || s.FirstOpen == nil {
		return 0, false
	}
	return *s.FirstOpen, true
}

// IncidentSent returns the requests sent during the incident, trials
// included, or 0 without an incident trace.
func (c Candidate) IncidentSent() int {
	s, _ := c.incident()
	return s.Sent
}

// SweepOptions tune a sweep.
type SweepOptions struct {
	// Seed seeds every replay's jitter source.
	Seed uint64
	// IncidentPhase names the phase of the incident trace where the
	// incident starts; the phases before it are a lead-in. Empty means the
	// incident starts with the trace.
	IncidentPhase string
	// Workers is how many replays run at once; 0 means GOMAXPROCS.
	Workers int
	// Progress, when set, is called from any worker with the number of rows
	// replayed since its previous call; it must be safe for concurrent use.
	Progress func(rows int)
}

// Sweep replays quiet and incident (either may be nil, not both) through
// every config and returns the candidates ranked by Rank.
func Sweep(configs []breaker.Config, quiet, incident []Row, opts SweepOptions) ([]Candidate, error) {
	if quiet == nil && incident == nil {
		return nil, errors.New("sweep: a quiet or an incident trace is required")
	}
	if len(configs) == 0 {
		return nil, errors.New("sweep: the grid is empty")
	}
	if opts.IncidentPhase != "" && !slices.ContainsFunc(incident, func(r Row) bool { return r.Phase == opts.IncidentPhase }) {
		return nil, fmt.Errorf("sweep: the incident trace has no phase %q", opts.IncidentPhase)
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	type job struct {
		i        int
		incident bool
	}
	candidates := make([]Candidate, len(configs))
	for i, c := range configs {
		candidates[i].Config = c
		candidates[i].IncidentPhase = opts.IncidentPhase
	}
	jobs := make(chan job)
	errs := make([]error, len(configs)*2)
	var wg sync.WaitGroup
	for range min(workers, len(configs)*2) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				rows := quiet
				if j.incident {
					rows = incident
				}
				r, err := Replay(configs[j.i], rows, Options{Seed: opts.Seed, Progress: opts.Progress})
				if err != nil {
					slot := 2 * j.i
					if j.incident {
						slot++
					}
					errs[slot] = fmt.Errorf("sweep config %d: %w", j.i+1, err)
					continue
				}
				// Each job writes its own field of its own candidate.
				if j.incident {
					candidates[j.i].Incident = &r
				} else {
					candidates[j.i].Quiet = &r
				}
			}
		}()
	}
	for i := range configs {
		if quiet != nil {
			jobs <- job{i: i}
		}
		if incident != nil {
			jobs <- job{i: i, incident: true}
		}
	}
	close(jobs)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	Rank(candidates)
	return candidates, nil
}

// Rank sorts candidates best first: zero false trips first (then fewer
// false trips), then the fastest detection of the incident (never opening
// comes last), then the fewest requests sent during the incident. Ties keep
// their order.
func Rank(candidates []Candidate) {
	slices.SortStableFunc(candidates, func(a, b Candidate) int {
		if c := cmp.Compare(a.FalseTrips(), b.FalseTrips()); c != 0 {
			return c
		}
		da, oka := a.Detection()
		db, okb := b.Detection()
		switch {
		case oka && !okb:
			return -1
		case !oka && okb:
			return 1
		}
		if c := cmp.Compare(da, db); c != 0 {
			return c
		}
		return cmp.Compare(a.IncidentSent(), b.IncidentSent())
	})
}
