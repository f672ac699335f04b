package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// fanSet is the fan-out layout of S1 to S4: tenants x 10 endpoints, so one
// message fans out to 10 deliveries.
func (b *bench) fanSet() tenantSet {
	return tenantSet{group: 0, name: "t", tenants: b.plan.fanTenants, perTenant: 10}
}

func describeFan(s tenantSet) string {
	return fmt.Sprintf("%d tenants x %d endpoints (%d endpoints); a message goes to one tenant (in turn) and fans out to its %d endpoints",
		s.tenants, s.perTenant, s.tenants*s.perTenant, s.perTenant)
}

func (b *bench) describeClosedLoop() string {
	return fmt.Sprintf("closed loop: %d concurrent POST /v1/messages while fewer than %d deliveries are outstanding (accepted, not yet answered 2xx)",
		b.plan.posters, b.plan.maxOutstanding)
}

// closedRun drives the closed loop over pick for warmup + measure, waits
// for group 0 to drain, and fills res with group 0's throughput over the
// measured window, the latency of the messages accepted in it, and the
// probe's figures. fanout is the deliveries per group 0 message.
func (s *stage) closedRun(ctx context.Context, res *scenarioResult, pick picker, fanout int, warmup, measure time.Duration) error {
	pr, err := s.begin(ctx, 100*time.Millisecond)
	if err != nil {
		return err
	}
	base := s.rcv.total()
	t0 := s.clock.now()
	w := s.runLoop(ctx, base, t0, warmup, measure, func(lctx context.Context) {
		s.tracker.closedLoop(lctx, s.b.plan.posters, s.b.plan.maxOutstanding, pick)
	})
	if ctx.Err() != nil {
		pr.stop()
		return ctx.Err()
	}
	drained := s.tracker.drain(ctx, s.b.plan.drain, 0)
	if err := pr.end(ctx, res, s.rcv.total()-base); err != nil {
		return err
	}
	m := s.tracker.measure(s.rcv.snapshot(), 0, w, fanout)
	fill(res, m, w)
	res.Drained = drained
	return s.loadErrors(res, m)
}

// openRun offers rate messages/s over pick for warmup + measure, waits for
// group 0 to drain, and fills res like closedRun: group 0's deliveries in
// the measured window, and the latency of the messages accepted in it.
func (s *stage) openRun(ctx context.Context, res *scenarioResult, pick picker, fanout int, rate float64, warmup, measure time.Duration) error {
	pr, err := s.begin(ctx, 100*time.Millisecond)
	if err != nil {
		return err
	}
	base := s.rcv.total()
	t0 := s.clock.now()
	w := s.runLoop(ctx, base, t0, warmup, measure, func(lctx context.Context) {
		s.tracker.openLoop(lctx, rate, 64, pick)
	})
	if ctx.Err() != nil {
		pr.stop()
		return ctx.Err()
	}
	res.Drained = s.tracker.drain(ctx, s.b.plan.drain, 0)
	if err := pr.end(ctx, res, s.rcv.total()-base); err != nil {
		return err
	}
	m := s.tracker.measure(s.rcv.snapshot(), 0, w, fanout)
	fill(res, m, w)
	return s.loadErrors(res, m)
}

// firstDeliveryWait bounds how much longer than its warm-up a run waits
// for the receiver's first delivery before its measured window starts.
const firstDeliveryWait = 30 * time.Second

// runLoop runs loop from t0 (on the stage's clock) until the measured
// window has passed and returns the window: it starts after warmup, or
// once the receiver has answered a delivery since base if that is later
// (a process that started on a loaded machine may take longer than a
// smoke run's warm-up to send its first; at most firstDeliveryWait more).
func (s *stage) runLoop(ctx context.Context, base int64, t0, warmup, measure time.Duration, loop func(context.Context)) window {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		loop(lctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	from := t0 + warmup
	for ctx.Err() == nil {
		now := s.clock.now()
		if now >= t0+warmup && (s.rcv.total() > base || now >= t0+warmup+firstDeliveryWait) {
			from = max(now, t0+warmup)
			if now-(t0+warmup) < 20*time.Millisecond {
				from = t0 + warmup // on time: the window as planned
			}
			break
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	w := window{from: from, to: from + measure}
	for ctx.Err() == nil && s.clock.now() < w.to {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	return w
}

// halfLoad is the share of S1's saturated message rate its latency run
// offers (and S4's, at the same rate): latency at saturation only says how
// much the closed loop lets queue up.
const halfLoad = 0.5

// fill copies a measurement into res.
func fill(res *scenarioResult, m measurement, w window) {
	res.MeasuredS = round1(w.seconds())
	res.Deliveries = m.Delivered
	res.DeliveriesPerS = round1(float64(m.Delivered) / w.seconds())
	res.MessagesPerS = round1(float64(m.Messages) / w.seconds())
	res.LatencyP50Ms = round1(ms(percentile(m.Latencies, 0.50)))
	res.LatencyP99Ms = round1(ms(percentile(m.Latencies, 0.99)))
	res.LatencyMaxMs = round1(ms(percentile(m.Latencies, 1)))
	res.Undelivered = m.Missing
}

// loadErrors records the api's latency and failed posts in res, and fails
// the scenario when nothing was delivered.
func (s *stage) loadErrors(res *scenarioResult, m measurement) error {
	lat := s.tracker.postLatencies()
	slices.Sort(lat)
	res.APIPostP50Ms = round1(ms(percentile(lat, 0.5)))
	res.APIPostP99Ms = round1(ms(percentile(lat, 0.99)))
	res.FailedPosts = s.tracker.failed.Load()
	res.BadSignatures = s.rcv.badSignatures()
	if m.Delivered == 0 {
		if err := s.tracker.postError(); err != nil {
			return fmt.Errorf("nothing delivered; last post failed: %w", err)
		}
		return errors.New("nothing delivered")
	}
	return nil
}

// pairOrder is the order of a scenario's off and on runs: pairs of them, each
// pair's order the reverse of the last's (off on, on off, off on, ...), so
// that a steady drift as the database grows weighs on both modes alike.
func pairOrder(pairs int) []bool {
	var out []bool
	for i := range pairs {
		if i%2 == 0 {
			out = append(out, false, true)
		} else {
			out = append(out, true, false)
		}
	}
	return out
}
