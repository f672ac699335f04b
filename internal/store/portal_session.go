package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PortalSession is a tenant portal session: what its cookie lets a browser
// do (one tenant, maybe read-only) and how the portal looks.
type PortalSession struct {
	ID        string
	TenantID  string
	ReadOnly  bool
	Theme     json.RawMessage
	CreatedBy string
	CreatedAt time.Time
	ExpiresAt time.Time
	// CodeExpiresAt is when the one-time code stops being exchangeable.
	CodeExpiresAt time.Time
}

const portalSessionColumns = `id, tenant_id, read_only, theme, created_by, created_at, expires_at, code_expires_at`

func portalSessionDest(p *PortalSession) []any {
	return []any{&p.ID, &p.TenantID, &p.ReadOnly, &p.Theme, &p.CreatedBy, &p.CreatedAt, &p.ExpiresAt, &p.CodeExpiresAt}
}

func scanPortalSession(row pgx.Row) (PortalSession, error) {
	var p PortalSession
	err := row.Scan(portalSessionDest(&p)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return PortalSession{}, ErrNotFound
	}
	return p, err
}

// NewPortalSession is a portal session to open.
type NewPortalSession struct {
	TenantID string
	ReadOnly bool
	// Theme is the portal's look, as the API validated it.
	Theme json.RawMessage
	// CodeSum is the SHA-256 of the one-time code; the code is never stored.
	CodeSum [32]byte
	// CodeTTL bounds how long the code may wait for its exchange.
	CodeTTL time.Duration
	// ExpiresIn ends the session that long after its creation.
	ExpiresIn time.Duration
	// CreatedBy names the admin token that opened it.
	CreatedBy string
}

// CreatePortalSession stores a portal session (times by the database
// clock), removing sessions that ended more than a day ago as it goes.
func (s *Store) CreatePortalSession(ctx context.Context, in NewPortalSession) (PortalSession, error) {
	if in.Theme == nil {
		in.Theme = json.RawMessage(`{}`)
	}
	codeTTL := min(in.CodeTTL, in.ExpiresIn)
	var out PortalSession
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM portal_sessions WHERE expires_at < now() - interval '1 day'`); err != nil {
			return fmt.Errorf("prune portal sessions: %w", err)
		}
		var err error
		out, err = scanPortalSession(tx.QueryRow(ctx, `
			INSERT INTO portal_sessions (id, tenant_id, read_only, theme, code_sha256, code_expires_at, created_by, expires_at)
			VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6), $7, now() + make_interval(secs => $8))
			RETURNING `+portalSessionColumns,
			NewID("ps", time.Now()), in.TenantID, in.ReadOnly, in.Theme, in.CodeSum[:], codeTTL.Seconds(), in.CreatedBy, in.ExpiresIn.Seconds()))
		if err != nil {
			return fmt.Errorf("insert portal session: %w", err)
		}
		return nil
	})
	return out, err
}

// ExchangePortalCode consumes a one-time code: in one statement, the
// session whose code has codeSum, unused and not expired, is marked used
// and bound to the cookie token of sessionSum. A used, expired or unknown
// code is ErrNotFound; of two concurrent exchanges of one code exactly one
// succeeds.
func (s *Store) ExchangePortalCode(ctx context.Context, codeSum, sessionSum [32]byte) (PortalSession, error) {
	p, err := scanPortalSession(s.pool.QueryRow(ctx, `
		UPDATE portal_sessions SET code_used_at = now(), session_sha256 = $2
		WHERE code_sha256 = $1 AND code_used_at IS NULL AND code_expires_at > now() AND expires_at > now()
		RETURNING `+portalSessionColumns, codeSum[:], sessionSum[:]))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return PortalSession{}, fmt.Errorf("exchange portal code: %w", err)
	}
	return p, err
}

// LookupPortalSession returns the live session whose cookie token has
// sessionSum, or ErrNotFound.
func (s *Store) LookupPortalSession(ctx context.Context, sessionSum [32]byte) (PortalSession, error) {
	p, err := scanPortalSession(s.pool.QueryRow(ctx, `
		SELECT `+portalSessionColumns+` FROM portal_sessions WHERE session_sha256 = $1 AND expires_at > now()`, sessionSum[:]))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return PortalSession{}, fmt.Errorf("look up portal session: %w", err)
	}
	return p, err
}
