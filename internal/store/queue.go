package store

import (
	"context"
	"fmt"
	"time"
)

// QueueStates are the River job states of unfinished work, as QueueStats
// reports them.
var QueueStates = []string{"available", "pending", "retryable", "running", "scheduled"}

// QueueStats is a snapshot of one River queue.
type QueueStats struct {
	// Depth counts the deliveries of the queue's unfinished jobs by
	// state: one for a delivery job, each delivery a message job names.
	// Every QueueStates entry is present.
	Depth map[string]int64
	// Jobs counts the queue's unfinished jobs by state, likewise.
	Jobs map[string]int64
	// OldestAvailable is how long the longest-waiting available job has
	// been due: the backlog's age. Zero when no job is available.
	OldestAvailable time.Duration
}

// QueueStats counts the unfinished jobs of a River queue by state and
// measures how long its oldest available job has been waiting. Both
// statements read River's fetch index (state, queue, priority,
// scheduled_at): the count touches unfinished jobs only, never the
// completed ones River keeps for a while, and the age is one index probe
// per River priority (1 to 4).
func (s *Store) QueueStats(ctx context.Context, queue string) (QueueStats, error) {
	st := QueueStats{Depth: make(map[string]int64, len(QueueStates)), Jobs: make(map[string]int64, len(QueueStates))}
	for _, state := range QueueStates {
		st.Depth[state], st.Jobs[state] = 0, 0
	}
	// A message job's deliveries are the entries of its arguments' list
	// (delivery.MessageArgs, every version's shape).
	rows, err := s.pool.Query(ctx, `
		SELECT state::text, count(*),
			coalesce(sum(CASE WHEN kind = 'deliver_message'
				THEN coalesce(jsonb_array_length(args->'endpoints'), 0) + coalesce(jsonb_array_length(args->'deliveries'), 0)
				ELSE 1 END), 0)::bigint
		FROM river_job
		WHERE state = ANY($2::text[]::river_job_state[]) AND queue = $1
		GROUP BY state`, queue, QueueStates)
	if err != nil {
		return QueueStats{}, fmt.Errorf("queue depth: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var state string
		var jobs, deliveries int64
		if err := rows.Scan(&state, &jobs, &deliveries); err != nil {
			return QueueStats{}, fmt.Errorf("queue depth: %w", err)
		}
		st.Depth[state], st.Jobs[state] = deliveries, jobs
	}
	if err := rows.Err(); err != nil {
		return QueueStats{}, fmt.Errorf("queue depth: %w", err)
	}
	var seconds float64
	if err := s.pool.QueryRow(ctx, `
		SELECT coalesce(greatest(extract(epoch FROM now() - min(oldest)), 0), 0)::float8
		FROM (
			SELECT (SELECT scheduled_at FROM river_job
				WHERE state = 'available' AND queue = $1 AND priority = p
				ORDER BY scheduled_at LIMIT 1) AS oldest
			FROM generate_series(1, 4) AS p
		) per_priority`, queue).Scan(&seconds); err != nil {
		return QueueStats{}, fmt.Errorf("oldest available job: %w", err)
	}
	st.OldestAvailable = time.Duration(seconds * float64(time.Second))
	return st, nil
}
