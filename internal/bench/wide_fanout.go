package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/delivery/deliverytest"
)

// S11: wide fan-out.

// s11Delay is how long the receiver takes to answer each of S11's
// requests: long enough that requests pile up against the bounds.
const s11Delay = 10 * time.Millisecond

// runS11 registers one tenant with p.s11Endpoints endpoints, all paths of
// the one receiver host, and offers messages to it at a fixed rate: each
// message is s11Endpoints deliveries at once. It watches the requests in
// flight at the receiver against the dispatcher's bounds (WORKERS for the
// process, MAX_PER_HOST for the host), the dispatcher's RSS, and that
// every delivery arrives once.
func runS11(ctx context.Context, b *bench) (*scenarioResult, error) {
	p := b.plan
	set := tenantSet{group: 0, name: "wide", tenants: 1, perTenant: p.s11Endpoints}
	respond := func(*deliverytest.Request) deliverytest.Response {
		return deliverytest.Response{Status: 200, Delay: s11Delay}
	}
	res := &scenarioResult{
		Layout: fmt.Sprintf("1 tenant x %d endpoints, every one a path of the one receiver host; a message fans out to all of them", set.perTenant),
		Load: fmt.Sprintf("open loop at %.2f messages/s (%.0f deliveries/s offered) for %s after %s of warm-up; the receiver answers 200 after %s",
			p.s11Rate, p.s11Rate*float64(set.perTenant), p.s11Measure, p.warmup, s11Delay),
		Settings: b.river.env(),
	}
	s, err := b.newStage(ctx, "s11", respond)
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
	s.rcv.resetPeak()
	if err := s.openRun(ctx, res, roundRobin(set), set.perTenant, p.s11Rate, p.warmup, p.s11Measure); err != nil {
		return res, err
	}
	workers := delivery.DefaultMaxInFlight
	if w, err := strconv.Atoi(res.Settings["WORKERS"]); err == nil {
		workers = w
	}
	perHost := delivery.DefaultMaxPerHost
	if h, err := strconv.Atoi(res.Settings["MAX_PER_HOST"]); err == nil {
		perHost = h
	}
	res.Extra = map[string]any{
		"endpoints":                set.perTenant,
		"receiver_peak_in_flight":  s.rcv.peakInFlight(),
		"in_flight_bound":          min(workers, perHost),
		"in_flight_bound_is":       fmt.Sprintf("min(WORKERS %d, MAX_PER_HOST %d): one dispatcher, one host", workers, perHost),
		"dispatcher_rss_peak_mb":   res.DispatcherRSSMB,
		"undelivered_after_drain":  res.Undelivered,
		"accepted_to_delivered_ms": map[string]float64{"p50": res.LatencyP50Ms, "p99": res.LatencyP99Ms, "max": res.LatencyMaxMs},
	}
	return res, nil
}
