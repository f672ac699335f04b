package main

import (
	"context"
	"fmt"
	"time"
)

// riverJobSample is where river_job's bytes are at one soak sample and
// why: the heap, its TOAST and each index apart, the rows by kind and
// state (and those finalized before the completed-job retention, which
// River's cleaner should have deleted), and what vacuum has done to the
// table. A table that grows shows here which part grows.
type riverJobSample struct {
	HeapBytes  int64            `json:"heap_bytes"`
	ToastBytes int64            `json:"toast_bytes"`
	IndexBytes map[string]int64 `json:"index_bytes"`
	// Rows and PastRetention are keyed "kind state".
	Rows          map[string]int64 `json:"rows"`
	PastRetention map[string]int64 `json:"past_retention"`
	LiveTuples    int64            `json:"n_live_tup"`
	DeadTuples    int64            `json:"n_dead_tup"`
	Autovacuums   int64            `json:"autovacuum_count"`
	Autoanalyzes  int64            `json:"autoanalyze_count"`
	// SinceAutovacuumS is how long before the sample the last autovacuum
	// ended; -1 when none has run.
	SinceAutovacuumS float64 `json:"since_autovacuum_s"`
}

// riverJob samples river_job; retention is the completed-job retention
// the dispatcher was given.
func (s *stage) riverJob(ctx context.Context, retention time.Duration) (*riverJobSample, error) {
	out := &riverJobSample{IndexBytes: map[string]int64{}, Rows: map[string]int64{}, PastRetention: map[string]int64{}}
	if err := s.pool.QueryRow(ctx, `
		SELECT pg_relation_size(c.oid), coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0),
			t.n_live_tup, t.n_dead_tup, t.autovacuum_count, t.autoanalyze_count,
			coalesce(extract(epoch FROM now() - t.last_autovacuum), -1)::float8
		FROM pg_class c JOIN pg_stat_user_tables t ON t.relid = c.oid
		WHERE c.oid = 'river_job'::regclass`).Scan(&out.HeapBytes, &out.ToastBytes,
		&out.LiveTuples, &out.DeadTuples, &out.Autovacuums, &out.Autoanalyzes, &out.SinceAutovacuumS); err != nil {
		return nil, fmt.Errorf("river_job sizes: %w", err)
	}
	rows, err := s.pool.Query(ctx, `
		SELECT indexrelname, pg_relation_size(indexrelid) FROM pg_stat_user_indexes WHERE relname = 'river_job'`)
	if err != nil {
		return nil, fmt.Errorf("river_job indexes: %w", err)
	}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("river_job indexes: %w", err)
		}
		out.IndexBytes[name] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("river_job indexes: %w", err)
	}
	rows, err = s.pool.Query(ctx, `
		SELECT kind || ' ' || state::text, count(*),
			count(*) FILTER (WHERE finalized_at < now() - make_interval(secs => $1))
		FROM river_job GROUP BY 1`, retention.Seconds())
	if err != nil {
		return nil, fmt.Errorf("river_job rows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var n, past int64
		if err := rows.Scan(&key, &n, &past); err != nil {
			return nil, fmt.Errorf("river_job rows: %w", err)
		}
		out.Rows[key] = n
		if past > 0 {
			out.PastRetention[key] = past
		}
	}
	return out, rows.Err()
}
