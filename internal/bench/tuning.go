package main

import (
	"context"
	"encoding/json"
	"errors"
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
	s2sGoal      = "S2s shadow breakers cost <= 5% of S1's throughput (bounded by their busy time; alternated runs beside)"
	s8TuneGoal   = "S8 one tuning pass over every class <= 300 s"
	s8TuneS1Goal = "S8 deliveries/s while a tuning pass runs >= 0.9 x without"
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

// s8Tune runs one tuning pass over every class, paced as the dispatchers'
// tuning leader runs it, over the last week of the month's history. S1's
// closed loop runs again while the pass runs, up to s8TuneLoops times (the
// last may end after the pass), then as many times after it;
// it adds the pass's time and the loops' median throughput during the
// pass against after it to res.
func (s *stage) s8Tune(ctx context.Context, res *scenarioResult, run func(r *scenarioResult) error) error {
	st := store.New(s.pool, nil)
	classes, err := st.ListClasses(ctx)
	if err != nil {
		return err
	}
	tu := tuning.New(tuning.Config{Pace: tuning.DefaultPace, Actor: "bench"}, tuning.Deps{Store: st, Now: time.Now, Logger: s.b.logger})
	type outcome struct {
		took     time.Duration
		statuses map[string]string
		err      error
	}
	done := make(chan outcome, 1)
	passCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := time.Now()
	go func() {
		o := outcome{statuses: map[string]string{}}
		until := time.Now()
		for _, c := range classes {
			rec, err := tu.Pass(passCtx, c.Name, until.Add(-tuning.DefaultWindow), until, true)
			for errors.Is(err, store.ErrTuningBusy) && passCtx.Err() == nil {
				// The dispatchers' tuning leader is passing the class (a
				// class never passed is due at once): this pass follows.
				time.Sleep(time.Second)
				rec, err = tu.Pass(passCtx, c.Name, until.Add(-tuning.DefaultWindow), until, true)
			}
			if err != nil {
				o.err = fmt.Errorf("tuning pass of %s: %w", c.Name, err)
				break
			}
			o.statuses[c.Name] = fmt.Sprintf("%s (%d endpoints, %d attempts)", rec.Status, rec.Evidence.Endpoints, rec.Evidence.Attempts)
		}
		o.took = time.Since(started)
		done <- o
	}()
	var (
		during []*scenarioResult
		o      outcome
		ended  bool
	)
	for !ended && len(during) < s8TuneLoops {
		r := &scenarioResult{Name: fmt.Sprintf("s8 closed loop during the tuning pass %d", len(during)+1)}
		if err := run(r); err != nil {
			cancel()
			<-done
			return err
		}
		during = append(during, r)
		select {
		case o = <-done:
			ended = true
		default:
		}
	}
	loopsEnded := time.Since(started)
	if !ended {
		o = <-done
	}
	if o.err != nil {
		return o.err
	}
	var after []*scenarioResult
	for range during {
		r := &scenarioResult{Name: fmt.Sprintf("s8 closed loop after the tuning pass %d", len(after)+1)}
		if err := run(r); err != nil {
			return err
		}
		after = append(after, r)
	}
	res.Runs = append(append(res.Runs, during...), after...)
	perS := func(r *scenarioResult) float64 { return r.DeliveriesPerS }
	with, without := medianOf(during, perS), medianOf(after, perS)
	res.Extra["tune_pass_s"] = round2(o.took.Seconds())
	res.Extra["tune_classes"] = o.statuses
	res.Extra["tune_s1_loops"] = len(during)
	res.Extra["tune_s1_per_s"] = with
	res.Extra["tune_s1_after_per_s"] = without
	res.Extra["tune_s1_over_without"] = round3(with / max(without, 1e-9))
	res.Extra["tune_pass_outlasted_loops"] = o.took > loopsEnded
	return nil
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
