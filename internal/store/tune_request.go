package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TuneRequest is an on-demand tuning pass of a class, queued for the
// fleet's tuning leader, and where it stands.
type TuneRequest struct {
	ID           int64
	Class        string
	Since, Until time.Time
	// Status is TuneQueued, TuneRunning, TuneDone or TuneFailed.
	Status string
	// Error says why a failed pass failed.
	Error       string
	RequestedAt time.Time
	StartedAt   *time.Time
	FinishedAt  *time.Time
}

// The statuses of a TuneRequest.
const (
	TuneQueued  = "queued"
	TuneRunning = "running"
	TuneDone    = "done"
	TuneFailed  = "failed"
)

// ErrTuneQueued is returned when a pass of the class is already queued or
// running.
var ErrTuneQueued = fmt.Errorf("%w: a tuning pass of the class is already queued or running", ErrConflict)

const tuneRequestColumns = `id, class, since, until, status, error, requested_at, started_at, finished_at`

func scanTuneRequest(row pgx.Row) (TuneRequest, error) {
	var r TuneRequest
	err := row.Scan(&r.ID, &r.Class, &r.Since, &r.Until, &r.Status, &r.Error, &r.RequestedAt, &r.StartedAt, &r.FinishedAt)
	return r, err
}

// QueueTune queues a pass of class over [since, until): ErrTuneQueued
// while one is queued or running, ErrNotFound for no such class.
func (s *Store) QueueTune(ctx context.Context, class string, since, until time.Time) (TuneRequest, error) {
	r, err := scanTuneRequest(s.pool.QueryRow(ctx, `
		INSERT INTO class_tune_requests (class, since, until) VALUES ($1, $2, $3)
		RETURNING `+tuneRequestColumns, class, since, until))
	var pe *pgconn.PgError
	switch {
	case isUniqueViolation(err):
		return TuneRequest{}, ErrTuneQueued
	case errors.As(err, &pe) && pe.Code == "23503":
		return TuneRequest{}, ErrNotFound
	case err != nil:
		return TuneRequest{}, fmt.Errorf("queue tuning pass: %w", err)
	}
	return r, nil
}

// LatestTune returns class's latest tuning request; ErrNotFound without
// one.
func (s *Store) LatestTune(ctx context.Context, class string) (TuneRequest, error) {
	r, err := scanTuneRequest(s.pool.QueryRow(ctx, `
		SELECT `+tuneRequestColumns+` FROM class_tune_requests WHERE class = $1 ORDER BY id DESC LIMIT 1`, class))
	if errors.Is(err, pgx.ErrNoRows) {
		return TuneRequest{}, ErrNotFound
	}
	if err != nil {
		return TuneRequest{}, fmt.Errorf("read tuning request: %w", err)
	}
	return r, nil
}

// ClaimTune marks the oldest queued request running and returns it; false
// when none is queued.
func (s *Store) ClaimTune(ctx context.Context) (TuneRequest, bool, error) {
	r, err := scanTuneRequest(s.pool.QueryRow(ctx, `
		UPDATE class_tune_requests SET status = 'running', started_at = now()
		WHERE id = (SELECT id FROM class_tune_requests WHERE status = 'queued' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
		RETURNING `+tuneRequestColumns))
	if errors.Is(err, pgx.ErrNoRows) {
		return TuneRequest{}, false, nil
	}
	if err != nil {
		return TuneRequest{}, false, fmt.Errorf("claim tuning request: %w", err)
	}
	return r, true, nil
}

// FinishTune marks a running request done, or failed with failure when it
// is not empty.
func (s *Store) FinishTune(ctx context.Context, id int64, failure string) error {
	status := TuneDone
	if failure != "" {
		status = TuneFailed
	}
	if _, err := s.pool.Exec(ctx, `
		UPDATE class_tune_requests SET status = $2, error = $3, finished_at = now() WHERE id = $1 AND status = 'running'`,
		id, status, failure); err != nil {
		return fmt.Errorf("finish tuning request: %w", err)
	}
	return nil
}

// RequeueTunes queues again the requests left running: a new tuning
// leader calls it, since only the leader runs them and the last one
// stopped.
func (s *Store) RequeueTunes(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, `UPDATE class_tune_requests SET status = 'queued', started_at = NULL WHERE status = 'running'`); err != nil {
		return fmt.Errorf("requeue tuning requests: %w", err)
	}
	return nil
}
