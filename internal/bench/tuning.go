package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"strings"
	"time"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/trafficclass"
	"github.com/hookd/hookd/internal/tuning"
)

// The costs of automatic tuning: S2s (shadow breakers on vs off,
// alternated) and the tuning phase of S8 (a pass over every class on the
// month of history while S1's closed loop runs).

const (
	s2sGoal       = "S2s shadow breakers cost <= 5% of S1's throughput (bounded by their busy time; alternated runs beside)"
	s8TuneGoal    = "S8 one tuning pass over every class <= 300 s"
	s8TuneS1Goal  = "S8 deliveries/s while a tuning pass runs >= 0.9 x without"
	s8TuneRSSGoal = "S8 the tuning leader's RSS during the passes <= 300 MB"
	// s2sClass is the class S2s puts every endpoint in.
	s2sClass = "bench-shadow"
	// s2sShadow is the dispatchers' --tune-shadow in S2s: its tenth, the
	// poll at which the shadow breakers read the log, is 2 s, thirty
	// times the 1 min poll of the default 24 h shadow, so the cost
	// measured bounds the default's from above.
	s2sShadow = 20 * time.Second
)

// runS2s runs S1's load against dispatchers whose class has a proposal in
// shadow (every outcome of its endpoints also fed to a shadow breaker with
// the proposed config) and against the same class with none, in turn on
// one database, in pairs whose order alternates (off, on, on, off, ...),
// and reports the medians.
func runS2s(ctx context.Context, b *bench) (*scenarioResult, error) {
	set := b.fanSet()
	set.class = s2sClass
	res := &scenarioResult{Layout: describeFan(set) + "; every endpoint in class " + s2sClass,
		Load: b.describeClosedLoop() + fmt.Sprintf("; a fresh dispatcher per run (TUNE_SHADOW=%s: the shadow breakers read the log every %s; REQUEST_TIMEOUT=2s), %d pairs alternated shadow off/on",
			s2sShadow, s2sShadow/10, b.plan.s2sPairs), Settings: b.river.env()}
	s, err := b.newStage(ctx, "s2s", nil)
	if err != nil {
		return nil, err
	}
	defer s.close()
	st := store.New(s.pool, nil)
	if err := s2sClassMode(ctx, st, tuning.ModeRecommend); err != nil {
		return nil, err
	}
	if _, err := registerEndpoints(ctx, s.client, s.rcv, b.secret, 32, set); err != nil {
		return nil, err
	}
	var on, off []*scenarioResult
	var shadowed int
	var busy, fed float64
	for i, shadow := range pairOrder(b.plan.s2sPairs) {
		mode := tuning.ModeRecommend
		if shadow {
			mode = tuning.ModeApply
		}
		if err := s2sClassMode(ctx, st, mode); err != nil {
			return res, err
		}
		if err := s2sPropose(ctx, st, shadow); err != nil {
			return res, err
		}
		// The shadow reads the log a request timeout, the ledger's write
		// timeout and 5 s behind (attempts logged late): 2 s and 5 s let
		// it read within each run.
		if _, err := s.startDispatcher(ctx, map[string]string{"TUNE_SHADOW": s2sShadow.String(), "REQUEST_TIMEOUT": "2s", "LEDGER_WRITE_TIMEOUT": "5s"}); err != nil {
			return res, err
		}
		r := &scenarioResult{Name: fmt.Sprintf("s2s #%d shadow=%v", i+1, shadow)}
		err := s.closedRun(ctx, r, roundRobin(set), set.perTenant, b.plan.warmup, b.plan.s2Measure)
		if err == nil && shadow {
			// The run counts only if the shadow read its outcomes: wait
			// for the shadow to catch up with the lag (after the measured
			// run, which it does not slow down then).
			var n int
			n, err = s2sShadowed(ctx, st, time.Minute)
			shadowed += n
			r.Extra = map[string]any{"shadow_outcomes": n}
			if err == nil {
				var m map[string]float64
				if m, err = s.metrics(ctx, s2sBusySeries, s2sFedSeries); err == nil {
					busy, fed = busy+m[s2sBusySeries], fed+m[s2sFedSeries]
					r.Extra["shadow_busy_s"], r.Extra["shadow_fed"] = round3(m[s2sBusySeries]), m[s2sFedSeries]
				}
			}
		}
		if serr := s.stopDispatchers(); err == nil {
			err = serr
		}
		if err != nil {
			return res, err
		}
		res.Runs = append(res.Runs, r)
		if shadow {
			on = append(on, r)
		} else {
			off = append(off, r)
		}
	}
	res.setMedians(on)
	res.MeasuredS = round1(b.plan.s2Measure.Seconds() * float64(2*b.plan.s2sPairs))
	offMedian := medianOf(off, func(r *scenarioResult) float64 { return r.DeliveriesPerS })
	res.Extra = map[string]any{
		"shadow_on_median_per_s":  res.DeliveriesPerS,
		"shadow_off_median_per_s": offMedian,
		"shadow_off_p99_ms":       medianOf(off, func(r *scenarioResult) float64 { return r.LatencyP99Ms }),
		"shadow_outcomes_read":    shadowed,
		"shadow_busy_s":           round3(busy),
		"shadow_fed":              fed,
		"cores":                   runtime.NumCPU(),
	}
	if shadowed == 0 || fed == 0 {
		return res, fmt.Errorf("s2s: the shadow breakers read no outcome in the shadow runs")
	}
	res.Extra["shadow_cost_bound_pct"] = round3(100 * shadowCostBound(busy, fed, offMedian, runtime.NumCPU()))
	return res, nil
}

// Series S2s reads from the dispatchers after each run with the shadow on.
const (
	s2sBusySeries = "hookd_tuning_shadow_seconds_total"
	s2sFedSeries  = "hookd_tuning_shadow_outcomes_total"
)

// shadowCostBound bounds the share of a CPU-bound S1's throughput the
// shadow breakers take: the shadow is one sequential loop, so at any
// instant at most its goroutine and the PostgreSQL backend answering it
// work for it, and its CPU is at most twice its wall time (busy, over fed
// outcomes). At perSecond deliveries a second, each one outcome, it needs
// at most 2 * busy / fed * perSecond cores of the machine's cores.
func shadowCostBound(busy, fed, perSecond float64, cores int) float64 {
	if fed <= 0 || cores <= 0 {
		return 0
	}
	return 2 * busy / fed * perSecond / float64(cores)
}

// s2sClassMode stores the S2s class with the default config and mode.
func s2sClassMode(ctx context.Context, st *store.Store, mode string) error {
	c, err := st.GetClass(ctx, s2sClass)
	if err != nil {
		c = trafficclass.Default(s2sClass)
	}
	c.AutoTune = mode
	_, _, err = st.PutClass(ctx, c)
	return err
}

// s2sPropose stores a proposal for the S2s class (a threshold of 0.7),
// which a class in apply shadows at the dispatcher's first poll, or, for a
// run without shadow, rejects any.
func s2sPropose(ctx context.Context, st *store.Store, shadow bool) error {
	c, err := st.GetClass(ctx, s2sClass)
	if err != nil {
		return err
	}
	cur, prop := tuning.ClassConfig(c.Breaker), tuning.ClassConfig(c.Breaker)
	prop.FailureRateThreshold = 0.7
	// Passed now, as far as the tuning leader can tell, so its periodic
	// pass is an interval away and leaves this proposal to its shadow.
	now := time.Now()
	rec := tuning.Recommendation{Class: s2sClass, Status: tuning.StatusProposed, Current: &cur, Proposed: &prop, Reasons: []string{"bench"}, RanAt: &now}
	if !shadow {
		rec.Status = tuning.StatusRejected
	}
	body, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return st.SaveRecommendation(ctx, store.Recommendation{Class: s2sClass, Status: string(rec.Status), Body: body}, "", nil)
}

// s2sShadowed returns how many outcomes the run's shadow fed its
// breakers, once it has fed some, or an error after within.
func s2sShadowed(ctx context.Context, st *store.Store, within time.Duration) (int, error) {
	deadline := time.Now().Add(within)
	for {
		rec, err := tuning.Get(ctx, st, s2sClass)
		if err != nil {
			return 0, err
		}
		if rec.Shadow != nil && rec.Shadow.Attempts > 0 {
			return rec.Shadow.Attempts, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("s2s: the shadow breakers read no outcome within %s of the run's end (status %s)", within, rec.Status)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// s8TuneLoops is how many of S1's closed loops S8 runs during the tuning
// pass, and after it: one loop a side spreads as widely between runs as
// the target's margin.
const s8TuneLoops = 6

// s8RSSSample is how often S8 reads the tuning leader's resident set size.
const s8RSSSample = 250 * time.Millisecond

// s8MarkPassed stores a kept recommendation for every class, passed now as
// far as the tuning leader can tell: its periodic passes are an interval
// away, and the only passes of the run are those s8Tune queues.
func s8MarkPassed(ctx context.Context, st *store.Store) error {
	classes, err := st.ListClasses(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	for _, c := range classes {
		cur := tuning.ClassConfig(c.Breaker)
		rec := tuning.Recommendation{Class: c.Name, Status: tuning.StatusKept, Mode: c.AutoTune, Current: &cur, Reasons: []string{"bench: passed at load"}, RanAt: &now}
		body, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		if err := st.SaveRecommendation(ctx, store.Recommendation{Class: c.Name, Status: string(rec.Status), Body: body}, "", nil); err != nil {
			return err
		}
	}
	return nil
}

// rssPeak samples a process's resident set size every s8RSSSample until
// stopped, and keeps the largest.
type rssPeak struct {
	stop chan struct{}
	done chan struct{}
	peak int64
	err  error
}

func sampleRSS(pid int) *rssPeak {
	r := &rssPeak{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		tick := time.NewTicker(s8RSSSample)
		defer tick.Stop()
		for {
			n, err := rssBytes(pid)
			if err != nil {
				r.err = err
				return
			}
			r.peak = max(r.peak, n)
			select {
			case <-r.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return r
}

// end stops the sampling and returns the peak in MiB.
func (r *rssPeak) end() (float64, error) {
	close(r.stop)
	<-r.done
	return round1(float64(r.peak) / (1 << 20)), r.err
}

// s8Tune queues a pass over the last week of the month's history for every
// class to the dispatcher's tuning leader (leader, as POST
// /v1/traffic-classes/{name}/tune does), which runs them one at a time,
// paced, as it runs every pass. First S1's closed loop runs once without a
// pass (the leader's footprint delivering alone). Once the first pass has
// started, S1's closed
// loop runs again while the passes run, up to s8TuneLoops times (the last
// may end after them), then as many times after them. Meanwhile the
// leader's resident set size is sampled. It adds to res the passes' time
// (each class's and the whole, from the first start to the last end), the
// leader's peak RSS before, during and after them, and the loops' median
// throughput during the passes against after them.
func (s *stage) s8Tune(ctx context.Context, res *scenarioResult, leader *proc, run func(r *scenarioResult) error) error {
	st := store.New(s.pool, nil)
	classes, err := st.ListClasses(ctx)
	if err != nil {
		return err
	}
	// The leader's footprint delivering S1 without a pass: one loop first.
	before := sampleRSS(leader.pid())
	base := &scenarioResult{Name: "s8 closed loop before the tuning pass"}
	if err := run(base); err != nil {
		_, _ = before.end()
		return err
	}
	peakBefore, err := before.end()
	if err != nil {
		return err
	}
	until := time.Now()
	for _, c := range classes {
		if _, err := st.QueueTune(ctx, c.Name, until.Add(-tuning.DefaultWindow), until); err != nil {
			return fmt.Errorf("queue tuning pass of %s: %w", c.Name, err)
		}
	}
	// The leader claims queued passes at its poll (a minute at most).
	started, err := s8TunesStarted(ctx, st, classes, 3*time.Minute)
	if err != nil {
		return err
	}
	during := sampleRSS(leader.pid())
	done := make(chan error, 1)
	go func() { done <- s8TunesDone(ctx, st, classes) }()
	var (
		loops   []*scenarioResult
		passErr error
		ended   bool
	)
	for !ended && len(loops) < s8TuneLoops {
		r := &scenarioResult{Name: fmt.Sprintf("s8 closed loop during the tuning pass %d", len(loops)+1)}
		if err := run(r); err != nil {
			_, _ = during.end()
			return err
		}
		loops = append(loops, r)
		select {
		case passErr = <-done:
			ended = true
		default:
		}
	}
	loopsEnded := time.Now()
	if !ended {
		passErr = <-done
	}
	passesEnded := time.Now()
	peakDuring, err := during.end()
	if passErr != nil {
		return passErr
	}
	if err != nil {
		return err
	}
	byClass := map[string]float64{}
	statuses := map[string]string{}
	var first, last time.Time
	for _, c := range classes {
		r, err := st.LatestTune(ctx, c.Name)
		if err != nil {
			return err
		}
		if r.Status != store.TuneDone || r.StartedAt == nil || r.FinishedAt == nil {
			return fmt.Errorf("tuning pass of %s: %s %s", c.Name, r.Status, r.Error)
		}
		byClass[c.Name] = round2(r.FinishedAt.Sub(*r.StartedAt).Seconds())
		if first.IsZero() || r.StartedAt.Before(first) {
			first = *r.StartedAt
		}
		if r.FinishedAt.After(last) {
			last = *r.FinishedAt
		}
		rec, err := tuning.Get(ctx, st, c.Name)
		if err != nil {
			return err
		}
		statuses[c.Name] = string(rec.Status)
		if rec.Evidence != nil {
			statuses[c.Name] = fmt.Sprintf("%s (%d endpoints, %d attempts)", rec.Status, rec.Evidence.Endpoints, rec.Evidence.Attempts)
		}
	}
	after := sampleRSS(leader.pid())
	var without []*scenarioResult
	for range loops {
		r := &scenarioResult{Name: fmt.Sprintf("s8 closed loop after the tuning pass %d", len(without)+1)}
		if err := run(r); err != nil {
			_, _ = after.end()
			return err
		}
		without = append(without, r)
	}
	peakAfter, err := after.end()
	if err != nil {
		return err
	}
	hwm, err := hwmBytes(leader.pid())
	if err != nil {
		return err
	}
	res.Runs = append(append(append(res.Runs, base), loops...), without...)
	perS := func(r *scenarioResult) float64 { return r.DeliveriesPerS }
	with, wo := medianOf(loops, perS), medianOf(without, perS)
	res.Extra["tune_pass_s"] = round2(last.Sub(first).Seconds())
	res.Extra["tune_pass_s_by_class"] = byClass
	res.Extra["tune_classes"] = statuses
	res.Extra["tune_window"] = tuning.DefaultWindow.String()
	res.Extra["tune_waited_for_leader_s"] = round2(started.Sub(until).Seconds())
	res.Extra["tune_leader_rss_peak_before_mb"] = peakBefore
	res.Extra["tune_leader_rss_peak_mb"] = peakDuring
	res.Extra["tune_leader_rss_peak_after_mb"] = peakAfter
	res.Extra["tune_leader_vmhwm_mb"] = round1(float64(hwm) / (1 << 20))
	res.Extra["tune_leader_rss_rule"] = fmt.Sprintf("the tuning leader (the dispatcher, delivering S1 meanwhile) VmRSS sampled every %s over a loop before the passes are queued, from the first pass's start to the last's end, and over the loops after", s8RSSSample)
	res.Extra["tune_s1_loops"] = len(loops)
	res.Extra["tune_s1_per_s"] = with
	res.Extra["tune_s1_after_per_s"] = wo
	res.Extra["tune_s1_over_without"] = round3(with / max(wo, 1e-9))
	res.Extra["tune_pass_outlasted_loops"] = passesEnded.After(loopsEnded)
	return nil
}

// s8TunesStarted waits until the leader has started the first of the
// classes' queued passes, and returns when it saw it.
func s8TunesStarted(ctx context.Context, st *store.Store, classes []trafficclass.Class, within time.Duration) (time.Time, error) {
	deadline := time.Now().Add(within)
	for {
		for _, c := range classes {
			r, err := st.LatestTune(ctx, c.Name)
			if err != nil {
				return time.Time{}, err
			}
			if r.Status != store.TuneQueued {
				return time.Now(), nil
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("s8: the tuning leader started no queued pass within %s", within)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// s8TunesDone waits until every class's queued pass has ended.
func s8TunesDone(ctx context.Context, st *store.Store, classes []trafficclass.Class) error {
	for {
		left := 0
		for _, c := range classes {
			r, err := st.LatestTune(ctx, c.Name)
			if err != nil {
				return err
			}
			if r.Status == store.TuneQueued || r.Status == store.TuneRunning {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// s2sSpread says how far S2s's runs of each mode spread: (fastest -
// slowest) / slowest.
func s2sSpread(s2s *scenarioResult) string {
	spread := func(on bool) string {
		lo, hi := math.Inf(1), 0.0
		for _, r := range s2s.Runs {
			if strings.HasSuffix(r.Name, fmt.Sprintf("shadow=%v", on)) {
				lo, hi = min(lo, r.DeliveriesPerS), max(hi, r.DeliveriesPerS)
			}
		}
		if hi == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.0f%%", (hi/lo-1)*100)
	}
	return spread(false) + " off, " + spread(true) + " on"
}
