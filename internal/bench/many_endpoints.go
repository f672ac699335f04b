package main

import (
	"context"
	"fmt"
	"time"

	"github.com/hookd/hookd/internal/store"
)

// S6: 10,000 endpoints.

// Bucket pruning as the dispatcher runs it (internal/delivery/breaker_gate.go):
// an active endpoint's rows are each process's ring of store.TallySlots
// rows, written over in place; every 30 s a pass deletes older generations
// and buckets of quiet endpoints past the longest class window (a ring's
// rows past two of them), looping until none is left.
const (
	pruneInterval = 30 * time.Second
	seededOld     = 5_000
	// rowsPerEndpointBound is what "bounded" means for S6's one
	// dispatcher: its ring of rows of the current generation
	// (store.TallySlots) and one of an older generation not yet pruned.
	rowsPerEndpointBound = 2 * store.TallySlots
)

// runS6 registers 10,000 endpoints, seeds 5,000 bucket rows older than the
// prune horizon, and runs the closed loop over all of them, watching the
// dispatcher's RSS and the breaker tables.
func runS6(ctx context.Context, b *bench) (*scenarioResult, error) {
	p := b.plan
	set := tenantSet{group: 0, name: "t", tenants: p.s6Tenants, perTenant: 10}
	res := &scenarioResult{Layout: describeFan(set), Load: b.describeClosedLoop() + fmt.Sprintf("; %d bucket rows 2 h old seeded first", seededOld), Settings: b.river.env()}
	s, err := b.newStage(ctx, "s6", nil)
	if err != nil {
		return nil, err
	}
	defer s.close()
	regStart := time.Now()
	if _, err := registerEndpoints(ctx, s.client, s.rcv, b.secret, 32, set); err != nil {
		return nil, err
	}
	regRate := float64(set.tenants*set.perTenant) / time.Since(regStart).Seconds()
	if _, err := s.pool.Exec(ctx, `
		INSERT INTO breaker_buckets (endpoint_id, generation, bucket_start, successes, failures)
		SELECT endpoint_id, generation, now() - interval '2 hours' - n * interval '3 seconds', 1, 0
		FROM breaker_states, generate_series(1, 5) n
		LIMIT $1`, seededOld); err != nil {
		return nil, fmt.Errorf("seed old buckets: %w", err)
	}
	if _, err := s.startDispatcher(ctx, nil); err != nil {
		return nil, err
	}
	before, err := s.bucketCounts(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.closedRun(ctx, res, roundRobin(set), set.perTenant, p.warmup, p.s6Measure); err != nil {
		return res, err
	}
	after, err := s.bucketCounts(ctx)
	if err != nil {
		return nil, err
	}
	elapsed := p.warmup + p.s6Measure
	newRows := after.rows - after.old - (before.rows - before.old)
	createRate := float64(newRows) / elapsed.Seconds()
	res.Extra = map[string]any{
		"endpoints":                     set.tenants * set.perTenant,
		"endpoint_registrations_per_s":  round1(regRate),
		"breaker_state_rows":            after.states,
		"bucket_rows_before":            before.rows,
		"bucket_rows_after":             after.rows,
		"old_bucket_rows_seeded":        before.old,
		"old_bucket_rows_left":          after.old,
		"prune_pass_expected":           elapsed >= pruneInterval+2*time.Second,
		"bucket_rows_net_growth_per_s":  round1(createRate),
		"max_bucket_rows_per_endpoint":  after.maxPerEndpoint,
		"rows_per_endpoint_bound":       rowsPerEndpointBound,
		"endpoints_delivered_to":        after.endpointsWithBuckets,
		"dispatcher_rss_peak_mb":        res.DispatcherRSSMB,
		"bucket_rows_bounded_condition": fmt.Sprintf("no endpoint holds more than %d bucket rows, and every seeded old row is pruned when a prune pass ran", rowsPerEndpointBound),
	}
	return res, nil
}

// bucketCounts are the breaker tables' sizes.
type bucketCounts struct {
	states, rows, old, endpointsWithBuckets, maxPerEndpoint int64
}

// bucketRows are the breaker bucket rows of the three tables: every
// process's rows of breaker_slots, and the previous versions'
// breaker_tallies and breaker_buckets.
const bucketRows = `(SELECT endpoint_id, generation, bucket_start, successes, failures FROM breaker_slots
	UNION ALL SELECT endpoint_id, generation, bucket_start, successes, failures FROM breaker_tallies
	UNION ALL SELECT endpoint_id, generation, bucket_start, successes, failures FROM breaker_buckets)`

func (s *stage) bucketCounts(ctx context.Context) (bucketCounts, error) {
	var c bucketCounts
	err := s.pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM breaker_states), count(*),
			count(*) FILTER (WHERE bucket_start < clock_timestamp() - interval '1 hour'),
			count(DISTINCT endpoint_id) FILTER (WHERE bucket_start >= clock_timestamp() - interval '1 hour'),
			coalesce((SELECT max(n) FROM (SELECT count(*) AS n FROM `+bucketRows+` r
				WHERE bucket_start >= clock_timestamp() - interval '1 hour' GROUP BY endpoint_id) per), 0)
		FROM `+bucketRows+` b`).Scan(&c.states, &c.rows, &c.old, &c.endpointsWithBuckets, &c.maxPerEndpoint)
	if err != nil {
		return c, fmt.Errorf("count breaker rows: %w", err)
	}
	return c, nil
}
