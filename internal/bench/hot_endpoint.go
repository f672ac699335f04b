package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// S3: hot endpoint.

// runS3 adds an open-loop 400 messages/s to one endpoint beside S1's
// closed-loop load, with River's completed-job retention at its minimum
// (1m), and watches lock waits, the breaker's flush latency for the hot
// endpoint and River's job table.
func runS3(ctx context.Context, b *bench) (*scenarioResult, error) {
	p := b.plan
	others := b.fanSet()
	hot := tenantSet{group: 1, name: "hot", tenants: 1, perTenant: 1}
	hotPath := endpointPath(1, 0, 0)
	res := &scenarioResult{
		Layout:   describeFan(others) + "; plus tenant hot with 1 endpoint",
		Load:     fmt.Sprintf("%s, over the 1,000; plus open loop %.0f messages/s to the hot endpoint; %s", b.describeClosedLoop(), p.s3HotRate, p.s3Measure),
		Settings: b.river.env(),
	}
	res.Settings["COMPLETED_JOB_RETENTION"] = "1m"
	s, err := b.newStage(ctx, "s3", nil)
	if err != nil {
		return nil, err
	}
	defer s.close()
	eps, err := registerEndpoints(ctx, s.client, s.rcv, b.secret, 32, others, hot)
	if err != nil {
		return nil, err
	}
	hotID := eps[len(eps)-1].id
	if _, err := s.startDispatcher(ctx, map[string]string{"COMPLETED_JOB_RETENTION": "1m"}); err != nil {
		return nil, err
	}
	pr, err := s.begin(ctx, 50*time.Millisecond)
	if err != nil {
		return nil, err
	}
	base := s.rcv.total()
	t0 := s.clock.now()
	lctx, cancel := context.WithTimeout(ctx, p.warmup+p.s3Measure)
	var (
		wg         sync.WaitGroup
		visible    []visibleSample
		jobSamples []jobTableSample
	)
	wg.Go(func() { visible = s.sampleBuckets(lctx, hotID) })
	wg.Go(func() { jobSamples = s.sampleJobTable(lctx, t0) })
	wg.Go(func() {
		s.tracker.openLoop(lctx, p.s3HotRate, 16, func(int64) (string, int) { return hot.tenantID(0), 1 })
	})
	s.tracker.closedLoop(lctx, p.posters, p.maxOutstanding, roundRobin(others))
	wg.Wait()
	cancel()
	if ctx.Err() != nil {
		pr.stop()
		return nil, ctx.Err()
	}
	w := window{from: t0 + p.warmup, to: t0 + p.warmup + p.s3Measure}
	res.Drained = s.tracker.drain(ctx, p.drain, 0, 1)
	final := s.jobTable(ctx, t0, true)
	census, err := s.jobCensus(ctx, hotID)
	if err != nil {
		pr.stop()
		return nil, err
	}
	if err := pr.end(ctx, res, s.rcv.total()-base); err != nil {
		return nil, err
	}
	events := s.rcv.snapshot()
	m := s.tracker.measure(events, 0, w, others.perTenant)
	fill(res, m, w)
	mh := s.tracker.measure(events, 1, w, 1)
	lags := flushLags(events, hotPath, visible)
	var maxDead, maxRows int64
	for _, j := range append(jobSamples, final) {
		maxDead = max(maxDead, j.DeadTuples)
		maxRows = max(maxRows, j.Rows)
	}
	res.Extra = map[string]any{
		"others_deliveries_per_s":     res.DeliveriesPerS,
		"hot_deliveries_per_s":        round1(float64(mh.Delivered) / w.seconds()),
		"hot_latency_p50_ms":          round1(ms(percentile(mh.Latencies, 0.5))),
		"hot_latency_p99_ms":          round1(ms(percentile(mh.Latencies, 0.99))),
		"breaker_flush_lag_p50_ms":    round1(ms(percentile(lags, 0.5))),
		"breaker_flush_lag_p99_ms":    round1(ms(percentile(lags, 0.99))),
		"breaker_flush_lag_max_ms":    round1(ms(percentile(lags, 1))),
		"breaker_flush_lag_outcomes":  len(lags),
		"breaker_flush_lag_method":    "per hot-endpoint outcome: first 25 ms poll whose count of flushed outcomes (every bucket ever seen, at its largest count, so pruning does not hide earlier ones) includes it, minus the receiver's answer time (upper bound by up to the poll interval)",
		"river_job_max_dead_tuples":   maxDead,
		"river_job_max_rows":          maxRows,
		"river_job_final":             final,
		"river_job_samples":           jobSamples,
		"lock_wait_threshold_ms":      lockWaitThreshold.Milliseconds(),
		"lock_waits_logged":           res.LockWaitsLogged,
		"completed_job_retention":     "1m",
		"river_job_cleaner_interval":  "30s (River's default)",
		"hot_messages_offered_per_s":  p.s3HotRate,
		"hot_jobs":                    census,
		"hot_messages_accepted_per_s": round1(float64(mh.Messages) / w.seconds()),
	}
	return res, s.loadErrors(res, m)
}

// jobState is how many of an endpoint's River jobs are in one state, and
// how often they were snoozed.
type jobState struct {
	Jobs    int64 `json:"jobs"`
	Snoozes int64 `json:"snoozes"`
}

// jobCensus counts an endpoint's River jobs by state, with their snoozes
// (River's metadata "snoozes"); completed jobs past the retention are gone.
func (s *stage) jobCensus(ctx context.Context, endpointID string) (map[string]jobState, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT state::text, count(*), coalesce(sum((metadata->>'snoozes')::bigint), 0)
		FROM river_job WHERE kind = 'deliver' AND args->>'endpoint_id' = $1 GROUP BY 1`, endpointID)
	if err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	defer rows.Close()
	out := map[string]jobState{}
	for rows.Next() {
		var st string
		var js jobState
		if err := rows.Scan(&st, &js.Jobs, &js.Snoozes); err != nil {
			return nil, fmt.Errorf("count jobs: %w", err)
		}
		out[st] = js
	}
	return out, rows.Err()
}

// visibleSample is how many of the hot endpoint's outcomes had reached its
// breaker buckets by a time.
type visibleSample struct {
	at    time.Duration
	total int64
}

// sampleBuckets polls the hot endpoint's buckets every 25 ms until ctx
// ends. A bucket's count only grows until the flush prunes it, long after
// its last outcome (past the class's window), so the sum over every bucket
// ever seen, each at the largest count it was seen with, counts the
// outcomes flushed so far; a plain sum of the rows present would fall at
// every prune and never again include the outcomes that followed it.
func (s *stage) sampleBuckets(ctx context.Context, endpointID string) []visibleSample {
	type bucketKey struct {
		generation int64
		start      time.Time
	}
	seen := map[bucketKey]int64{}
	var total int64
	var out []visibleSample
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		rows, err := s.pool.Query(ctx, `SELECT generation, bucket_start, sum(successes + failures) FROM `+bucketRows+` b WHERE endpoint_id = $1 GROUP BY 1, 2`, endpointID)
		if err == nil {
			for rows.Next() {
				var k bucketKey
				var n int64
				if rows.Scan(&k.generation, &k.start, &n) == nil && n > seen[k] {
					total += n - seen[k]
					seen[k] = n
				}
			}
			rows.Close()
			if rows.Err() == nil {
				out = append(out, visibleSample{at: s.clock.now(), total: total})
			}
		}
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
	}
}

// flushLags returns, for every 2xx answer on path, the time from the
// answer to the first bucket poll whose sum includes it, sorted.
func flushLags(events []delivered, path string, visible []visibleSample) []time.Duration {
	var answers []time.Duration
	for _, e := range events {
		if e.path == path {
			answers = append(answers, e.at)
		}
	}
	slices.Sort(answers)
	var lags []time.Duration
	j := 0
	for k, at := range answers {
		for j < len(visible) && visible[j].total < int64(k+1) {
			j++
		}
		if j == len(visible) {
			break
		}
		lags = append(lags, max(visible[j].at-at, 0))
	}
	slices.Sort(lags)
	return lags
}

// jobTableSample is River's job table at one moment.
type jobTableSample struct {
	AtS         float64 `json:"at_s"`
	Rows        int64   `json:"rows"`
	LiveTuples  int64   `json:"live_tuples"`
	DeadTuples  int64   `json:"dead_tuples"`
	SizeMB      float64 `json:"size_mb"`
	Autovacuums int64   `json:"autovacuums"`
	Completed   int64   `json:"completed,omitempty"`
	OldestDoneS float64 `json:"oldest_completed_age_s,omitempty"`
}

// sampleJobTable samples River's job table every 5 s until ctx ends.
func (s *stage) sampleJobTable(ctx context.Context, t0 time.Duration) []jobTableSample {
	var out []jobTableSample
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
		out = append(out, s.jobTable(ctx, t0, false))
	}
}

// jobTable reads river_job's size and tuple counts; exact also counts the
// completed jobs and the oldest one's age.
func (s *stage) jobTable(ctx context.Context, t0 time.Duration, exact bool) jobTableSample {
	j := jobTableSample{AtS: round1((s.clock.now() - t0).Seconds())}
	var size int64
	_ = s.pool.QueryRow(ctx, `
		SELECT n_live_tup, n_dead_tup, autovacuum_count, pg_total_relation_size(relid), (SELECT count(*) FROM river_job)
		FROM pg_stat_user_tables WHERE relname = 'river_job'`).Scan(&j.LiveTuples, &j.DeadTuples, &j.Autovacuums, &size, &j.Rows)
	j.SizeMB = round1(float64(size) / (1 << 20))
	if exact {
		var age *float64
		_ = s.pool.QueryRow(ctx, `SELECT count(*), extract(epoch FROM now() - min(finalized_at)) FROM river_job WHERE state = 'completed'`).Scan(&j.Completed, &age)
		if age != nil {
			j.OldestDoneS = round1(*age)
		}
	}
	return j
}
