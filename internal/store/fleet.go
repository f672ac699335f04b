package store

import (
	"context"
	"fmt"
	"time"
)

// Heartbeat records that dispatcher id is alive, on the database's clock,
// forgets dispatchers silent for longer than stale, and returns how many
// are alive (id included): the fleet that shares each endpoint's rate
// limit.
func (s *Store) Heartbeat(ctx context.Context, id string, stale time.Duration) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `
		WITH me AS (
			INSERT INTO hookd_dispatchers (id) VALUES ($1)
			ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()
		), gone AS (
			DELETE FROM hookd_dispatchers WHERE id <> $1 AND heartbeat_at < now() - $2::interval
		)
		SELECT 1 + count(*) FROM hookd_dispatchers
		WHERE id <> $1 AND heartbeat_at >= now() - $2::interval`, id, stale).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("dispatcher heartbeat: %w", err)
	}
	return n, nil
}

// LeaveFleet deletes dispatcher id's heartbeat, so the others take its
// share at their next heartbeat instead of after it goes stale.
func (s *Store) LeaveFleet(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM hookd_dispatchers WHERE id = $1`, id); err != nil {
		return fmt.Errorf("leave dispatcher fleet: %w", err)
	}
	return nil
}
