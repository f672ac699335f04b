package main

import (
	"context"
	"fmt"
)

// S9: scale-out on one PostgreSQL.

// scaleConfig is one S9 configuration: api and dispatcher processes.
type scaleConfig struct{ apis, dispatchers int }

// scaleConfigs are S9's configurations, in the order they run.
var scaleConfigs = []scaleConfig{{1, 1}, {1, 2}, {1, 4}, {2, 4}}

// runS9 runs S1's fan-out layout and closed loop against 1, 2 and 4
// dispatcher processes with one api process, and against 4 dispatchers with
// two api processes (the load generator posting to each in turn), every
// configuration on a fresh database of the same PostgreSQL. It reports the
// total deliveries/s of each and the longest lock wait any statement saw;
// the scenario's own row is its fastest configuration's.
func runS9(ctx context.Context, b *bench) (*scenarioResult, error) {
	set := b.fanSet()
	res := &scenarioResult{
		Layout: describeFan(set) + "; per configuration a fresh database, api and dispatcher processes",
		Load: b.describeClosedLoop() + fmt.Sprintf(", %s + %s per configuration: api x dispatchers %s",
			b.plan.warmup, b.plan.s9Measure, describeScaleConfigs()),
		Settings: b.river.env(),
	}
	byConfig := map[string]float64{}
	for _, c := range scaleConfigs {
		r, err := runScaleConfig(ctx, b, set, c)
		if err != nil {
			return res, fmt.Errorf("%d api x %d dispatchers: %w", c.apis, c.dispatchers, err)
		}
		res.Runs = append(res.Runs, r)
		byConfig[c.key()] = r.DeliveriesPerS
		if r.MaxLockWaitMs >= res.MaxLockWaitMs {
			res.MaxLockWaitMs, res.LongestLockWait = r.MaxLockWaitMs, r.LongestLockWait
		}
		res.LockWaitsLogged += r.LockWaitsLogged
		res.LockWaitSampledMs = max(res.LockWaitSampledMs, r.LockWaitSampledMs)
	}
	one, four := byConfig[scaleConfig{1, 1}.key()], byConfig[scaleConfig{1, 4}.key()]
	best := res.Runs[0]
	for _, r := range res.Runs {
		if r.DeliveriesPerS > best.DeliveriesPerS {
			best = r
		}
	}
	res.MeasuredS, res.Deliveries, res.DeliveriesPerS = best.MeasuredS, best.Deliveries, best.DeliveriesPerS
	res.CPU, res.CPUMsPerDelivery = best.CPU, best.CPUMsPerDelivery
	res.Roundtrips, res.RoundtripsAPI, res.RoundtripsDispatcher = best.Roundtrips, best.RoundtripsAPI, best.RoundtripsDispatcher
	res.CommitsPerDelivery, res.WALBytesPerDelivery, res.APIStatementsPerMessage = best.CommitsPerDelivery, best.WALBytesPerDelivery, best.APIStatementsPerMessage
	res.LatencyP50Ms, res.LatencyP99Ms, res.DispatcherRSSMB = best.LatencyP50Ms, best.LatencyP99Ms, best.DispatcherRSSMB
	res.Extra = map[string]any{
		"deliveries_per_s_by_config": byConfig,
		"best_config":                best.Name,
	}
	if one > 0 {
		res.Extra["four_over_one_dispatchers"] = round3(four / one)
	}
	return res, nil
}

func (c scaleConfig) key() string { return fmt.Sprintf("%da%dd", c.apis, c.dispatchers) }

func describeScaleConfigs() string {
	out := ""
	for i, c := range scaleConfigs {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%d x %d", c.apis, c.dispatchers)
	}
	return out
}

// runScaleConfig measures one configuration on a stage of its own.
func runScaleConfig(ctx context.Context, b *bench, set tenantSet, c scaleConfig) (*scenarioResult, error) {
	s, err := b.newStage(ctx, "s9_"+c.key(), nil)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if _, err := registerEndpoints(ctx, s.client, s.rcv, b.secret, 32, set); err != nil {
		return nil, err
	}
	for range c.apis - 1 {
		if err := s.addAPI(ctx); err != nil {
			return nil, err
		}
	}
	for range c.dispatchers {
		if _, err := s.startDispatcher(ctx, nil); err != nil {
			return nil, err
		}
	}
	r := &scenarioResult{Name: fmt.Sprintf("s9 %d api x %d dispatchers", c.apis, c.dispatchers)}
	if err := s.closedRun(ctx, r, roundRobin(set), set.perTenant, b.plan.warmup, b.plan.s9Measure); err != nil {
		return nil, err
	}
	return r, nil
}
