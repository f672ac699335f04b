package main

import (
	"context"
	"fmt"
	"slices"
)

// S2: breakers on vs off.

// runS2 runs S1's load against dispatchers with breakers on and off, in
// turn on one database, and reports the medians. The order is on, off,
// off, on: the database grows from run to run, and this order gives both
// modes the same average position, so a steady drift cancels out.
func runS2(ctx context.Context, b *bench) (*scenarioResult, error) {
	set := b.fanSet()
	res := &scenarioResult{Layout: describeFan(set), Load: b.describeClosedLoop() + "; a fresh dispatcher per run (BREAKERS=true/false), alternated on, off, off, on", Settings: b.river.env()}
	s, err := b.newStage(ctx, "s2", nil)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if _, err := registerEndpoints(ctx, s.client, s.rcv, b.secret, 32, set); err != nil {
		return nil, err
	}
	var on, off []*scenarioResult
	for i, breakers := range []bool{true, false, false, true} {
		if _, err := s.startDispatcher(ctx, map[string]string{"BREAKERS": fmt.Sprint(breakers)}); err != nil {
			return res, err
		}
		r := &scenarioResult{Name: fmt.Sprintf("s2 #%d breakers=%v", i+1, breakers)}
		err := s.closedRun(ctx, r, roundRobin(set), set.perTenant, b.plan.warmup, b.plan.s2Measure)
		if serr := s.stopDispatchers(); err == nil {
			err = serr
		}
		if err != nil {
			return res, err
		}
		res.Runs = append(res.Runs, r)
		if breakers {
			on = append(on, r)
		} else {
			off = append(off, r)
		}
	}
	// The scenario's own figures are the breaker-on medians.
	res.setMedians(on)
	res.MeasuredS = round1(b.plan.s2Measure.Seconds() * 4)
	res.Extra = map[string]any{
		"breaker_on_median_per_s":             res.DeliveriesPerS,
		"breaker_off_median_per_s":            medianOf(off, func(r *scenarioResult) float64 { return r.DeliveriesPerS }),
		"breaker_on_roundtrips_per_delivery":  res.Roundtrips,
		"breaker_off_roundtrips_per_delivery": medianOf(off, func(r *scenarioResult) float64 { return r.Roundtrips }),
		"breaker_off_p99_ms":                  medianOf(off, func(r *scenarioResult) float64 { return r.LatencyP99Ms }),
	}
	return res, nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// medianOf is the median of f over rs, rounded to two decimals.
func medianOf(rs []*scenarioResult, f func(*scenarioResult) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return round2(median(v))
}

// setMedians gives res the medians of runs' throughput, latencies, round
// trips and dispatcher RSS: an alternated scenario's own figures.
func (res *scenarioResult) setMedians(runs []*scenarioResult) {
	res.DeliveriesPerS = medianOf(runs, func(r *scenarioResult) float64 { return r.DeliveriesPerS })
	res.LatencyP50Ms = medianOf(runs, func(r *scenarioResult) float64 { return r.LatencyP50Ms })
	res.LatencyP99Ms = medianOf(runs, func(r *scenarioResult) float64 { return r.LatencyP99Ms })
	res.Roundtrips = medianOf(runs, func(r *scenarioResult) float64 { return r.Roundtrips })
	res.DispatcherRSSMB = medianOf(runs, func(r *scenarioResult) float64 { return r.DispatcherRSSMB })
}
