package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hookd/hookd/internal/delivery"
)

// fetchSample is River's fetch and its job table at one second of a rate
// run: what the fetch's cost follows as the queue churns. The fetch
// statement's figures are cumulative from the run's start
// (pg_stat_statements is reset then).
type fetchSample struct {
	AtS         float64 `json:"at_s"`
	FetchCalls  int64   `json:"fetch_calls"`
	FetchMs     float64 `json:"fetch_ms"`
	LiveTuples  int64   `json:"live_tuples"`
	DeadTuples  int64   `json:"dead_tuples"`
	Autovacuums int64   `json:"autovacuums"`
	// IndexKB is the size of the index the fetch reads
	// (river_job_prioritized_fetching_index).
	IndexKB int64 `json:"fetch_index_kb"`
	// ScanBuffers and ScanMs are what a read of the fetch's first 100
	// available jobs (the fetch without its lock and update) touched and
	// took, every fifth sample; zero in the others.
	ScanBuffers int64   `json:"scan_buffers,omitempty"`
	ScanMs      float64 `json:"scan_ms,omitempty"`
}

// fetchHealth samples River's fetch on the stage's database; scan also
// times a read of the fetch's first 100 available jobs with EXPLAIN
// (ANALYZE, BUFFERS), which locks and changes nothing.
func (s *stage) fetchHealth(ctx context.Context, t0 time.Duration, scan bool) (fetchSample, error) {
	f := fetchSample{AtS: round1((s.clock.now() - t0).Seconds())}
	if err := s.pool.QueryRow(ctx, `
		SELECT coalesce(sum(calls), 0)::bigint, coalesce(sum(total_exec_time), 0)
		FROM pg_stat_statements WHERE dbid = $1 AND query LIKE '%locked_jobs%'`, s.oid).Scan(&f.FetchCalls, &f.FetchMs); err != nil {
		return f, fmt.Errorf("read the fetch's statements: %w", err)
	}
	if err := s.pool.QueryRow(ctx, `
		SELECT n_live_tup, n_dead_tup, autovacuum_count,
			coalesce(pg_relation_size(to_regclass('river_job_prioritized_fetching_index')), 0) / 1024
		FROM pg_stat_user_tables WHERE relname = 'river_job'`).Scan(&f.LiveTuples, &f.DeadTuples, &f.Autovacuums, &f.IndexKB); err != nil {
		return f, fmt.Errorf("read river_job's statistics: %w", err)
	}
	f.FetchMs = round1(f.FetchMs)
	if !scan {
		return f, nil
	}
	var plan []byte
	if err := s.pool.QueryRow(ctx, `
		EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
		SELECT id FROM river_job
		WHERE state = 'available' AND queue = $1 AND scheduled_at <= now()
		ORDER BY priority, scheduled_at, id LIMIT 100`, delivery.QueueDeliver).Scan(&plan); err != nil {
		return f, fmt.Errorf("explain the fetch's read: %w", err)
	}
	var out []struct {
		Plan struct {
			SharedHit  int64 `json:"Shared Hit Blocks"`
			SharedRead int64 `json:"Shared Read Blocks"`
		} `json:"Plan"`
		ExecutionTime float64 `json:"Execution Time"`
	}
	if json.Unmarshal(plan, &out) == nil && len(out) == 1 {
		f.ScanBuffers = out[0].Plan.SharedHit + out[0].Plan.SharedRead
		f.ScanMs = round2(out[0].ExecutionTime)
	}
	return f, nil
}

// fetchCostByWindow returns the fetch's mean microseconds per call in each
// window of the samples (10 s), with the window's largest dead tuple
// count: whether the fetch's cost follows the job table's dead tuples.
func fetchCostByWindow(samples []fetchSample, window float64) []map[string]float64 {
	var out []map[string]float64
	var prev fetchSample
	var dead int64
	next := window
	for _, f := range samples {
		dead = max(dead, f.DeadTuples)
		if f.AtS < next {
			continue
		}
		w := map[string]float64{"to_s": round1(f.AtS), "fetch_calls": float64(f.FetchCalls - prev.FetchCalls), "max_dead_tuples": float64(dead)}
		if n := f.FetchCalls - prev.FetchCalls; n > 0 {
			w["fetch_us_per_call"] = round1((f.FetchMs - prev.FetchMs) * 1000 / float64(n))
		}
		out = append(out, w)
		prev, dead, next = f, 0, f.AtS+window
	}
	return out
}
