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

// Trace is one stretch of one endpoint's traffic that a sweep replays, from
// an empty breaker: normal traffic, where every open is a false trip, or an
// incident, perhaps after a lead-in that fills the window as production
// traffic would.
type Trace struct {
	// Rows are the requests, in time order.
	Rows []Row
	// Incident marks a trace that holds an incident.
	Incident bool
	// IncidentPhase names the phase where the incident starts: rows from
	// its first row on are the incident, the earlier rows a lead-in. Empty
	// means the incident starts with the trace.
	IncidentPhase string
}

// Tally is what one config did over some traces, summed: opens and
// blocked_healthy on the quiet traces, and per incident whether and how
// fast the breaker opened and what it let through. Tallies of the same
// config over different traces add up (Add).
type Tally struct {
	// OpensQuiet is the opens on quiet traces: trips on traffic that should
	// not have tripped.
	OpensQuiet int
	// BlockedHealthy is the rejected rows of quiet traces that would have
	// succeeded.
	BlockedHealthy int
	// Incidents is the number of incident traces.
	Incidents int
	// Detections holds, for each incident the breaker opened during, the
	// time from the incident's first row to that open, while they number
	// at most ExactDetections; past that, Add folds them into a histogram
	// (and Detections is empty), which a copy of the tally shares.
	Detections []time.Duration
	// folded is the histogram of the detections past ExactDetections.
	folded *detectHist
	// ByIncident holds, for every incident trace in the order the traces
	// were added, the time from its first row to the first open, or
	// Undetected: tallies of configs over the same traces line up, so an
	// incident can be compared config by config. It grows with the
	// incidents: a caller that sums many traces' tallies compares them
	// first and drops it (the tuning pass does, endpoint by endpoint).
	ByIncident []time.Duration
	// Wasted is the failures sent during incidents.
	Wasted int
	// Sent is the requests sent during incidents, trials included.
	Sent int
}

// Undetected marks an incident of Tally.ByIncident the breaker never
// opened during.
const Undetected time.Duration = -1

// Add adds o's figures to t.
func (t *Tally) Add(o Tally) {
	t.OpensQuiet += o.OpensQuiet
	t.BlockedHealthy += o.BlockedHealthy
	t.Incidents += o.Incidents
	t.addDetections(o.Detections, o.folded)
	t.ByIncident = append(t.ByIncident, o.ByIncident...)
	t.Wasted += o.Wasted
	t.Sent += o.Sent
}

// Figures are a Tally reduced to what the ranking compares.
type Figures struct {
	// OpensQuiet is the opens on quiet traces.
	OpensQuiet int
	// BlockedHealthy is the rejected successes of quiet traces.
	BlockedHealthy int
	// Incidents is the number of incidents replayed.
	Incidents int
	// IncidentsDetected is the number of incidents the breaker opened
	// during.
	IncidentsDetected int
	// DetectMedian is the median time to open over the detected incidents
	// (the lower middle one of an even count); 0 when none was. Past
	// ExactDetections detections, it is within DetectPrecision of it.
	DetectMedian time.Duration
	// DetectMax is the slowest detection; 0 when none was.
	DetectMax time.Duration
	// Wasted is the failures sent during incidents.
	Wasted int
	// Sent is the requests sent during incidents.
	Sent int
}

// Figures reduces t.
func (t Tally) Figures() Figures {
	f := Figures{OpensQuiet: t.OpensQuiet, BlockedHealthy: t.BlockedHealthy, Incidents: t.Incidents, Wasted: t.Wasted, Sent: t.Sent}
	f.IncidentsDetected, f.DetectMedian, f.DetectMax = t.detectionFigures()
	return f
}

// Candidate is one config of a sweep with what it did.
type Candidate struct {
	// Config is the candidate config.
	Config breaker.Config
	// Figures are its figures over every trace.
	Figures Figures
	// ByIncident is its detection of each incident (Tally.ByIncident).
	ByIncident []time.Duration
	// Quiet is its replay of the quiet trace of a two-trace Sweep, nil
	// otherwise.
	Quiet *Report
	// Incident is its replay of the incident trace of a two-trace Sweep,
	// nil otherwise.
	Incident *Report
	// IncidentPhase is the phase of that incident trace where the incident
	// starts; empty when the incident starts with the trace.
	IncidentPhase string
}

// FalseTrips returns the opens on the quiet traces.
func (c Candidate) FalseTrips() int { return c.Figures.OpensQuiet }

// Detection returns the median time from the start of an incident to the
// breaker's first open during it, and false when it opened during none.
func (c Candidate) Detection() (time.Duration, bool) {
	return c.Figures.DetectMedian, c.Figures.IncidentsDetected > 0
}

// IncidentSent returns the requests sent during incidents, trials
// included.
func (c Candidate) IncidentSent() int { return c.Figures.Sent }

// SweepOptions tune a sweep.
type SweepOptions struct {
	// Seed seeds every replay's jitter source.
	Seed uint64
	// IncidentPhase names the phase of Sweep's incident trace where the
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
// every config and returns the candidates ranked by Rank, each with its
// two reports. It is SweepTraces over the two traces.
func Sweep(configs []breaker.Config, quiet, incident []Row, opts SweepOptions) ([]Candidate, error) {
	if quiet == nil && incident == nil {
		return nil, errors.New("sweep: a quiet or an incident trace is required")
	}
	if opts.IncidentPhase != "" && !slices.ContainsFunc(incident, func(r Row) bool { return r.Phase == opts.IncidentPhase }) {
		return nil, fmt.Errorf("sweep: the incident trace has no phase %q", opts.IncidentPhase)
	}
	var traces []Trace
	if quiet != nil {
		traces = append(traces, Trace{Rows: quiet})
	}
	if incident != nil {
		traces = append(traces, Trace{Rows: incident, Incident: true, IncidentPhase: opts.IncidentPhase})
	}
	tallies, reports, err := score(configs, traces, opts, true)
	if err != nil {
		return nil, err
	}
	candidates := make([]Candidate, len(configs))
	for i, c := range configs {
		candidates[i] = Candidate{Config: c, Figures: tallies[i].Figures(), IncidentPhase: opts.IncidentPhase}
		for j, t := range traces {
			r := &reports[i][j]
			if t.Incident {
				candidates[i].Incident = r
			} else {
				candidates[i].Quiet = r
			}
		}
	}
	Rank(candidates)
	return candidates, nil
}

// SweepTraces replays every trace through every config, each trace from an
// empty breaker, and returns the candidates ranked by Rank. It is Score
// followed by Ranked: the automatic tuning pass scores one endpoint's
// traces at a time and ranks the sums, which gives the same ranking.
func SweepTraces(configs []breaker.Config, traces []Trace, opts SweepOptions) ([]Candidate, error) {
	tallies, err := Score(configs, traces, opts)
	if err != nil {
		return nil, err
	}
	return Ranked(configs, tallies), nil
}

// Ranked returns a candidate per config with the figures of its tally
// (tallies[i] is configs[i]'s), ranked by Rank.
func Ranked(configs []breaker.Config, tallies []Tally) []Candidate {
	candidates := make([]Candidate, len(configs))
	for i, c := range configs {
		candidates[i] = Candidate{Config: c, Figures: tallies[i].Figures(), ByIncident: tallies[i].ByIncident}
	}
	Rank(candidates)
	return candidates
}

// Score replays every trace through every config, each trace from an empty
// breaker, and returns each config's tally, in the order of configs.
func Score(configs []breaker.Config, traces []Trace, opts SweepOptions) ([]Tally, error) {
	tallies, _, err := score(configs, traces, opts, false)
	return tallies, err
}

// score is Score, keeping every replay's report when keep is set.
func score(configs []breaker.Config, traces []Trace, opts SweepOptions, keep bool) ([]Tally, [][]Report, error) {
	if len(configs) == 0 {
		return nil, nil, errors.New("sweep: the grid is empty")
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	type job struct{ group, trace int }
	groups := thresholdGroups(configs, !keep)
	// Each job writes its own slots; the slots are summed in order after,
	// so the result does not depend on the number of workers.
	parts := make([][]Tally, len(configs))
	var reports [][]Report
	for i := range parts {
		parts[i] = make([]Tally, len(traces))
	}
	if keep {
		reports = make([][]Report, len(configs))
		for i := range reports {
			reports[i] = make([]Report, len(traces))
		}
	}
	jobs := make(chan job)
	errs := make([]error, len(configs)*len(traces))
	var wg sync.WaitGroup
	for range min(workers, max(len(groups)*len(traces), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				t := traces[j.trace]
				stands := -1 // a config of the group that never opened
				for _, c := range groups[j.group] {
					if stands >= 0 {
						parts[c][j.trace] = parts[stands][j.trace]
						continue
					}
					r, err := Replay(configs[c], t.Rows, Options{Seed: opts.Seed, Progress: opts.Progress})
					if err != nil {
						errs[c*len(traces)+j.trace] = fmt.Errorf("sweep config %d: %w", c+1, err)
						break
					}
					parts[c][j.trace] = tallyOf(t, r)
					if keep {
						reports[c][j.trace] = r
					}
					if r.Total.Opens == 0 {
						stands = c
					}
				}
			}
		}()
	}
	for g := range groups {
		for j := range traces {
			jobs <- job{group: g, trace: j}
		}
	}
	close(jobs)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	tallies := make([]Tally, len(configs))
	for i := range configs {
		for _, p := range parts[i] {
			tallies[i].Add(p)
		}
	}
	return tallies, reports, nil
}

// thresholdGroups returns the indexes of configs in groups that replay
// alike until one trips: with share set, rate configs that differ only in
// FailureRateThreshold, lowest threshold first; otherwise (and for every
// other config) a group each. A config of a group that never opened on a
// trace stands for the higher thresholds after it, so they are not
// replayed: until a trip their breakers hold the same window, and a
// failure rate under the lower threshold is under the higher ones. Only a
// tally can be shared so: the reports differ in their suppressed counts.
func thresholdGroups(configs []breaker.Config, share bool) [][]int {
	var groups [][]int
	at := map[breaker.Config]int{}
	for i, c := range configs {
		if !share || c.Trip != breaker.TripRate {
			groups = append(groups, []int{i})
			continue
		}
		key := c
		key.FailureRateThreshold = 0
		g, ok := at[key]
		if !ok {
			g = len(groups)
			at[key] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	for _, g := range groups {
		slices.SortStableFunc(g, func(a, b int) int {
			return cmp.Compare(configs[a].FailureRateThreshold, configs[b].FailureRateThreshold)
		})
	}
	return groups
}

// tallyOf returns what report says about trace: quiet figures of the whole
// of a quiet trace, or the figures of an incident's own rows.
func tallyOf(t Trace, r Report) Tally {
	if !t.Incident {
		return Tally{OpensQuiet: r.Total.Opens, BlockedHealthy: r.Total.BlockedHealthy}
	}
	s := r.Total
	if t.IncidentPhase != "" {
		s, _ = r.Phase(t.IncidentPhase)
	}
	out := Tally{Incidents: 1, Wasted: s.Wasted, Sent: s.Sent, ByIncident: []time.Duration{Undetected}}
	if s.FirstOpen != nil {
		out.Detections = []time.Duration{*s.FirstOpen}
		out.ByIncident[0] = *s.FirstOpen
	}
	return out
}

// Rank sorts candidates best first: zero false trips first (then fewer
// false trips, then fewer healthy requests they blocked), then the most
// incidents detected, then the fastest median and then slowest detection
// (never opening comes last), then the fewest failures and then requests
// sent during the incidents. Ties keep their order.
func Rank(candidates []Candidate) {
	slices.SortStableFunc(candidates, func(a, b Candidate) int {
		return Compare(a.Figures, b.Figures)
	})
}

// Compare orders two configs' figures as Rank does: negative when a ranks
// before b, zero when they tie.
func Compare(a, b Figures) int {
	if c := cmp.Compare(a.OpensQuiet, b.OpensQuiet); c != 0 {
		return c
	}
	if c := cmp.Compare(a.BlockedHealthy, b.BlockedHealthy); c != 0 {
		return c
	}
	if c := cmp.Compare(b.IncidentsDetected, a.IncidentsDetected); c != 0 {
		return c
	}
	if c := cmp.Compare(a.DetectMedian, b.DetectMedian); c != 0 {
		return c
	}
	if c := cmp.Compare(a.DetectMax, b.DetectMax); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Wasted, b.Wasted); c != 0 {
		return c
	}
	return cmp.Compare(a.Sent, b.Sent)
}
