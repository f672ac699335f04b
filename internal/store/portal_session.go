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
	// CreatedByTokenID is the id of the token that opened the session
	// ("bootstrap" for API_TOKEN; empty when unknown): revoking it ends
	// the session.
	CreatedByTokenID string
	CreatedAt        time.Time
	ExpiresAt        time.Time
	// CodeExpiresAt is when the one-time code stops being exchangeable;
	// CodeUsedAt when it was exchanged for the session's cookie.
	CodeExpiresAt time.Time
	CodeUsedAt    *time.Time
	// EndedAt is when the session was ended before its expiry: by its
	// logout, by an admin or by its token's revoke.
	EndedAt *time.Time
}

const portalSessionColumns = `id, tenant_id, read_only, theme, created_by, coalesce(created_by_token_id, ''), created_at, expires_at,
	code_expires_at, code_used_at, ended_at`

func portalSessionDest(p *PortalSession) []any {
	return []any{&p.ID, &p.TenantID, &p.ReadOnly, &p.Theme, &p.CreatedBy, &p.CreatedByTokenID, &p.CreatedAt, &p.ExpiresAt,
		&p.CodeExpiresAt, &p.CodeUsedAt, &p.EndedAt}
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
	// CreatedBy names the admin token that opened it, CreatedByTokenID is
	// its id (empty for a token without one).
	CreatedBy        string
	CreatedByTokenID string
}

// CreatePortalSession stores a portal session (times by the database
// clock), removing sessions that ended more than a day ago as it goes.
func (s *Store) CreatePortalSession(ctx context.Context, in NewPortalSession) (PortalSession, error) {
	if in.Theme == nil {
		in.Theme = json.RawMessage(`{}`)
	}
	var tokenID *string
	if in.CreatedByTokenID != "" {
		tokenID = &in.CreatedByTokenID
	}
	codeTTL := min(in.CodeTTL, in.ExpiresIn)
	var out PortalSession
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM portal_sessions
			WHERE expires_at < now() - interval '1 day' OR ended_at < now() - interval '1 day'`); err != nil {
			return fmt.Errorf("prune portal sessions: %w", err)
		}
		var err error
		out, err = scanPortalSession(tx.QueryRow(ctx, `
			INSERT INTO portal_sessions (id, tenant_id, read_only, theme, code_sha256, code_expires_at, created_by, expires_at, created_by_token_id)
			VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6), $7, now() + make_interval(secs => $8), $9)
			RETURNING `+portalSessionColumns,
			NewID("ps", time.Now()), in.TenantID, in.ReadOnly, in.Theme, in.CodeSum[:], codeTTL.Seconds(), in.CreatedBy, in.ExpiresIn.Seconds(), tokenID))
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
// code, or one of an ended session, is ErrNotFound; of two concurrent
// exchanges of one code exactly one succeeds.
func (s *Store) ExchangePortalCode(ctx context.Context, codeSum, sessionSum [32]byte) (PortalSession, error) {
	p, err := scanPortalSession(s.pool.QueryRow(ctx, `
		UPDATE portal_sessions SET code_used_at = now(), session_sha256 = $2
		WHERE code_sha256 = $1 AND code_used_at IS NULL AND code_expires_at > now() AND expires_at > now() AND ended_at IS NULL
		RETURNING `+portalSessionColumns, codeSum[:], sessionSum[:]))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return PortalSession{}, fmt.Errorf("exchange portal code: %w", err)
	}
	return p, err
}

// LookupPortalSession returns the live (unexpired, not ended) session
// whose cookie token has sessionSum, or ErrNotFound.
func (s *Store) LookupPortalSession(ctx context.Context, sessionSum [32]byte) (PortalSession, error) {
	p, err := scanPortalSession(s.pool.QueryRow(ctx, `
		SELECT `+portalSessionColumns+` FROM portal_sessions
		WHERE session_sha256 = $1 AND expires_at > now() AND ended_at IS NULL`, sessionSum[:]))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return PortalSession{}, fmt.Errorf("look up portal session: %w", err)
	}
	return p, err
}

// ListPortalSessions returns a page of tenant's portal sessions in id
// (creation) order: live, ended and expired ones, until they are pruned a
// day after their end.
func (s *Store) ListPortalSessions(ctx context.Context, tenant string, p Page) ([]PortalSession, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+portalSessionColumns+` FROM portal_sessions
		WHERE tenant_id = $1 AND id > $2 ORDER BY id LIMIT $3`, tenant, p.After, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list portal sessions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (PortalSession, error) {
		var ps PortalSession
		err := row.Scan(portalSessionDest(&ps)...)
		return ps, err
	})
	if err != nil {
		return nil, fmt.Errorf("list portal sessions: %w", err)
	}
	return out, nil
}

// EndPortalSession ends the live session id at once: its cookie, and its
// code if unused, reach nothing from then. It returns the session, or
// ErrNotFound when no live session has the id (an ended or expired one
// included).
func (s *Store) EndPortalSession(ctx context.Context, id string) (PortalSession, error) {
	p, err := scanPortalSession(s.pool.QueryRow(ctx, `
		UPDATE portal_sessions SET ended_at = now()
		WHERE id = $1 AND ended_at IS NULL AND expires_at > now()
		RETURNING `+portalSessionColumns, id))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return PortalSession{}, fmt.Errorf("end portal session: %w", err)
	}
	return p, err
}
