package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// S1filter: accepted messages/s with every endpoint filtered and without.

// benchFilter is every endpoint's filter in the filtered runs: a condition
// on the event type and on two payload fields, under $or and $and, that
// every bench message passes, so both modes make the same deliveries.
const benchFilter = `{"$event_type":{"$startsWith":"bench."},"$or":[{"seq":{"$gte":0}},{"pad":{"$exists":false}}],` +
	`"$and":[{"pad":{"$startsWith":"x"}},{"seq":{"$nin":[-1,-2]}}]}`

// runS1Filter posts S1's layout's messages as fast as the api takes them,
// with no dispatcher running (what is measured is the api's accept path,
// where filters are evaluated), in four runs alternated without, with,
// with, without a filter on every endpoint, and reports the medians.
func runS1Filter(ctx context.Context, b *bench) (*scenarioResult, error) {
	p := b.plan
	set := b.fanSet()
	res := &scenarioResult{
		Layout: describeFan(set) + "; in the filtered runs every endpoint has the filter " + benchFilter + ", which every message passes",
		Load: fmt.Sprintf("%d concurrent POST /v1/messages as fast as the api accepts them, no dispatcher running; runs alternated without, with, with, without filters; %s warm-up, %s measured each",
			p.posters, p.warmup, p.s1filterMeasure),
	}
	s, err := b.newStage(ctx, "s1filter", nil)
	if err != nil {
		return nil, err
	}
	defer s.close()
	eps, err := registerEndpoints(ctx, s.client, s.rcv, b.secret, 32, set)
	if err != nil {
		return nil, err
	}
	var on, off []*scenarioResult
	for i, filtered := range []bool{false, true, true, false} {
		var f []byte
		if filtered {
			f = []byte(benchFilter)
		}
		if err := setFilters(ctx, s.client, eps, f, 32); err != nil {
			return res, err
		}
		r := &scenarioResult{Name: fmt.Sprintf("s1filter #%d filters=%v", i+1, filtered)}
		if err := s.acceptRun(ctx, r, roundRobin(set), p.warmup, p.s1filterMeasure); err != nil {
			return res, err
		}
		res.Runs = append(res.Runs, r)
		if filtered {
			on = append(on, r)
		} else {
			off = append(off, r)
		}
	}
	// The scenario's own figures are the filtered medians.
	msgs := func(r *scenarioResult) float64 { return r.MessagesPerS }
	apiCPU := func(r *scenarioResult) float64 {
		if r.MessagesPerS == 0 {
			return 0
		}
		return r.CPU.API * 1000 / r.MessagesPerS
	}
	res.MessagesPerS = medianOf(on, msgs)
	res.APIPostP50Ms = medianOf(on, func(r *scenarioResult) float64 { return r.APIPostP50Ms })
	res.APIPostP99Ms = medianOf(on, func(r *scenarioResult) float64 { return r.APIPostP99Ms })
	res.MeasuredS = round1(p.s1filterMeasure.Seconds() * 4)
	res.Extra = map[string]any{
		"filtered_median_msgs_per_s":    res.MessagesPerS,
		"unfiltered_median_msgs_per_s":  medianOf(off, msgs),
		"filtered_api_cpu_ms_per_msg":   medianOf(on, apiCPU),
		"unfiltered_api_cpu_ms_per_msg": medianOf(off, apiCPU),
		"deliveries_per_message":        set.perTenant,
	}
	return res, nil
}

// setFilters gives every endpoint of eps the filter (nil removes it),
// conns requests at a time.
func setFilters(ctx context.Context, api *apiClient, eps []endpoint, filter []byte, conns int) error {
	body := []byte(`{"filter":null}`)
	if filter != nil {
		body = append(append([]byte(`{"filter":`), filter...), '}')
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(conns)
	for _, e := range eps {
		g.Go(func() error {
			_, err := api.do(gctx, http.MethodPatch, "/v1/endpoints/"+e.id, body, nil)
			return err
		})
	}
	return g.Wait()
}

// acceptRun posts messages over pick from the plan's posters as fast as
// the api accepts them for warmup + measure, and fills res with the
// messages accepted per second in the measured window, the api's latency
// and the probe's figures. Nothing waits for deliveries.
func (s *stage) acceptRun(ctx context.Context, res *scenarioResult, pick picker, warmup, measure time.Duration) error {
	pr, err := s.begin(ctx, 100*time.Millisecond)
	if err != nil {
		return err
	}
	lat0 := len(s.tracker.postLatencies())
	t0 := s.clock.now()
	lctx, cancel := context.WithTimeout(ctx, warmup+measure)
	var wg sync.WaitGroup
	var n atomic.Int64
	for range s.b.plan.posters {
		wg.Go(func() {
			for lctx.Err() == nil {
				tenant, g := pick(n.Add(1) - 1)
				s.tracker.post(tenant, g)
			}
		})
	}
	wg.Wait()
	cancel()
	if ctx.Err() != nil {
		pr.stop()
		return ctx.Err()
	}
	if err := pr.end(ctx, res, 0); err != nil {
		return err
	}
	w := window{from: t0 + warmup, to: t0 + warmup + measure}
	accepted := s.tracker.acceptedIn(w)
	res.MeasuredS = round1(w.seconds())
	res.MessagesPerS = round1(float64(accepted) / w.seconds())
	lat := s.tracker.postLatencies()[lat0:]
	slices.Sort(lat)
	res.APIPostP50Ms = round1(ms(percentile(lat, 0.5)))
	res.APIPostP99Ms = round1(ms(percentile(lat, 0.99)))
	res.FailedPosts = s.tracker.failed.Load()
	if accepted == 0 {
		if err := s.tracker.postError(); err != nil {
			return fmt.Errorf("nothing accepted; last post failed: %w", err)
		}
		return fmt.Errorf("nothing accepted")
	}
	return nil
}
