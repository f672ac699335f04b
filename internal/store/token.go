package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// APIToken is a stored API token as listed: never the token, nor its hash.
type APIToken struct {
	ID         string
	Name       string
	CreatedAt  time.Time
	LastUsedAt *time.Time
	RevokedAt  *time.Time
}

const apiTokenColumns = `id, name, created_at, last_used_at, revoked_at`

func apiTokenDest(t *APIToken) []any {
	return []any{&t.ID, &t.Name, &t.CreatedAt, &t.LastUsedAt, &t.RevokedAt}
}

// CreateAPIToken stores a token under name by its SHA-256 sum (the token
// itself is never stored). It returns ErrConflict when a live token already
// has the name.
func (s *Store) CreateAPIToken(ctx context.Context, name string, sum [32]byte) (APIToken, error) {
	var t APIToken
	err := s.pool.QueryRow(ctx, `
		INSERT INTO api_tokens (id, name, sha256) VALUES ($1, $2, $3)
		RETURNING `+apiTokenColumns, NewID("tok", time.Now()), name, sum[:]).Scan(apiTokenDest(&t)...)
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "api_tokens_live_name_idx":
		return APIToken{}, fmt.Errorf("%w: a live token is already named %q", ErrConflict, name)
	case isUniqueViolation(err):
		return APIToken{}, fmt.Errorf("%w: the token is already stored", ErrConflict)
	}
	if err != nil {
		return APIToken{}, fmt.Errorf("insert api token: %w", err)
	}
	return t, nil
}

// ListAPITokens returns every token, revoked ones included, oldest first.
func (s *Store) ListAPITokens(ctx context.Context) ([]APIToken, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+apiTokenColumns+` FROM api_tokens ORDER BY id`)
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

// RevokeAPIToken revokes the live token ref names and returns it. It
// returns ErrNotFound when no live token matches.
func (s *Store) RevokeAPIToken(ctx context.Context, ref TokenRef) (APIToken, error) {
	col, val := "id", ref.ID
	if ref.ID == "" {
		col, val = "name", ref.Name
	}
	var t APIToken
	err := s.pool.QueryRow(ctx, `
		UPDATE api_tokens SET revoked_at = now()
		WHERE `+col+` = $1 AND revoked_at IS NULL
		RETURNING `+apiTokenColumns, val).Scan(apiTokenDest(&t)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return APIToken{}, ErrNotFound
	}
	if err != nil {
		return APIToken{}, fmt.Errorf("revoke api token: %w", err)
	}
	return t, nil
}

// TokenUseResolution is how often a token's last_used_at is written at most.
const TokenUseResolution = time.Minute

// LookupAPIToken returns the live token whose SHA-256 is sum, with the
// stored hash for the caller's constant-time comparison, and stamps its
// last use in the same statement, writing at most once per
// TokenUseResolution. It returns ErrNotFound for an unknown or revoked
// token.
func (s *Store) LookupAPIToken(ctx context.Context, sum [32]byte) (APIToken, []byte, error) {
	var (
		t      APIToken
		stored []byte
	)
	err := s.pool.QueryRow(ctx, `
		WITH live AS (
			SELECT `+apiTokenColumns+`, sha256 FROM api_tokens WHERE sha256 = $1 AND revoked_at IS NULL
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

// LiveAPITokenName reports whether a live (unrevoked) token has name. A
// dashboard session names its token, not the token itself, so this is how
// a session learns that its token was revoked.
func (s *Store) LiveAPITokenName(ctx context.Context, name string) (bool, error) {
	var live bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM api_tokens WHERE name = $1 AND revoked_at IS NULL)`, name).Scan(&live)
	if err != nil {
		return false, fmt.Errorf("look up api token name: %w", err)
	}
	return live, nil
}
