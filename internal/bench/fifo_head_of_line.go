package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
)

// S4fifo: a FIFO endpoint stalled beside healthy endpoints.

// fifoHangClass opens the stalled FIFO endpoint's breaker after two
// consecutive timeouts (with one request in flight, a rate over a window
// would never see enough of them) and probes it every 5 s.
var fifoHangClass = map[string]any{
	"name": "bench-fifo-hang", "trip": "consecutive", "consecutive_failures": 2,
	"open_duration": "5s", "half_open_trials": 1, "half_open_concurrency": 1,
}

// runS4FIFO points every 5th message at a FIFO endpoint that never
// answers (REQUEST_TIMEOUT 1s) and the rest at S1's layout answering in
// 10 ms, at S1's half-load healthy message rate, and compares the healthy
// deliveries' latency with runs sending nothing to the FIFO endpoint. The
// runs alternate without, with, with, without: the FIFO queue only grows,
// and this order gives both modes the same average position.
func runS4FIFO(ctx context.Context, b *bench) (*scenarioResult, error) {
	p := b.plan
	healthy := b.fanSet()
	fifo := tenantSet{group: 1, name: "fifo", tenants: 1, perTenant: 1, class: "bench-fifo-hang"}
	fifoPath := endpointPath(1, 0, 0)
	res := &scenarioResult{
		Layout: describeFan(healthy) + ", answering 200 after 10 ms; plus tenant fifo with 1 FIFO endpoint that never answers (class bench-fifo-hang: 2 consecutive failures, open 5s)",
		Load: fmt.Sprintf("open loop at S1's half-load healthy message rate; runs alternated without and with every 5th message (on top) to the FIFO endpoint: without, with, with, without; %s each",
			p.s4fifoMeasure),
		Settings: mergeEnv(b.river.env(), map[string]string{"REQUEST_TIMEOUT": requestTimeout.String()}),
	}
	respond := func(r *deliverytest.Request) deliverytest.Response {
		if groupOf(r.Path) == 1 {
			return deliverytest.Response{Hang: true}
		}
		return deliverytest.Response{Status: http.StatusOK, Delay: 10 * time.Millisecond}
	}
	s, err := b.newStage(ctx, "s4fifo", respond, fifoPath)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if err := s.client.createClass(ctx, fifoHangClass); err != nil {
		return nil, err
	}
	eps, err := registerEndpoints(ctx, s.client, s.rcv, b.secret, 32, healthy, fifo)
	if err != nil {
		return nil, err
	}
	fifoID := eps[len(eps)-1].id
	if _, err := s.client.do(ctx, http.MethodPatch, "/v1/endpoints/"+fifoID, []byte(`{"ordering":"fifo"}`), nil); err != nil {
		return nil, err
	}
	if _, err := s.startDispatcher(ctx, map[string]string{"REQUEST_TIMEOUT": requestTimeout.String()}); err != nil {
		return nil, err
	}
	rate := b.halfRate
	if rate == 0 {
		// Run alone: calibrate on a closed loop of the healthy layout.
		closed := &scenarioResult{Name: "s4fifo closed loop (calibration)"}
		if err := s.closedRun(ctx, closed, roundRobin(healthy), healthy.perTenant, p.warmup, p.s1Measure); err != nil {
			return res, err
		}
		res.Runs = append(res.Runs, closed)
		rate = closed.MessagesPerS * halfLoad
	}
	withFIFO := func(seq int64) (string, int) {
		if seq%5 == 4 {
			return fifo.tenantID(0), 1
		}
		return healthy.tenantID(int((seq - seq/5) % int64(healthy.tenants))), 0
	}
	var with, without []*scenarioResult
	for i, stalled := range []bool{false, true, true, false} {
		r := &scenarioResult{Name: fmt.Sprintf("s4fifo #%d fifo=%v at %.0f healthy messages/s", i+1, stalled, rate)}
		pick, offered := roundRobin(healthy), rate
		if stalled {
			pick, offered = withFIFO, rate*5/4
		}
		if err := s.openRun(ctx, r, pick, healthy.perTenant, offered, p.warmup/2, p.s4fifoMeasure); err != nil {
			return res, err
		}
		res.Runs = append(res.Runs, r)
		if stalled {
			with = append(with, r)
		} else {
			without = append(without, r)
		}
	}
	// The scenario's own figures are the runs with the FIFO endpoint.
	res.setMedians(with)
	res.MeasuredS = round1(p.s4fifoMeasure.Seconds() * 4)
	var inLine, heads int
	if err := s.pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE status = 'waiting' AND park_reason = 'fifo'),
			count(*) FILTER (WHERE status IN ('pending', 'waiting', 'held') AND job_id IS NOT NULL)
		FROM deliveries WHERE endpoint_id = $1`, fifoID).Scan(&inLine, &heads); err != nil {
		return res, fmt.Errorf("read the fifo queue: %w", err)
	}
	st := s.rcv.stats(fifoPath)
	res.Extra = map[string]any{
		"healthy_p99_ms_fifo_stalled": res.LatencyP99Ms,
		"healthy_p99_ms_without_fifo": medianOf(without, func(r *scenarioResult) float64 { return r.LatencyP99Ms }),
		"healthy_per_s_fifo_stalled":  res.DeliveriesPerS,
		"healthy_per_s_without_fifo":  medianOf(without, func(r *scenarioResult) float64 { return r.DeliveriesPerS }),
		"healthy_msgs_per_s_offered":  round1(rate),
		"fifo_messages":               s.tracker.messages[1].Load(),
		"fifo_requests":               st.Requests,
		"fifo_max_in_flight":          st.MaxInFlight,
		"fifo_in_line_at_end":         inLine,
		"fifo_with_a_job_at_end":      heads,
	}
	return res, nil
}
