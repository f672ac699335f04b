package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"
)

// S9: scale-out on one PostgreSQL.

// scaleConfig is one S9 configuration: api and dispatcher processes.
type scaleConfig struct{ apis, dispatchers int }

// scaleConfigs are S9's configurations, in the order a forward round runs
// them: one dispatcher between two and four, so each ratio's two windows
// run back to back and the machine's drift between them is the least a
// round allows.
var scaleConfigs = []scaleConfig{{1, 2}, {1, 1}, {1, 4}, {2, 4}}

// scaleOtherCores is how much CPU the rest of the machine (cpuReport.Other)
// may use in a configuration's measured window before its round is set
// aside (the full plan's s9OtherCores): a build or another job taking a
// share of the cores in one window of a ratio is not the fleet's cost
// (windows with nothing else running see 0.02-0.08 cores of it here).
const scaleOtherCores = 0.25

// scaleSpareRounds is how many rounds may be run in place of rounds set
// aside.
const scaleSpareRounds = 2

// runS9 runs S1's fan-out layout and closed loop against 1, 2 and 4
// dispatcher processes with one api process, and against 4 dispatchers with
// two api processes (the load generator posting to each in turn), every
// configuration on a fresh database of the same PostgreSQL, measured after
// a warm-up (the steady state). It runs the configurations in rounds,
// alternated (forward, then reversed), so a machine that drifts during the
// scenario weighs on every configuration alike: each configuration's
// figure is the median of its rounds, and each ratio is computed within a
// round and quoted as the median and the spread of the rounds'. A round in
// which the rest of the machine took more than scaleOtherCores in any
// window is kept in the runs but set aside from the figures, and another
// run in its place (up to scaleSpareRounds). Then it measures how long a
// dispatcher added to a loaded fleet takes to reach its full rate
// (runScaleRamp). The scenario's own row is its fastest configuration's
// median round.
func runS9(ctx context.Context, b *bench) (*scenarioResult, error) {
	set := b.fanSet()
	rounds := max(b.plan.s9Rounds, 1)
	limit := b.plan.s9OtherCores
	setAsideRule := fmt.Sprintf("a round in which the rest of the machine used more than %.2f cores in a window set aside and run again, up to %d times", limit, scaleSpareRounds)
	if math.IsInf(limit, 1) {
		setAsideRule = "no round set aside however busy the machine: a smoke run's figures are not results"
	}
	res := &scenarioResult{
		Layout: describeFan(set) + "; per configuration a fresh database, api and dispatcher processes",
		Load: b.describeClosedLoop() + fmt.Sprintf(", %s warm-up (not measured) + %s measured per configuration: api x dispatchers %s; %d rounds alternated forward and reversed (%s), each configuration's figure the median of its rounds, each ratio within a round (median and spread); then one dispatcher added to one loaded one, its rate sampled every %s",
			b.plan.warmup, b.plan.s9Measure, describeScaleConfigs(), rounds, setAsideRule, scaleRampSample),
		Settings: b.river.env(),
	}
	byRound, setAside, err := runScaleRounds(res, rounds, limit, b.logger, func(c scaleConfig) (*scenarioResult, error) {
		return runScaleConfig(ctx, b, set, c)
	})
	if err != nil {
		return res, err
	}
	byConfig := map[string]float64{}
	spreadByConfig := map[string][]float64{}
	sleepsByConfig := map[string]float64{}
	for _, c := range scaleConfigs {
		var v, sleeps []float64
		for _, got := range byRound {
			v = append(v, got[c.key()].DeliveriesPerS)
			sleeps = append(sleeps, got[c.key()].DispatcherSleepsPerDelivery)
		}
		byConfig[c.key()] = round2(median(v))
		spreadByConfig[c.key()] = []float64{round2(slices.Min(v)), round2(slices.Max(v))}
		sleepsByConfig[c.key()] = round3(median(sleeps))
	}
	// ratio is num's figure over den's within each round: its median and
	// its spread (min, max).
	ratio := func(num, den scaleConfig, f func(*scenarioResult) float64) map[string]any {
		var v []float64
		for _, got := range byRound {
			if d := f(got[den.key()]); d > 0 {
				v = append(v, f(got[num.key()])/d)
			}
		}
		if len(v) == 0 {
			return map[string]any{"median": 0.0, "min": 0.0, "max": 0.0, "rounds": 0}
		}
		return map[string]any{"median": round3(median(v)), "min": round3(slices.Min(v)), "max": round3(slices.Max(v)), "rounds": len(v)}
	}
	one, two, four := scaleConfig{1, 1}, scaleConfig{1, 2}, scaleConfig{1, 4}
	throughput := func(r *scenarioResult) float64 { return r.DeliveriesPerS }
	pgCPU := func(r *scenarioResult) float64 { return r.CPUMsPerDelivery.Postgres }
	statements := func(r *scenarioResult) float64 { return r.RoundtripsDispatcher }
	// The load generator's work per delivery (a POST per ten, a request
	// answered per one) is the same in every configuration: its CPU per
	// delivery, 4 over 1, is what the machine charges for more processes
	// sharing its cores, a control for the other ratios.
	benchCPU := func(r *scenarioResult) float64 { return r.CPUMsPerDelivery.Bench }
	// The api's work per delivery is the same in every configuration too;
	// the dispatchers' own CPU per delivery, 4 over 1, beside those two,
	// says how much of a fleet's cost is its processes' rather than
	// PostgreSQL's.
	apiCPU := func(r *scenarioResult) float64 { return r.CPUMsPerDelivery.API }
	dispatcherCPU := func(r *scenarioResult) float64 { return r.CPUMsPerDelivery.Dispatcher }
	// So are the api's statements per message: the CPU its connections
	// cost PostgreSQL per delivery, 4 over 1, is what the machine charges
	// PostgreSQL's work for more processes; the dispatchers' connections
	// (their pools and ledgers) are what the code asks of it.
	pgCPUOf := func(conns ...string) func(*scenarioResult) float64 {
		return func(r *scenarioResult) float64 {
			var ms float64
			for _, c := range conns {
				ms += r.PostgresCPUMsByConnection[c]
			}
			return ms
		}
	}
	// The machine's speed drifts within a run (the load generator's CPU
	// per delivery, the same work throughout, moved by up to 40% between
	// rounds minutes apart on a 2-vCPU guest), and each configuration of
	// a round runs in its own window. Counted against the load
	// generator's CPU per delivery in the same window, every process's
	// CPU per delivery says what 4 dispatchers cost over 1 at equal
	// machine speed: 1's count over 4's is the throughput ratio the
	// cores would give if the machine had not drifted. A diagnosis
	// beside the measured ratio, not the target's measure.
	machineRelative := func(r *scenarioResult) float64 {
		if r.CPUMsPerDelivery.Bench <= 0 || r.CPUMsPerDelivery.Total <= 0 {
			return 0
		}
		return r.CPUMsPerDelivery.Bench / r.CPUMsPerDelivery.Total
	}
	fourOverOne := ratio(four, one, throughput)
	res.Extra = map[string]any{
		"rounds":                              len(byRound),
		"rounds_set_aside":                    setAside,
		"deliveries_per_s_by_config":          byConfig,
		"deliveries_per_s_spread_by_config":   spreadByConfig,
		"four_over_one_dispatchers":           fourOverOne["median"],
		"four_over_one_dispatchers_rounds":    fourOverOne,
		"two_over_one_dispatchers_rounds":     ratio(two, one, throughput),
		"postgres_cpu_four_over_one_rounds":   ratio(four, one, pgCPU),
		"dispatcher_statements_four_over_one": ratio(four, one, statements),
		"load_generator_cpu_four_over_one":    ratio(four, one, benchCPU),
		"api_cpu_four_over_one":               ratio(four, one, apiCPU),
		"dispatcher_cpu_four_over_one":        ratio(four, one, dispatcherCPU),
		// How often the dispatchers' threads run out of work and sleep,
		// per delivery: what a fleet dividing the load among more
		// processes costs each of them (the kernel's switches, the
		// runtime's wakeups).
		"dispatcher_sleeps_per_delivery_by_config": sleepsByConfig,
		"four_over_one_at_machine_speed":           ratio(four, one, machineRelative),
		// PostgreSQL's CPU per delivery by connection, 4 over 1.
		"postgres_cpu_of_api_connections_four_over_one":        ratio(four, one, pgCPUOf("api")),
		"postgres_cpu_of_dispatcher_connections_four_over_one": ratio(four, one, pgCPUOf("dispatcher", "ledger")),
	}
	best := byRound[0][one.key()]
	for _, c := range scaleConfigs {
		var rs []*scenarioResult
		for _, got := range byRound {
			rs = append(rs, got[c.key()])
		}
		slices.SortFunc(rs, func(a, b *scenarioResult) int { return cmp.Compare(a.DeliveriesPerS, b.DeliveriesPerS) })
		if mid := rs[len(rs)/2]; mid.DeliveriesPerS > best.DeliveriesPerS {
			best = mid
		}
	}
	res.Extra["best_config"] = best.Name
	res.MeasuredS, res.Deliveries, res.DeliveriesPerS = best.MeasuredS, best.Deliveries, best.DeliveriesPerS
	res.CPU, res.CPUMsPerDelivery = best.CPU, best.CPUMsPerDelivery
	res.Roundtrips, res.RoundtripsAPI, res.RoundtripsDispatcher = best.Roundtrips, best.RoundtripsAPI, best.RoundtripsDispatcher
	res.CommitsPerDelivery, res.WALBytesPerDelivery, res.APIStatementsPerMessage = best.CommitsPerDelivery, best.WALBytesPerDelivery, best.APIStatementsPerMessage
	res.LatencyP50Ms, res.LatencyP99Ms, res.DispatcherRSSMB = best.LatencyP50Ms, best.LatencyP99Ms, best.DispatcherRSSMB

	ramp, err := runScaleRamp(ctx, b, set)
	if err != nil {
		return res, fmt.Errorf("a dispatcher added: %w", err)
	}
	for k, v := range ramp {
		res.Extra[k] = v
	}
	return res, nil
}

// runScaleRounds runs rounds of every configuration through run, forward
// then reversed, and returns each kept round's results by configuration
// and how many rounds it set aside. Every result goes into res.Runs, and
// res takes the longest lock wait of all. A round in which the rest of the
// machine used more than otherCores in any window is set aside and
// another run in its place, in its direction (the direction follows the
// rounds kept), up to scaleSpareRounds times.
func runScaleRounds(res *scenarioResult, rounds int, otherCores float64, logger *slog.Logger, run func(scaleConfig) (*scenarioResult, error)) ([]map[string]*scenarioResult, int, error) {
	var byRound []map[string]*scenarioResult
	setAside := 0
	for round := 0; len(byRound) < rounds && round < rounds+scaleSpareRounds; round++ {
		order := slices.Clone(scaleConfigs)
		if len(byRound)%2 == 1 {
			slices.Reverse(order)
		}
		got := map[string]*scenarioResult{}
		other := 0.0
		for _, c := range order {
			r, err := run(c)
			if err != nil {
				return nil, setAside, fmt.Errorf("round %d, %d api x %d dispatchers: %w", round+1, c.apis, c.dispatchers, err)
			}
			if rounds > 1 {
				r.Name += fmt.Sprintf(" (round %d)", round+1)
			}
			res.Runs = append(res.Runs, r)
			got[c.key()] = r
			other = max(other, r.CPU.Other)
			if r.MaxLockWaitMs >= res.MaxLockWaitMs {
				res.MaxLockWaitMs, res.LongestLockWait = r.MaxLockWaitMs, r.LongestLockWait
			}
			res.LockWaitsLogged += r.LockWaitsLogged
			res.LockWaitSampledMs = max(res.LockWaitSampledMs, r.LockWaitSampledMs)
		}
		if other > otherCores {
			setAside++
			logger.Warn("s9_round_set_aside", slog.Int("round", round+1), slog.Float64("other_cores", other))
			for _, r := range got {
				r.Name += fmt.Sprintf(" (set aside: the rest of the machine used %.2f cores)", other)
			}
			continue
		}
		byRound = append(byRound, got)
	}
	if len(byRound) == 0 {
		return nil, setAside, fmt.Errorf("every round set aside: the rest of the machine used more than %.2f cores in each", otherCores)
	}
	return byRound, setAside, nil
}

func (c scaleConfig) key() string { return fmt.Sprintf("%da%dd", c.apis, c.dispatchers) }

func describeScaleConfigs() string {
	out := ""
	for i, c := range scaleConfigs {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%d x %d", c.apis, c.dispatchers)
	}
	return out
}

// runScaleConfig measures one configuration on a stage of its own.
func runScaleConfig(ctx context.Context, b *bench, set tenantSet, c scaleConfig) (*scenarioResult, error) {
	s, err := b.newStage(ctx, "s9_"+c.key(), nil)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if _, err := registerEndpoints(ctx, s.client, s.rcv, b.secret, 32, set); err != nil {
		return nil, err
	}
	for range c.apis - 1 {
		if err := s.addAPI(ctx); err != nil {
			return nil, err
		}
	}
	for range c.dispatchers {
		if _, err := s.startDispatcher(ctx, nil); err != nil {
			return nil, err
		}
	}
	r := &scenarioResult{Name: fmt.Sprintf("s9 %d api x %d dispatchers", c.apis, c.dispatchers)}
	if err := s.closedRun(ctx, r, roundRobin(set), set.perTenant, b.plan.warmup, b.plan.s9Measure); err != nil {
		return nil, err
	}
	return r, nil
}

// scaleRampSample is how often the added dispatcher's deliveries are read.
const scaleRampSample = 250 * time.Millisecond

// scaleRampMinSamples is how many samples the ramp reads at least: its
// steady rate is the mean over the last half of them.
const scaleRampMinSamples = 4

// scaleRampFull is the share of its steady rate at which an added
// dispatcher counts as at full rate.
const scaleRampFull = 0.9

// runScaleRamp runs the closed loop against one dispatcher until it is
// warm, then starts a second one and reads the second's deliveries
// (webhook_delivery_total on its metrics) every scaleRampSample until the
// run ends (observe, from its being ready, and at least
// scaleRampMinSamples samples). Its steady rate is its mean over the run's
// last half; its time to full rate is from the start of its process to
// the end of the first sample at scaleRampFull of that rate or more.
func runScaleRamp(ctx context.Context, b *bench, set tenantSet) (map[string]any, error) {
	s, err := b.newStage(ctx, "s9_ramp", nil)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if _, err := registerEndpoints(ctx, s.client, s.rcv, b.secret, 32, set); err != nil {
		return nil, err
	}
	if _, err := s.startDispatcher(ctx, nil); err != nil {
		return nil, err
	}
	observe := max(4*time.Second, 2*b.plan.s9Measure)
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		s.tracker.closedLoop(lctx, s.b.plan.posters, s.b.plan.maxOutstanding, roundRobin(set))
	}()
	defer func() { cancel(); <-loopDone }()
	select {
	case <-time.After(b.plan.warmup):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	started := time.Now()
	added, err := s.startDispatcher(ctx, nil)
	if err != nil {
		return nil, err
	}
	url := added.match(dispatcherMetrics)[1] + "/metrics"
	type sample struct {
		at         time.Duration // since the process's start
		deliveries float64
	}
	var samples []sample
	tick := time.NewTicker(scaleRampSample)
	defer tick.Stop()
	// The window is counted from the process being ready, not from its
	// start: on a loaded machine its start alone can outlast a smoke
	// run's window, which then held no sample. The ramp is still timed
	// from the start.
	ready := time.Now()
	for time.Since(ready) < observe || len(samples) < scaleRampMinSamples {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		m, err := scrape(ctx, url, []string{"webhook_delivery_total"})
		if err != nil {
			return nil, err
		}
		samples = append(samples, sample{at: time.Since(started), deliveries: m["webhook_delivery_total"]})
	}
	half := samples[len(samples)/2]
	last := samples[len(samples)-1]
	steady := (last.deliveries - half.deliveries) / (last.at - half.at).Seconds()
	out := map[string]any{"added_dispatcher_steady_per_s": round2(steady), "added_dispatcher_ramp_s": -1.0}
	if steady <= 0 {
		return out, nil
	}
	for i := 1; i < len(samples); i++ {
		rate := (samples[i].deliveries - samples[i-1].deliveries) / (samples[i].at - samples[i-1].at).Seconds()
		if rate >= scaleRampFull*steady {
			out["added_dispatcher_ramp_s"] = round2(samples[i].at.Seconds())
			break
		}
	}
	return out, nil
}
