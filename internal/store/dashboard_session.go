package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// NewDashboardSession is an operator dashboard session to store: the
// signed cookie carries its ID, and the row says whether it still holds.
type NewDashboardSession struct {
	// ID is the cookie's session id.
	ID string
	// TokenID is the id of the token the session was opened with (a
	// stored token's, or "bootstrap"); empty for a token without one.
	TokenID string
	// Name is the token's name, the session's actor.
	Name string
	// ExpiresIn ends the session that long after its creation.
	ExpiresIn time.Duration
}

// CreateDashboardSession stores a dashboard session (times by the database
// clock), removing sessions that ended more than a day ago as it goes.
func (s *Store) CreateDashboardSession(ctx context.Context, in NewDashboardSession) error {
	var tokenID *string
	if in.TokenID != "" {
		tokenID = &in.TokenID
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM dashboard_sessions
			WHERE expires_at < now() - interval '1 day' OR ended_at < now() - interval '1 day'`); err != nil {
			return fmt.Errorf("prune dashboard sessions: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO dashboard_sessions (id, token_id, name, expires_at)
			VALUES ($1, $2, $3, now() + make_interval(secs => $4))`, in.ID, tokenID, in.Name, in.ExpiresIn.Seconds()); err != nil {
			return fmt.Errorf("insert dashboard session: %w", err)
		}
		return nil
	})
}

// LiveDashboardSession reports whether the dashboard session id is stored,
// not ended and not expired (by the database clock).
func (s *Store) LiveDashboardSession(ctx context.Context, id string) (bool, error) {
	var live bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM dashboard_sessions
		WHERE id = $1 AND ended_at IS NULL AND expires_at > now())`, id).Scan(&live)
	if err != nil {
		return false, fmt.Errorf("look up dashboard session: %w", err)
	}
	return live, nil
}

// EndDashboardSession ends the dashboard session id (a logout); ending one
// that is ended, expired or unknown does nothing.
func (s *Store) EndDashboardSession(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE dashboard_sessions SET ended_at = now() WHERE id = $1 AND ended_at IS NULL`, id); err != nil {
		return fmt.Errorf("end dashboard session: %w", err)
	}
	return nil
}
