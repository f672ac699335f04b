package store_test

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
)

func TestAPITokenLifecycle(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	sum := sha256.Sum256([]byte("hkd_ci-token"))

	ci, err := s.CreateAPIToken(ctx, store.NewAPIToken{Scope: store.ScopeAdmin, Name: "ci", Sum: sum})
	require.NoError(t, err)
	require.Regexp(t, `^tok_[0-9A-Z]{26}$`, ci.ID)
	require.Equal(t, "ci", ci.Name)
	require.Nil(t, ci.LastUsedAt)
	require.Nil(t, ci.RevokedAt)

	// Only the hash is stored.
	var stored []byte
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT sha256 FROM api_tokens WHERE id = $1`, ci.ID).Scan(&stored))
	require.Equal(t, sum[:], stored)

	got, hash, err := s.LookupAPIToken(ctx, sum)
	require.NoError(t, err)
	require.Equal(t, ci.ID, got.ID)
	require.Equal(t, "ci", got.Name)
	require.Equal(t, sum[:], hash)

	_, _, err = s.LookupAPIToken(ctx, sha256.Sum256([]byte("hkd_other")))
	require.ErrorIs(t, err, store.ErrNotFound)

	list, err := s.ListAPITokens(ctx, store.Page{})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.NotNil(t, list[0].LastUsedAt, "the lookup stamped its use")

	live, err := s.LiveAdminToken(ctx, ci.ID)
	require.NoError(t, err)
	require.True(t, live)

	revoked, err := s.RevokeAPIToken(ctx, store.TokenRef{Name: "ci"})
	require.NoError(t, err)
	require.Equal(t, ci.ID, revoked.ID)
	require.NotNil(t, revoked.RevokedAt)
	live, err = s.LiveAdminToken(ctx, ci.ID)
	require.NoError(t, err)
	require.False(t, live, "a session of a revoked token ends")

	_, _, err = s.LookupAPIToken(ctx, sum)
	require.ErrorIs(t, err, store.ErrNotFound, "a revoked token no longer authenticates")
	_, err = s.RevokeAPIToken(ctx, store.TokenRef{Name: "ci"})
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.RevokeAPIToken(ctx, store.TokenRef{ID: ci.ID})
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.RevokeAPIToken(ctx, store.TokenRef{ID: "tok_nope"})
	require.ErrorIs(t, err, store.ErrNotFound)

	// The name is free again once its token is revoked.
	again, err := s.CreateAPIToken(ctx, store.NewAPIToken{Scope: store.ScopeAdmin, Name: "ci", Sum: sha256.Sum256([]byte("hkd_ci-token-2"))})
	require.NoError(t, err)
	live, err = s.LiveAdminToken(ctx, ci.ID)
	require.NoError(t, err)
	require.False(t, live, "a new token of the name does not revive the revoked one's sessions")
	list, err = s.ListAPITokens(ctx, store.Page{})
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, []string{ci.ID, again.ID}, []string{list[0].ID, list[1].ID}, "oldest first")
	require.NotNil(t, list[0].RevokedAt)
	require.Nil(t, list[1].RevokedAt)

	revoked, err = s.RevokeAPIToken(ctx, store.TokenRef{ID: again.ID})
	require.NoError(t, err)
	require.Equal(t, "ci", revoked.Name)
}

func TestAPITokenNamesAreUniqueAmongLiveTokens(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	_, err := s.CreateAPIToken(ctx, store.NewAPIToken{Scope: store.ScopeAdmin, Name: "deploy", Sum: sha256.Sum256([]byte("a"))})
	require.NoError(t, err)
	_, err = s.CreateAPIToken(ctx, store.NewAPIToken{Scope: store.ScopeAdmin, Name: "deploy", Sum: sha256.Sum256([]byte("b"))})
	require.ErrorIs(t, err, store.ErrConflict)
	require.ErrorContains(t, err, `"deploy"`)
	_, err = s.CreateAPIToken(ctx, store.NewAPIToken{Scope: store.ScopeAdmin, Name: "Deploy", Sum: sha256.Sum256([]byte("c"))})
	require.NoError(t, err, "names are case-sensitive")
	// Two tokens can never share a hash.
	_, err = s.CreateAPIToken(ctx, store.NewAPIToken{Scope: store.ScopeAdmin, Name: "other", Sum: sha256.Sum256([]byte("a"))})
	require.ErrorIs(t, err, store.ErrConflict)
}

// TestAPITokenLastUsedIsWrittenAtMostOnceAMinute: lookups stamp
// last_used_at only when the stamp is older than a minute, so a busy token
// costs no write per request.
func TestAPITokenLastUsedIsWrittenAtMostOnceAMinute(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	sum := sha256.Sum256([]byte("hkd_busy"))
	tok, err := s.CreateAPIToken(ctx, store.NewAPIToken{Scope: store.ScopeAdmin, Name: "busy", Sum: sum})
	require.NoError(t, err)

	lastUsed := func() *time.Time {
		var at *time.Time
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT last_used_at FROM api_tokens WHERE id = $1`, tok.ID).Scan(&at))
		return at
	}
	_, _, err = s.LookupAPIToken(ctx, sum)
	require.NoError(t, err)
	first := lastUsed()
	require.NotNil(t, first)

	for range 5 {
		_, _, err = s.LookupAPIToken(ctx, sum)
		require.NoError(t, err)
	}
	require.Equal(t, *first, *lastUsed(), "no write within the minute")

	// A stamp older than a minute is refreshed by the next lookup.
	_, err = b.db.Pool.Exec(ctx, `UPDATE api_tokens SET last_used_at = now() - interval '61 seconds' WHERE id = $1`, tok.ID)
	require.NoError(t, err)
	old := lastUsed()
	_, _, err = s.LookupAPIToken(ctx, sum)
	require.NoError(t, err)
	require.True(t, lastUsed().After(*old))
}
