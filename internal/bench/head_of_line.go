package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
)

// S4: head of line.

// hangClass is S4's traffic class for the hanging endpoint: a 2 s window,
// so "opens within window + 1 s" is checkable in a short run.
var hangClass = map[string]any{
	"name": "bench-hang", "trip": "rate", "failure_rate_threshold": 0.5, "window": "2s", "min_throughput": 5,
	"open_duration": "5s", "half_open_trials": 1, "half_open_concurrency": 1,
}

const (
	hangWindow     = 2 * time.Second
	requestTimeout = time.Second
	maxPerEndpoint = 10
)

// runS4 points 20% of the messages at an endpoint that never answers
// (REQUEST_TIMEOUT 1s) and the rest at S1's layout answering in 10 ms.
func runS4(ctx context.Context, b *bench) (*scenarioResult, error) {
	p := b.plan
	healthy := b.fanSet()
	hang := tenantSet{group: 1, name: "hang", tenants: 1, perTenant: 1, class: "bench-hang"}
	hangPath := endpointPath(1, 0, 0)
	res := &scenarioResult{
		Layout: describeFan(healthy) + ", answering 200 after 10 ms; plus tenant hang with 1 endpoint that never answers (class bench-hang: 50% over 2s, min 5, open 5s)",
		Load:   b.describeClosedLoop() + " (healthy deliveries only; throughput), then open loop at S1's half-load healthy message rate (latency); every 5th message goes to the hanging endpoint",
		Settings: mergeEnv(b.river.env(), map[string]string{
			"REQUEST_TIMEOUT": requestTimeout.String(), "MAX_PER_ENDPOINT": fmt.Sprint(maxPerEndpoint),
		}),
	}
	respond := func(r *deliverytest.Request) deliverytest.Response {
		if groupOf(r.Path) == 1 {
			return deliverytest.Response{Hang: true}
		}
		return deliverytest.Response{Status: http.StatusOK, Delay: 10 * time.Millisecond}
	}
	s, err := b.newStage(ctx, "s4", respond, hangPath)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if err := s.client.createClass(ctx, hangClass); err != nil {
		return nil, err
	}
	eps, err := registerEndpoints(ctx, s.client, s.rcv, b.secret, 32, healthy, hang)
	if err != nil {
		return nil, err
	}
	hangID := eps[len(eps)-1].id
	if _, err := s.startDispatcher(ctx, map[string]string{
		"REQUEST_TIMEOUT": requestTimeout.String(), "MAX_PER_ENDPOINT": fmt.Sprint(maxPerEndpoint),
	}); err != nil {
		return nil, err
	}
	pick := func(seq int64) (string, int) {
		if seq%5 == 4 {
			return hang.tenantID(0), 1
		}
		return healthy.tenantID(int((seq - seq/5) % int64(healthy.tenants))), 0
	}
	closed := &scenarioResult{Name: "s4 closed loop (saturation)"}
	if err := s.closedRun(ctx, closed, pick, healthy.perTenant, p.warmup, p.s4Measure); err != nil {
		return res, err
	}
	// The same healthy message rate as S1's half-load run, plus the
	// hanging endpoint's 20% of all messages on top.
	rate := b.halfRate
	if rate == 0 {
		rate = closed.MessagesPerS * 0.8 * halfLoad
	}
	half := &scenarioResult{Name: fmt.Sprintf("s4 open loop at %.0f + %.0f messages/s", rate, rate/4)}
	if err := s.openRun(ctx, half, pick, healthy.perTenant, rate*5/4, p.warmup/2, p.s1Measure); err != nil {
		return res, err
	}
	summarise(res, closed, half)
	st := s.rcv.stats(hangPath)
	var firstTimeout time.Duration = -1
	for _, sp := range s.rcv.spansOf(hangPath) {
		if sp.status == 0 && (firstTimeout < 0 || sp.end < firstTimeout) {
			firstTimeout = sp.end
		}
	}
	extra := res.Extra
	for k, v := range map[string]any{
		"healthy_deliveries_per_s": res.DeliveriesPerS,
		"healthy_p99_ms":           res.LatencyP99Ms,
		"hang_requests":            st.Requests,
		"hang_max_in_flight":       st.MaxInFlight,
		"max_per_endpoint":         maxPerEndpoint,
		"dispatchers":              1,
		"hang_messages":            s.tracker.messages[1].Load(),
		"hang_window_s":            hangWindow.Seconds(),
		"request_timeout_s":        requestTimeout.Seconds(),
	} {
		extra[k] = v
	}
	var opened *time.Time
	var opens int
	if err := s.pool.QueryRow(ctx, `SELECT min(at), count(*) FROM breaker_transitions WHERE endpoint_id = $1 AND to_state = 'open'`, hangID).Scan(&opened, &opens); err != nil {
		return res, fmt.Errorf("read transitions: %w", err)
	}
	extra["breaker_opens_counted"] = opens
	if firstTimeout >= 0 {
		extra["first_timeout_at_s"] = round2(firstTimeout.Seconds())
	}
	if opened != nil {
		at := opened.Sub(s.clock.start)
		extra["breaker_opened_at_s"] = round2(at.Seconds())
		if firstTimeout >= 0 {
			extra["breaker_open_after_s"] = round2((at - firstTimeout).Seconds())
		}
	}
	census, err := s.jobCensus(ctx, hangID)
	if err != nil {
		return res, err
	}
	extra["hang_jobs"] = census
	return res, nil
}

func mergeEnv(a, b map[string]string) map[string]string {
	for k, v := range b {
		a[k] = v
	}
	return a
}
