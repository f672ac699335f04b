package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// scenario is one named benchmark.
type scenario struct {
	name  string
	title string
	run   func(ctx context.Context, b *bench) (*scenarioResult, error)
}

// scenarios run in this order; targets compare them after all have run.
var scenarios = []scenario{
	{"s0", "S0 bare River no-op jobs (the ceiling)", runS0},
	{"s1", "S1 healthy fan-out, closed loop", runS1},
	{"s1rate", "S1 at a fixed offered rate (latency target)", runS1Rate},
	{"s2", "S2 breakers on vs off, alternated", runS2},
	{"s3", "S3 hot endpoint beside the fan-out load", runS3},
	{"s4", "S4 head of line: a hanging endpoint gets 20% of messages", runS4},
	{"s5", "S5 half-open across two dispatchers", runS5},
	{"s6", "S6 10,000 endpoints", runS6},
}

// runAll runs the selected scenarios in order; one that fails to run is
// recorded with its error and the rest still run.
func (b *bench) runAll(ctx context.Context) *results {
	res := newResults(ctx, b)
	for _, sc := range scenarios {
		if len(b.opts.only) > 0 && !slices.Contains(b.opts.only, sc.name) {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		b.logger.Info("scenario_start", slog.String("scenario", sc.name), slog.String("title", sc.title))
		start := time.Now()
		r, err := sc.run(ctx, b)
		if r == nil {
			r = &scenarioResult{}
		}
		r.Name, r.Title = sc.name, sc.title
		r.WallS = round1(time.Since(start).Seconds())
		if err != nil {
			r.Error = err.Error()
			b.logger.Error("scenario_failed", slog.String("scenario", sc.name), slog.String("error", err.Error()))
		} else {
			b.logger.Info("scenario_done", slog.String("scenario", sc.name), slog.Float64("deliveries_per_s", r.DeliveriesPerS),
				slog.Float64("p99_ms", r.LatencyP99Ms), slog.Float64("wall_s", r.WallS))
		}
		res.Scenarios = append(res.Scenarios, r)
	}
	return res
}

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
	lctx, cancel := context.WithTimeout(ctx, warmup+measure)
	s.tracker.closedLoop(lctx, s.b.plan.posters, s.b.plan.maxOutstanding, pick)
	cancel()
	if ctx.Err() != nil {
		pr.stop()
		return ctx.Err()
	}
	w := window{from: t0 + warmup, to: t0 + warmup + measure}
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
	lctx, cancel := context.WithTimeout(ctx, warmup+measure)
	s.tracker.openLoop(lctx, rate, 64, pick)
	cancel()
	if ctx.Err() != nil {
		pr.stop()
		return ctx.Err()
	}
	w := window{from: t0 + warmup, to: t0 + warmup + measure}
	res.Drained = s.tracker.drain(ctx, s.b.plan.drain, 0)
	if err := pr.end(ctx, res, s.rcv.total()-base); err != nil {
		return err
	}
	m := s.tracker.measure(s.rcv.snapshot(), 0, w, fanout)
	fill(res, m, w)
	return s.loadErrors(res, m)
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
