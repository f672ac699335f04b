package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// Soak (make soak; not in make bench): S1's layout at a fixed offered rate
// for 30 minutes with RETENTION=5m and PARTITION_INTERVAL=1m, sampled each
// minute: the dispatcher's and the api's goroutines and RSS (their own
// /metrics: go_goroutines, process_resident_memory_bytes), every table's
// size (partitions summed into their table), and the p99 latency of the
// messages accepted in that minute. Each must hold over the last third of
// the run:
//
//   - RSS and every table's size flat: within 10% ((max - min) / max).
//     A table's size is its peak over soakScrapes reads in the minute: a
//     partitioned table holds one partition fewer just after each drop,
//     and a single read lands on either side of it.
//   - Goroutines: no growth of their floor, the fewest of soakScrapes
//     scrapes in a minute. A leaked goroutine never exits, so it raises
//     every floor after it; work in flight comes and goes above it (and a
//     minute-long backlog raises one minute's floor). The last third's
//     lowest floor must stay within 10% or soakGoroutineSlack of the
//     middle third's.
//   - p99: no upward trend, the median minute of the last third within 10%
//     of the median minute of the middle third. One slow minute on a
//     shared machine moves neither median; latency that grows with the
//     run moves both.

// soakSeries are the per-minute series of the process metrics.
var soakSeries = []string{"go_goroutines", "process_resident_memory_bytes"}

// soakGoal is the soak's target.
const soakGoal = "Soak: RSS, goroutine floors and every table's size flat over the last third, p99 not rising (within 10%)"

// soakFlat is how far a series may move over the last third.
const soakFlat = 0.10

// soakScrapes is how many times a minute the soak scrapes goroutines for
// their floor.
const soakScrapes = 12

// soakGoroutineSlack is how many goroutines the floor may rise between
// thirds: a floor of 20 moves by 2 with one timer or connection more,
// while a leak of one goroutine every two minutes exceeds it between
// 10-minute thirds.
const soakGoroutineSlack = 5

// soakTableSlack is how many bytes a table may move and still be flat
// whatever its size: a table of a few pages moves by a page at a time.
const soakTableSlack = 1 << 20

// soakMinute is one sample of the soak.
type soakMinute struct {
	AtS float64 `json:"at_s"`
	// Dispatcher and API are their go_goroutines and
	// process_resident_memory_bytes.
	Dispatcher map[string]float64 `json:"dispatcher"`
	API        map[string]float64 `json:"api"`
	// GoroutineFloor is the fewest go_goroutines of each process
	// ("dispatcher", "api") over the minute's scrapes.
	GoroutineFloor map[string]float64 `json:"goroutine_floor"`
	// Tables are the sizes at the sample; TablePeaks the largest of the
	// minute's reads.
	Tables     map[string]int64 `json:"table_bytes"`
	TablePeaks map[string]int64 `json:"table_peak_bytes"`
	// P99Ms is the p99 of the messages accepted in the minute before AtS.
	P99Ms float64 `json:"p99_ms"`
	N     int     `json:"deliveries"`
	// RiverJob breaks river_job down (heap, indexes, rows by state,
	// vacuum), the one table whose size depends on River's cleaner.
	RiverJob *riverJobSample `json:"river_job,omitempty"`
}

// soakVerdict is one series' flatness over the last third.
type soakVerdict struct {
	Series string  `json:"series"`
	Spread float64 `json:"spread"`
	Status string  `json:"status"` // met or missed
}

func runSoak(ctx context.Context, b *bench) (*scenarioResult, error) {
	p := b.plan
	set := b.fanSet()
	env := map[string]string{
		"RETENTION":          p.soakRetention.String(),
		"PAYLOAD_RETENTION":  p.soakRetention.String(),
		"PARTITION_INTERVAL": time.Minute.String(),
		// River keeps completed jobs for this long: with the bench's
		// hour river_job would grow for the whole run.
		"COMPLETED_JOB_RETENTION": p.soakRetention.String(),
	}
	res := &scenarioResult{
		Layout: describeFan(set),
		Load: fmt.Sprintf("open loop: %.0f messages/s for %s; RETENTION=%s, PARTITION_INTERVAL=1m, COMPLETED_JOB_RETENTION=%s; sampled every %s",
			p.soakRate, p.soakDuration, p.soakRetention, p.soakRetention, p.soakSample),
		Settings: b.river.env(),
	}
	for k, v := range env {
		res.Settings[k] = v
	}
	s, err := b.newStage(ctx, "soak", nil)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if _, err := registerEndpoints(ctx, s.client, s.rcv, b.secret, 32, set); err != nil {
		return nil, err
	}
	if _, err := s.startDispatcher(ctx, env); err != nil {
		return nil, err
	}
	tables, err := s.userTables(ctx)
	if err != nil {
		return nil, err
	}
	pr, err := s.begin(ctx, time.Second)
	if err != nil {
		return nil, err
	}
	base := s.rcv.total()
	t0 := s.clock.now()
	lctx, cancel := context.WithTimeout(ctx, p.soakDuration)
	var (
		samples []soakMinute
		wg      sync.WaitGroup
		floors  = newExtremes(true)
		peaks   = newExtremes(false)
	)
	wg.Go(func() {
		everyTick(lctx, p.soakSample/soakScrapes, func(int) {
			d, err := s.metrics(lctx, "go_goroutines")
			if err != nil {
				return
			}
			a, err := scrape(lctx, s.api.match(apiMetricsRE)[1]+"/metrics", []string{"go_goroutines"})
			if err != nil {
				return
			}
			floors.observe(map[string]float64{"dispatcher": d["go_goroutines"], "api": a["go_goroutines"]})
			sz, err := s.tableSizes(lctx, 0, tables)
			if err != nil {
				return
			}
			vs := make(map[string]float64, len(sz.Bytes))
			for t, n := range sz.Bytes {
				vs[t] = float64(n)
			}
			peaks.observe(vs)
		})
	})
	wg.Go(func() {
		everyTick(lctx, p.soakSample, func(i int) {
			m := soakMinute{AtS: float64(i) * p.soakSample.Seconds(), GoroutineFloor: floors.take()}
			var err error
			if m.Dispatcher, err = s.metrics(lctx, soakSeries...); err != nil {
				return
			}
			if m.API, err = scrape(lctx, s.api.match(apiMetricsRE)[1]+"/metrics", soakSeries); err != nil {
				return
			}
			sz, err := s.tableSizes(lctx, m.AtS, tables)
			if err != nil {
				return
			}
			m.Tables = sz.Bytes
			m.TablePeaks = map[string]int64{}
			for t, n := range sz.Bytes {
				m.TablePeaks[t] = n
			}
			for t, n := range peaks.take() {
				m.TablePeaks[t] = max(m.TablePeaks[t], int64(n))
			}
			if m.RiverJob, err = s.riverJob(lctx, p.soakRetention); err != nil {
				return
			}
			samples = append(samples, m)
		})
	})
	s.tracker.openLoop(lctx, p.soakRate, 64, roundRobin(set))
	cancel()
	wg.Wait()
	if ctx.Err() != nil {
		pr.stop()
		return nil, ctx.Err()
	}
	w := window{from: t0, to: t0 + p.soakDuration}
	res.Drained = s.tracker.drain(ctx, p.drain, 0)
	if err := pr.end(ctx, res, s.rcv.total()-base); err != nil {
		return nil, err
	}
	m := s.tracker.measure(s.rcv.snapshot(), 0, w, set.perTenant)
	fill(res, m, w)
	// The sample at AtS closes the minute before it.
	byMinute := map[int]bucketLatency{}
	for _, l := range s.tracker.latencyBy(s.rcv.snapshot(), 0, w, p.soakSample) {
		byMinute[l.AtS] = l
	}
	for i := range samples {
		l := byMinute[int(samples[i].AtS-p.soakSample.Seconds())]
		samples[i].P99Ms, samples[i].N = l.P99Ms, l.N
	}
	verdicts := soakVerdicts(samples, tables)
	met := 0
	for _, v := range verdicts {
		if v.Status == "met" {
			met++
		}
	}
	res.Extra = map[string]any{
		"offered_msgs_per_s": p.soakRate,
		"minutes":            samples,
		"verdicts":           verdicts,
		"flat_met":           met,
		"flat_series":        len(verdicts),
		"flat_rule": fmt.Sprintf("over the last third of the samples: RSS and each table's peak (largest of the minute's reads) (max - min) / max <= %.0f%% (a table also when it moved by at most %d KiB); "+
			"each process's lowest goroutine floor (fewest of %d scrapes a sample) at most 10%% or %d above the middle third's; "+
			"the median sample's p99 at most %.0f%% above the middle third's",
			soakFlat*100, soakTableSlack>>10, soakScrapes, soakGoroutineSlack, soakFlat*100),
	}
	return res, s.loadErrors(res, m)
}

// everyTick calls fn(i) every d (i from 1) until ctx ends.
func everyTick(ctx context.Context, d time.Duration, fn func(i int)) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		fn(i)
	}
}

// userTables lists the scenario database's tables that are not
// partitions of another.
func (s *stage) userTables(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, fmt.Errorf("list tables: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// soakVerdicts checks every series over the last third of the samples:
// each process's RSS and goroutine floor, each table's size, and the
// per-minute p99 against the middle third.
func soakVerdicts(samples []soakMinute, tables []string) []soakVerdict {
	third := len(samples) / 3
	last := samples[len(samples)-third:]
	middle := samples[len(samples)-2*third : len(samples)-third]
	if len(samples) < 3 {
		last, middle = samples, samples
	}
	var out []soakVerdict
	check := func(name string, slack float64, value func(soakMinute) float64) {
		lo, hi := math.Inf(1), 0.0
		for _, sm := range last {
			v := value(sm)
			lo, hi = min(lo, v), max(hi, v)
		}
		v := soakVerdict{Series: name, Status: "met"}
		if hi > 0 {
			v.Spread = round3((hi - lo) / hi)
		}
		if len(last) == 0 || (v.Spread > soakFlat && hi-lo > slack) {
			v.Status = "missed"
		}
		out = append(out, v)
	}
	for _, proc := range []string{"dispatcher", "api"} {
		check(proc+" process_resident_memory_bytes", 0, func(sm soakMinute) float64 {
			if proc == "api" {
				return sm.API["process_resident_memory_bytes"]
			}
			return sm.Dispatcher["process_resident_memory_bytes"]
		})
		out = append(out, notAbove(proc+" go_goroutines floor", middle, last, soakGoroutineSlack,
			func(sm soakMinute) float64 { return sm.GoroutineFloor[proc] }))
	}
	for _, t := range tables {
		check("table "+t, soakTableSlack, func(sm soakMinute) float64 {
			if n, ok := sm.TablePeaks[t]; ok {
				return float64(n)
			}
			return float64(sm.Tables[t])
		})
	}
	// The p99's spread is how far the last third's median minute is above
	// the middle third's.
	v := soakVerdict{Series: "p99 latency trend", Status: "missed"}
	if len(last) > 0 {
		before, after := medianP99(middle), medianP99(last)
		if after > 0 {
			v.Spread = round3(max(after-before, 0) / after)
		}
		if after <= before*(1+soakFlat) {
			v.Status = "met"
		}
	}
	return append(out, v)
}

// medianP99 is the median of the samples' p99s.
func medianP99(samples []soakMinute) float64 {
	p := make([]float64, len(samples))
	for i, sm := range samples {
		p[i] = sm.P99Ms
	}
	slices.Sort(p)
	if len(p)%2 == 1 {
		return p[len(p)/2]
	}
	return (p[len(p)/2-1] + p[len(p)/2]) / 2
}

// notAbove checks that the lowest value of the last third is at most 10%
// or slack above the lowest of the middle third: what only grows (a leak)
// raises every value after it, while one high minute moves neither low.
func notAbove(name string, middle, last []soakMinute, slack float64, value func(soakMinute) float64) soakVerdict {
	v := soakVerdict{Series: name, Status: "missed"}
	if len(last) == 0 {
		return v
	}
	low := func(ss []soakMinute) float64 {
		lo := math.Inf(1)
		for _, sm := range ss {
			lo = min(lo, value(sm))
		}
		return lo
	}
	before, after := low(middle), low(last)
	if after > 0 {
		v.Spread = round3(max(after-before, 0) / after)
	}
	if after <= before*(1+soakFlat) || after-before <= slack {
		v.Status = "met"
	}
	return v
}

// extremes keeps the fewest (or the most) of each series seen since the
// last take.
type extremes struct {
	mu    sync.Mutex
	lower bool
	v     map[string]float64
}

func newExtremes(lower bool) *extremes { return &extremes{lower: lower, v: map[string]float64{}} }

// observe moves each series' extreme to v where v is beyond it.
func (e *extremes) observe(vs map[string]float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, v := range vs {
		if old, ok := e.v[k]; !ok || (e.lower && v < old) || (!e.lower && v > old) {
			e.v[k] = v
		}
	}
}

// take returns the extremes and starts over.
func (e *extremes) take() map[string]float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.v
	e.v = map[string]float64{}
	return out
}
