package main

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// S1: healthy fan-out.

func runS1(ctx context.Context, b *bench) (*scenarioResult, error) {
	set := b.fanSet()
	res := &scenarioResult{
		Layout: describeFan(set),
		Load: b.describeClosedLoop() + fmt.Sprintf(" (throughput); then open loop at %.0f%% of the closed loop's message rate (latency); receiver answers 200 at once",
			halfLoad*100),
		Settings: b.river.env(),
	}
	s, err := b.newStage(ctx, "s1", nil)
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
	closed := &scenarioResult{Name: "s1 closed loop (saturation)"}
	profiled := s.startProfiles(ctx)
	if err := s.closedRun(ctx, closed, roundRobin(set), set.perTenant, b.plan.warmup, b.plan.s1Measure); err != nil {
		profiled()
		return res, err
	}
	profiled()
	s.writeStatements("s1", closed.TopStatements)
	b.halfRate = closed.MessagesPerS * halfLoad
	half := &scenarioResult{Name: fmt.Sprintf("s1 open loop at %.0f messages/s", b.halfRate)}
	if err := s.openRun(ctx, half, roundRobin(set), set.perTenant, b.halfRate, b.plan.warmup/2, b.plan.s1Measure); err != nil {
		return res, err
	}
	summarise(res, closed, half)
	return res, nil
}

// summarise fills a two-phase scenario's own figures: throughput, round
// trips, RSS and CPU from the closed loop, latency from the open loop at
// half load; the saturated latency stays in the extras.
func summarise(res, closed, half *scenarioResult) {
	res.Runs = []*scenarioResult{closed, half}
	res.MeasuredS = closed.MeasuredS
	res.Deliveries = closed.Deliveries
	res.DeliveriesPerS = closed.DeliveriesPerS
	res.MessagesPerS = closed.MessagesPerS
	res.Roundtrips, res.RoundtripsAPI, res.RoundtripsDispatcher = closed.Roundtrips, closed.RoundtripsAPI, closed.RoundtripsDispatcher
	res.RoundtripDeliveries, res.TopStatements = closed.RoundtripDeliveries, closed.TopStatements
	res.APIStatementsPerMessage = closed.APIStatementsPerMessage
	res.CommitsPerDelivery, res.WALBytesPerDelivery, res.WALFPIPerDelivery, res.WALSyncsPerS = closed.CommitsPerDelivery, closed.WALBytesPerDelivery, closed.WALFPIPerDelivery, closed.WALSyncsPerS
	res.CPUMsPerDelivery = closed.CPUMsPerDelivery
	res.Attempts = closed.Attempts + half.Attempts
	res.SnoozedAtCap = closed.SnoozedAtCap + half.SnoozedAtCap
	res.RejectedByBreaker = closed.RejectedByBreaker + half.RejectedByBreaker
	res.DispatcherRSSMB = max(closed.DispatcherRSSMB, half.DispatcherRSSMB)
	res.CPU = closed.CPU
	res.MaxLockWaitMs, res.LockWaitsLogged = max(closed.MaxLockWaitMs, half.MaxLockWaitMs), closed.LockWaitsLogged+half.LockWaitsLogged
	res.LongestLockWait = closed.LongestLockWait
	if half.MaxLockWaitMs > closed.MaxLockWaitMs {
		res.LongestLockWait = half.LongestLockWait
	}
	res.LockWaitSampledMs = max(closed.LockWaitSampledMs, half.LockWaitSampledMs)
	for _, r := range []*scenarioResult{closed, half} {
		for k, w := range r.LockWaitsByLock {
			if res.LockWaitsByLock == nil {
				res.LockWaitsByLock = map[string]waitSummary{}
			}
			sum := res.LockWaitsByLock[k]
			sum.Waits += w.Waits
			sum.MaxMs = max(sum.MaxMs, w.MaxMs)
			res.LockWaitsByLock[k] = sum
		}
	}
	res.MaxIdleInTxMs, res.MaxIdleInTxSession = closed.MaxIdleInTxMs, closed.MaxIdleInTxSession
	if half.MaxIdleInTxMs > closed.MaxIdleInTxMs {
		res.MaxIdleInTxMs, res.MaxIdleInTxSession = half.MaxIdleInTxMs, half.MaxIdleInTxSession
	}
	res.LatencyP50Ms, res.LatencyP99Ms, res.LatencyMaxMs = half.LatencyP50Ms, half.LatencyP99Ms, half.LatencyMaxMs
	res.APIPostP50Ms, res.APIPostP99Ms = half.APIPostP50Ms, half.APIPostP99Ms
	res.Drained = closed.Drained && half.Drained
	res.Undelivered = closed.Undelivered + half.Undelivered
	res.FailedPosts = max(closed.FailedPosts, half.FailedPosts)
	res.BadSignatures = max(closed.BadSignatures, half.BadSignatures)
	if res.Extra == nil {
		res.Extra = map[string]any{}
	}
	res.Extra["latency_measured_at"] = fmt.Sprintf("open loop at %.0f messages/s (%.0f%% of the closed loop's %.0f)", half.MessagesPerS, halfLoad*100, closed.MessagesPerS)
	res.Extra["saturated_p50_ms"] = closed.LatencyP50Ms
	res.Extra["saturated_p99_ms"] = closed.LatencyP99Ms
	res.Extra["half_load_deliveries_per_s"] = half.DeliveriesPerS
}

// runS1Rate offers fixed message rates to 1 endpoint per message: 10-way
// fan-out would be 20,000 deliveries/s at 2,000 messages/s, beyond what S0
// allows on 2 cores. It runs a stage at the low rate (1,000 messages/s in
// the full suite) and then one at the target rate (2,000 messages/s for 2
// minutes) against the same system; the scenario's own figures are the
// target rate's. Latency is over each whole stage; the backlog (messages
// due and not yet accepted, plus deliveries accepted and not yet
// delivered) is sampled every second.
func runS1Rate(ctx context.Context, b *bench) (*scenarioResult, error) {
	p := b.plan
	set := tenantSet{group: 0, name: "r", tenants: p.rateTenants, perTenant: 1}
	res := &scenarioResult{
		Layout: fmt.Sprintf("%d tenants x 1 endpoint; a message goes to one tenant (in turn): 1 delivery per message", set.tenants),
		Load: fmt.Sprintf("open loop: %.0f messages/s offered for %s, then %.0f messages/s for %s, by 64 senders whatever the api's pace; latency over each whole stage",
			p.lowRate, p.lowRateDur, p.rate, p.rateDuration),
		Settings: b.river.env(),
	}
	s, err := b.newStage(ctx, "s1rate", nil)
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
	low := &scenarioResult{Name: fmt.Sprintf("s1rate at %.0f messages/s", p.lowRate)}
	if err := s.rateRun(ctx, low, set, p.lowRate, p.lowRateDur); err != nil {
		return nil, err
	}
	high := &scenarioResult{Name: fmt.Sprintf("s1rate at %.0f messages/s", p.rate)}
	if err := s.rateRun(ctx, high, set, p.rate, p.rateDuration); err != nil {
		return nil, err
	}
	layout, load := res.Layout, res.Load
	*res = *high
	res.Name, res.Layout, res.Load, res.Settings = "", layout, load, b.river.env()
	res.Runs = []*scenarioResult{low, high}
	res.Extra["low_rate_msgs_per_s"] = p.lowRate
	res.Extra["low_rate_p50_ms"] = low.LatencyP50Ms
	res.Extra["low_rate_p99_ms"] = low.LatencyP99Ms
	res.Extra["low_rate_growing_backlog"] = low.Extra["growing_backlog"]
	res.Extra["low_rate_stage_times"] = low.Extra["stage_times"]
	return res, nil
}

// rateRun offers rate messages/s over set for d and fills res with the
// deliveries, the latency of every message accepted in the stage and the
// backlog's trend.
func (s *stage) rateRun(ctx context.Context, res *scenarioResult, set tenantSet, rate float64, d time.Duration) error {
	pr, err := s.begin(ctx, 100*time.Millisecond)
	if err != nil {
		return err
	}
	base := s.rcv.total()
	msgs0 := s.tracker.messages[0].Load() + s.tracker.failed.Load()
	due0 := s.tracker.due.Load()
	t0 := s.clock.now()
	lctx, cancel := context.WithTimeout(ctx, d)
	var backlog []backlogSample
	var fetch []fetchSample
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-lctx.Done():
				return
			case <-tick.C:
			}
			// A sample the run's end cut short is left out.
			if f, err := s.fetchHealth(ctx, t0, i%5 == 4); err == nil {
				fetch = append(fetch, f)
			}
			due := s.tracker.due.Load() - due0
			accepted := s.tracker.messages[0].Load() + s.tracker.failed.Load() - msgs0
			backlog = append(backlog, backlogSample{
				AtS:         round1((s.clock.now() - t0).Seconds()),
				Unaccepted:  max(due-accepted, 0),
				Undelivered: max(s.tracker.outstanding(0), 0),
			})
		}
	})
	due := s.tracker.openLoop(lctx, rate, 64, roundRobin(set))
	cancel()
	wg.Wait()
	if ctx.Err() != nil {
		pr.stop()
		return ctx.Err()
	}
	w := window{from: t0, to: t0 + d}
	res.Drained = s.tracker.drain(ctx, s.b.plan.drain, 0)
	if err := pr.end(ctx, res, s.rcv.total()-base); err != nil {
		return err
	}
	m := s.tracker.measure(s.rcv.snapshot(), 0, w, 1)
	fill(res, m, w)
	slope, tailMean := backlogTrend(backlog, d)
	res.Extra = map[string]any{
		"offered_msgs_per_s":    rate,
		"due_msgs":              due,
		"accepted_msgs_per_s":   res.MessagesPerS,
		"backlog_slope_per_s":   round2(slope),
		"backlog_last_10s_mean": round1(tailMean),
		"backlog_samples":       backlog,
		"growing_backlog":       growing(slope, rate, res.MessagesPerS),
		"fetch_samples":         fetch,
		"fetch_by_10s":          fetchCostByWindow(fetch, 10),
		"backlog_rule":          "growing when the backlog's least-squares slope after the first 10% of the run exceeds 1% of the offered rate per second, or the api accepted fewer than 98% of the offered messages",
	}
	// Where the time went, delivery by delivery (the tail's stage).
	if st, err := s.stageTimes(ctx, w.from, w.to); err == nil {
		res.Extra["stage_times"] = st
	} else {
		res.Extra["stage_times_error"] = err.Error()
	}
	return s.loadErrors(res, m)
}

// backlogSample is the backlog one second into the latency run.
type backlogSample struct {
	AtS         float64 `json:"at_s"`
	Unaccepted  int64   `json:"unaccepted_msgs"`
	Undelivered int64   `json:"undelivered"`
}

// backlogTrend returns the least-squares slope of the total backlog per
// second over the samples after the first 10% of the run, and the mean
// backlog of the last 10 seconds.
func backlogTrend(samples []backlogSample, run time.Duration) (slope, tailMean float64) {
	skip := run.Seconds() / 10
	var xs, ys []float64
	for _, s := range samples {
		if s.AtS >= skip {
			xs = append(xs, s.AtS)
			ys = append(ys, float64(s.Unaccepted+s.Undelivered))
		}
	}
	if n := float64(len(xs)); n >= 2 {
		var sx, sy, sxx, sxy float64
		for i := range xs {
			sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
		}
		if d := n*sxx - sx*sx; d != 0 {
			slope = (n*sxy - sx*sy) / d
		}
	}
	var tail []float64
	for _, s := range samples {
		if s.AtS >= run.Seconds()-10 {
			tail = append(tail, float64(s.Unaccepted+s.Undelivered))
		}
	}
	for _, v := range tail {
		tailMean += v / float64(len(tail))
	}
	return slope, tailMean
}

// growing reports whether the backlog grew: its slope is over 1% of the
// offered rate per second, or the api accepted under 98% of the offer.
func growing(slope, offered, accepted float64) bool {
	return slope > 0.01*offered || accepted < 0.98*offered
}
