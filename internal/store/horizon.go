package store

import (
	"context"
	"fmt"
	"time"
)

// HorizonTables are the tables every delivery writes, whose dead rows a
// long transaction keeps: vacuum may not remove a row version that a
// snapshot still open could see, and the scans that skip them slow down.
var HorizonTables = []string{"river_job", "deliveries", "delivery_attempts", "messages", "message_payloads", "breaker_states", "breaker_slots"}

// Horizon is what holds back PostgreSQL's cleanup of hookd's rows, as
// hookd's role sees it.
type Horizon struct {
	// OldestTransaction is how long the longest-open transaction of a
	// session on hookd's database has been open (pg_dump holds one for
	// the whole dump). Sessions of other roles count only when hookd's
	// role may read their activity (pg_read_all_stats, pg_monitor).
	OldestTransaction time.Duration
	// SnapshotAge is how many transactions the oldest snapshot among
	// those sessions is behind (age of backend_xmin): the rows changed
	// since it began are the ones vacuum must keep.
	SnapshotAge int64
	// DeadTuples is each HorizonTables entry's dead row versions, its
	// partitions summed, as the statistics collector last counted them.
	DeadTuples map[string]int64
}

// Horizon measures what holds back vacuum on hookd's database and the
// dead rows of the tables every delivery writes.
func (s *Store) Horizon(ctx context.Context) (Horizon, error) {
	h := Horizon{DeadTuples: make(map[string]int64, len(HorizonTables))}
	// Only this database's sessions: vacuum of a database's own tables
	// waits only for them (and for replication with feedback, which
	// pg_stat_activity does not show as a transaction).
	var seconds float64
	if err := s.pool.QueryRow(ctx, `
		SELECT coalesce(extract(epoch FROM max(now() - xact_start)), 0)::float8,
			coalesce(max(age(backend_xmin)), 0)::bigint
		FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL`).Scan(&seconds, &h.SnapshotAge); err != nil {
		return Horizon{}, fmt.Errorf("oldest transaction: %w", err)
	}
	h.OldestTransaction = time.Duration(max(seconds, 0) * float64(time.Second))
	for _, t := range HorizonTables {
		h.DeadTuples[t] = 0
	}
	rows, err := s.pool.Query(ctx, `
		SELECT root, sum(n_dead_tup)::bigint FROM (
			SELECT coalesce(pg_partition_root(relid), relid)::regclass::text AS root, n_dead_tup
			FROM pg_stat_user_tables
			WHERE schemaname = current_schema()
		) t
		WHERE root = ANY($1)
		GROUP BY root`, HorizonTables)
	if err != nil {
		return Horizon{}, fmt.Errorf("dead tuples: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var table string
		var n int64
		if err := rows.Scan(&table, &n); err != nil {
			return Horizon{}, fmt.Errorf("dead tuples: %w", err)
		}
		h.DeadTuples[table] = n
	}
	if err := rows.Err(); err != nil {
		return Horizon{}, fmt.Errorf("dead tuples: %w", err)
	}
	return h, nil
}
