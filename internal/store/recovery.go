package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ParkRecover is the park_reason of a failed delivery an operator queued
// again with RecoverDeliveries; a delivery parked by its breaker has none.
const ParkRecover = "recover"

// ErrRecoveryReleasing is returned by RecoverDeliveries while an earlier
// recovery of the same endpoint still has deliveries to release.
var ErrRecoveryReleasing = errors.New("a recovery of this endpoint is still releasing its deliveries")

// Recovery is what RecoverDeliveries did.
type Recovery struct {
	// Queued counts the failed deliveries parked for release, each as a
	// new attempt series.
	Queued int
	// PayloadExpired counts the failed deliveries in range left failed
	// because payload retention has dropped their message's payload.
	PayloadExpired int
}

// RecoverRange is the creation-time range [Since, Until) of the failed
// deliveries a recovery takes; a nil Until is open-ended.
type RecoverRange struct {
	Since time.Time
	Until *time.Time
}

// idSkew pads the id range a creation-time filter also prunes by: a
// delivery's id carries its message's time from the api's clock, created_at
// the database's.
const idSkew = time.Minute

// recoverSQL parks every failed delivery of an endpoint created in the
// range whose payload is still stored, as the start of a new attempt series
// (a manual retry's numbering and schedule: series_base is the attempt
// count), with no job and park_reason 'recover', so the unparker releases
// them oldest first at its pace; and counts those whose payload is gone.
const recoverSQL = `
	WITH c AS (
		SELECT d.id, p.message_id IS NULL AS gone
		FROM deliveries d LEFT JOIN message_payloads p ON p.message_id = d.message_id
		WHERE d.endpoint_id = $1 AND d.status = 'failed'
			AND d.created_at >= $2 AND ($3::timestamptz IS NULL OR d.created_at < $3)
			AND d.id >= $4 AND d.id < $5
		FOR UPDATE OF d
	), u AS (
		UPDATE deliveries d SET status = 'waiting', job_id = NULL, park_reason = 'recover',
			series = d.series + 1, series_base = d.attempt_count,
			next_attempt_at = NULL, breaker_open_until = NULL, updated_at = now()
		FROM c WHERE d.id = c.id AND NOT c.gone
		RETURNING 1
	)
	SELECT (SELECT count(*) FROM u), (SELECT count(*) FROM c WHERE gone)`

// recoverInLine is a FIFO endpoint's recovery: the failed deliveries go
// back in its queue, oldest first, behind those waiting (requeueInLine),
// where the unparker's pass finds them when the queue is idle.
func recoverInLine(ctx context.Context, tx pgx.Tx, endpointID string, r RecoverRange, lo, hi string) (Recovery, error) {
	// The deliveries are locked before the queue, as everywhere.
	rows, err := tx.Query(ctx, `
		SELECT d.id, p.message_id IS NULL
		FROM deliveries d LEFT JOIN message_payloads p ON p.message_id = d.message_id
		WHERE d.endpoint_id = $1 AND d.status = 'failed'
			AND d.created_at >= $2 AND ($3::timestamptz IS NULL OR d.created_at < $3)
			AND d.id >= $4 AND d.id < $5
		ORDER BY d.created_at, d.id
		FOR UPDATE OF d`, endpointID, r.Since, r.Until, lo, hi)
	if err != nil {
		return Recovery{}, fmt.Errorf("lock failed deliveries: %w", err)
	}
	var (
		out Recovery
		ids []string
	)
	for rows.Next() {
		var (
			id   string
			gone bool
		)
		if err := rows.Scan(&id, &gone); err != nil {
			rows.Close()
			return Recovery{}, fmt.Errorf("lock failed deliveries: %w", err)
		}
		if gone {
			out.PayloadExpired++
			continue
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Recovery{}, fmt.Errorf("lock failed deliveries: %w", err)
	}
	out.Queued = len(ids)
	if len(ids) == 0 {
		return out, nil
	}
	if _, err := lockQueues(ctx, tx, []string{endpointID}); err != nil {
		return Recovery{}, err
	}
	return out, requeueInLine(ctx, tx, endpointID, ids)
}

// RecoverDeliveries gives every failed delivery of an endpoint created in
// r a new attempt series, released by the dispatcher's unparker like a
// closed breaker's backlog: oldest first, at a pace, never all at once. It
// refuses with ErrRecoveryReleasing while an earlier recovery of the
// endpoint has deliveries still parked (recoveries of one endpoint are
// serialised by a transaction-level advisory lock, so two at once cannot
// both pass that check), and records an endpoint event naming actor.
func (s *Store) RecoverDeliveries(ctx context.Context, endpointID string, r RecoverRange, actor string) (Recovery, error) {
	var out Recovery
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('hookd_recover:' || $1, 0))`, endpointID); err != nil {
			return fmt.Errorf("lock endpoint recovery: %w", err)
		}
		var exists, releasing, fifo bool
		err := tx.QueryRow(ctx, `
			SELECT EXISTS (SELECT 1 FROM endpoints WHERE id = $1 AND deleted_at IS NULL),
				EXISTS (SELECT 1 FROM deliveries WHERE endpoint_id = $1 AND status = 'waiting' AND job_id IS NULL AND park_reason = 'recover'),
				EXISTS (SELECT 1 FROM endpoints WHERE id = $1 AND ordering = 'fifo')`,
			endpointID).Scan(&exists, &releasing, &fifo)
		switch {
		case err != nil:
			return fmt.Errorf("check endpoint recovery: %w", err)
		case !exists:
			return ErrNotFound
		case releasing:
			return ErrRecoveryReleasing
		}
		lo, hi := IDBound("dlv", r.Since.Add(-idSkew)), "dlv_~"
		if r.Until != nil {
			hi = IDBound("dlv", r.Until.Add(idSkew))
		}
		if fifo {
			if out, err = recoverInLine(ctx, tx, endpointID, r, lo, hi); err != nil {
				return err
			}
		} else if err := tx.QueryRow(ctx, recoverSQL, endpointID, r.Since, r.Until, lo, hi).Scan(&out.Queued, &out.PayloadExpired); err != nil {
			return fmt.Errorf("park failed deliveries: %w", err)
		}
		details := map[string]any{"since": r.Since.UTC(), "until": r.Until, "queued": out.Queued, "payload_expired": out.PayloadExpired}
		if _, err := tx.Exec(ctx, `INSERT INTO endpoint_events (endpoint_id, kind, details, actor) VALUES ($1, 'recovered', $2, $3)`,
			endpointID, details, actor); err != nil {
			return fmt.Errorf("record recovery: %w", err)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrRecoveryReleasing) {
			return Recovery{}, err
		}
		return Recovery{}, fmt.Errorf("recover deliveries: %w", err)
	}
	return out, nil
}
