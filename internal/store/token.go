package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Token scopes: an admin token reaches every tenant and the operational
// routes; a tenant token reaches only its TenantID's objects.
const (
	ScopeAdmin  = "admin"
	ScopeTenant = "tenant"
)

// APIToken is a stored API token as listed: never the token, nor its hash.
type APIToken struct {
	ID   string
	Name string
	// Scope is ScopeAdmin or ScopeTenant; TenantID is set exactly for
	// ScopeTenant.
	Scope    string
	TenantID string
	// ReadOnly tokens may make no change.
	ReadOnly   bool
	CreatedAt  time.Time
	ExpiresAt  *time.Time
	LastUsedAt *time.Time
	RevokedAt  *time.Time
}

const apiTokenColumns = `id, name, scope, coalesce(tenant_id, ''), read_only, created_at, expires_at, last_used_at, revoked_at`

func apiTokenDest(t *APIToken) []any {
	return []any{&t.ID, &t.Name, &t.Scope, &t.TenantID, &t.ReadOnly, &t.CreatedAt, &t.ExpiresAt, &t.LastUsedAt, &t.RevokedAt}
}

// liveToken is the condition of a token that authenticates: not revoked
// and not expired, by the database clock.
const liveToken = `revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`

// NewAPIToken is a token to store.
type NewAPIToken struct {
	Name string
	// Sum is the token's SHA-256; the token itself is never stored.
	Sum [32]byte
	// Scope is ScopeAdmin or ScopeTenant.
	Scope string
	// TenantID is the tenant a ScopeTenant token is bound to, and empty
	// for a ScopeAdmin one.
	TenantID string
	ReadOnly bool
	// ExpiresIn, when positive, ends the token that long after its
	// creation (by the database clock).
	ExpiresIn time.Duration
}

// ErrTokenScope is a token to store whose scope and tenant disagree: an
// admin token names no tenant, a tenant token names one.
var ErrTokenScope = errors.New("a token's scope is admin without a tenant or tenant with one")

// CreateAPIToken stores a token by its SHA-256 sum. It returns ErrConflict
// when a live token already has the name, ErrTokenScope when in's scope and
// tenant disagree.
func (s *Store) CreateAPIToken(ctx context.Context, in NewAPIToken) (APIToken, error) {
	var tenant *string
	switch {
	case in.Scope == ScopeAdmin && in.TenantID == "":
	case in.Scope == ScopeTenant && in.TenantID != "":
		tenant = &in.TenantID
	default:
		return APIToken{}, fmt.Errorf("create api token %q: %w", in.Name, ErrTokenScope)
	}
	var expiresIn *float64
	if in.ExpiresIn > 0 {
		secs := in.ExpiresIn.Seconds()
		expiresIn = &secs
	}
	var t APIToken
	err := s.pool.QueryRow(ctx, `
		INSERT INTO api_tokens (id, name, sha256, scope, tenant_id, read_only, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7))
		RETURNING `+apiTokenColumns, NewID("tok", time.Now()), in.Name, in.Sum[:], in.Scope, tenant, in.ReadOnly, expiresIn).Scan(apiTokenDest(&t)...)
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "api_tokens_live_name_idx":
		return APIToken{}, fmt.Errorf("%w: a live token is already named %q", ErrConflict, in.Name)
	case isUniqueViolation(err):
		return APIToken{}, fmt.Errorf("%w: the token is already stored", ErrConflict)
	}
	if err != nil {
		return APIToken{}, fmt.Errorf("insert api token: %w", err)
	}
	return t, nil
}

// ListAPITokens returns a page of tokens, revoked and expired ones
// included, oldest first; a zero Limit means every token.
func (s *Store) ListAPITokens(ctx context.Context, p Page) ([]APIToken, error) {
	limit := (*int)(nil)
	if p.Limit > 0 {
		limit = &p.Limit
	}
	rows, err := s.pool.Query(ctx, `SELECT `+apiTokenColumns+` FROM api_tokens WHERE id > $1 ORDER BY id LIMIT $2`, p.After, limit)
	if err != nil {
		return nil, fmt.Errorf("list api tokens: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (APIToken, error) {
		var t APIToken
		err := row.Scan(apiTokenDest(&t)...)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("list api tokens: %w", err)
	}
	return out, nil
}

// TokenRef names one token: by ID or, when ID is empty, by Name (which
// names at most one live token).
type TokenRef struct {
	ID   string
	Name string
}

// RevokeAPIToken revokes the unrevoked token ref names (an expired one
// included) and returns it, ending in the same transaction every portal
// session the token opened (its dashboard sessions end as they find it
// revoked). It returns ErrNotFound when none matches.
func (s *Store) RevokeAPIToken(ctx context.Context, ref TokenRef) (APIToken, error) {
	col, val := "id", ref.ID
	if ref.ID == "" {
		col, val = "name", ref.Name
	}
	var t APIToken
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
			UPDATE api_tokens SET revoked_at = now()
			WHERE `+col+` = $1 AND revoked_at IS NULL
			RETURNING `+apiTokenColumns, val).Scan(apiTokenDest(&t)...)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("revoke api token: %w", err)
		}
		ended, err := tx.Exec(ctx, `UPDATE portal_sessions SET ended_at = now()
			WHERE created_by_token_id = $1 AND ended_at IS NULL`, t.ID)
		if err != nil {
			return fmt.Errorf("end the revoked token's portal sessions: %w", err)
		}
		if n := ended.RowsAffected(); n > 0 {
			s.logger.InfoContext(ctx, "portal_sessions_ended", slog.String("token_id", t.ID), slog.Int64("sessions", n),
				slog.String("reason", "token revoked"))
		}
		return nil
	})
	if err != nil {
		return APIToken{}, err
	}
	return t, nil
}

// TokenUseResolution is how often a token's last_used_at is written at most.
const TokenUseResolution = time.Minute

// LookupAPIToken returns the live token whose SHA-256 is sum, with the
// stored hash for the caller's constant-time comparison, and stamps its
// last use in the same statement, writing at most once per
// TokenUseResolution. It returns ErrNotFound for an unknown, revoked or
// expired token.
func (s *Store) LookupAPIToken(ctx context.Context, sum [32]byte) (APIToken, []byte, error) {
	var (
		t      APIToken
		stored []byte
	)
	err := s.pool.QueryRow(ctx, `
		WITH live AS (
			SELECT * FROM api_tokens WHERE sha256 = $1 AND `+liveToken+`
		), touched AS (
			UPDATE api_tokens a SET last_used_at = now() FROM live
			WHERE a.id = live.id AND (a.last_used_at IS NULL OR a.last_used_at < now() - make_interval(secs => $2))
		)
		SELECT `+apiTokenColumns+`, sha256 FROM live`, sum[:], TokenUseResolution.Seconds()).Scan(append(apiTokenDest(&t), &stored)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return APIToken{}, nil, ErrNotFound
	}
	if err != nil {
		return APIToken{}, nil, fmt.Errorf("look up api token: %w", err)
	}
	return t, stored, nil
}

// LiveAdminToken reports whether the token of id is live (unrevoked,
// unexpired), writable and an admin's. A dashboard session carries its
// token's id, not the token itself, so this is how a session learns that
// its token was revoked or expired; a later token of the same name is
// another token and keeps no earlier session alive.
func (s *Store) LiveAdminToken(ctx context.Context, id string) (bool, error) {
	var live bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM api_tokens
		WHERE id = $1 AND scope = 'admin' AND NOT read_only AND `+liveToken+`)`, id).Scan(&live)
	if err != nil {
		return false, fmt.Errorf("look up api token: %w", err)
	}
	return live, nil
}
