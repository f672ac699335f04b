package store_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestScopedAPITokens: a tenant token keeps its tenant, read-only flag and
// expiry; an expired token no longer authenticates; only writable admin
// tokens keep dashboard sessions alive.
func TestScopedAPITokens(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	adminSum, tenantSum := sha256.Sum256([]byte("hkd_admin")), sha256.Sum256([]byte("hkd_tenant"))

	admin, err := s.CreateAPIToken(ctx, store.NewAPIToken{Name: "ops", Sum: adminSum})
	require.NoError(t, err)
	require.Equal(t, store.ScopeAdmin, admin.Scope)
	require.Empty(t, admin.TenantID)
	require.False(t, admin.ReadOnly)
	require.Nil(t, admin.ExpiresAt)

	tenant, err := s.CreateAPIToken(ctx, store.NewAPIToken{Name: "acme-portal", Sum: tenantSum, TenantID: "acme", ReadOnly: true, ExpiresIn: 720 * time.Hour})
	require.NoError(t, err)
	require.Equal(t, store.ScopeTenant, tenant.Scope)
	require.Equal(t, "acme", tenant.TenantID)
	require.True(t, tenant.ReadOnly)
	require.NotNil(t, tenant.ExpiresAt)
	require.WithinDuration(t, tenant.CreatedAt.Add(720*time.Hour), *tenant.ExpiresAt, time.Second, "by the database clock")

	got, _, err := s.LookupAPIToken(ctx, tenantSum)
	require.NoError(t, err)
	require.Equal(t, tenant.ID, got.ID)
	require.Equal(t, "acme", got.TenantID)
	require.True(t, got.ReadOnly)

	for name, want := range map[string]bool{"ops": true, "acme-portal": false} {
		live, err := s.LiveAPITokenName(ctx, name)
		require.NoError(t, err)
		require.Equal(t, want, live, "%s: only writable admin tokens hold sessions", name)
	}
	roSum := sha256.Sum256([]byte("hkd_ro"))
	_, err = s.CreateAPIToken(ctx, store.NewAPIToken{Name: "watcher", Sum: roSum, ReadOnly: true})
	require.NoError(t, err)
	live, err := s.LiveAPITokenName(ctx, "watcher")
	require.NoError(t, err)
	require.False(t, live, "a read-only admin token holds no session")

	// Expiry is by the database clock.
	_, err = b.db.Pool.Exec(ctx, `UPDATE api_tokens SET created_at = now() - interval '2 hours', expires_at = now() - interval '1 second' WHERE id = $1`, admin.ID)
	require.NoError(t, err)
	_, _, err = s.LookupAPIToken(ctx, adminSum)
	require.ErrorIs(t, err, store.ErrNotFound, "an expired token no longer authenticates")
	live, err = s.LiveAPITokenName(ctx, "ops")
	require.NoError(t, err)
	require.False(t, live, "nor keeps its sessions")
	// An expired token can still be revoked, which frees its name.
	_, err = s.RevokeAPIToken(ctx, store.TokenRef{Name: "ops"})
	require.NoError(t, err)

	// The schema refuses a tenant token without a tenant and the reverse.
	_, err = b.db.Pool.Exec(ctx, `INSERT INTO api_tokens (id, name, sha256, scope) VALUES ('tok_x', 'x', $1, 'tenant')`, make([]byte, 32))
	require.Error(t, err)
	_, err = b.db.Pool.Exec(ctx, `INSERT INTO api_tokens (id, name, sha256, tenant_id) VALUES ('tok_y', 'y', $1, 'acme')`, make([]byte, 32))
	require.Error(t, err)

	// Lists page in id order.
	all, err := s.ListAPITokens(ctx, store.Page{})
	require.NoError(t, err)
	require.Len(t, all, 3)
	first, err := s.ListAPITokens(ctx, store.Page{Limit: 2})
	require.NoError(t, err)
	require.Equal(t, all[:2], first)
	rest, err := s.ListAPITokens(ctx, store.Page{After: first[1].ID, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, all[2:], rest)
}

// TestOwnerTenant names the tenant of endpoints, messages and deliveries
// by id; a deleted endpoint and an unknown id have none.
func TestOwnerTenant(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	gone := b.endpoint(t, "acme")
	require.NoError(t, s.DeleteEndpoint(ctx, gone.ID))
	m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, b.enq)
	require.NoError(t, err)
	require.Len(t, m.Deliveries, 1)

	for kind, id := range map[string]string{store.OwnerEndpoint: e.ID, store.OwnerMessage: m.ID, store.OwnerDelivery: m.Deliveries[0].ID} {
		tenant, err := s.OwnerTenant(ctx, kind, id)
		require.NoError(t, err, kind)
		require.Equal(t, "acme", tenant, kind)
		_, err = s.OwnerTenant(ctx, kind, "nope")
		require.ErrorIs(t, err, store.ErrNotFound, kind)
	}
	_, err = s.OwnerTenant(ctx, store.OwnerEndpoint, gone.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "a deleted endpoint belongs to no one")
	_, err = s.OwnerTenant(ctx, "secret", e.ID)
	require.Error(t, err)
}

// TestTokenScopesMigrationKeepsStoredTokens applies the token scopes
// migration to a database of the previous version holding tokens: every
// one becomes an admin token without expiry, and each still authenticates
// (or stays revoked) as before.
func TestTokenScopesMigrationKeepsStoredTokens(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	// Start over on this database only, at the version before the scopes.
	_, err := db.Pool.Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public;`)
	require.NoError(t, err)
	require.NoError(t, store.MigrateTo(ctx, db.Pool, 9))
	liveSum, revokedSum := sha256.Sum256([]byte("hkd_live")), sha256.Sum256([]byte("hkd_revoked"))
	_, err = db.Pool.Exec(ctx, `INSERT INTO api_tokens (id, name, sha256, last_used_at, revoked_at) VALUES
		('tok_01', 'ci', $1, now(), NULL), ('tok_02', 'old', $2, NULL, now())`, liveSum[:], revokedSum[:])
	require.NoError(t, err)

	require.NoError(t, store.Migrate(ctx, db.Pool, nil))
	current, err := store.MigrationsCurrent(ctx, db.Pool)
	require.NoError(t, err)
	require.True(t, current)

	s := store.New(db.Pool, nil)
	list, err := s.ListAPITokens(ctx, store.Page{})
	require.NoError(t, err)
	require.Len(t, list, 2)
	for _, tok := range list {
		require.Equal(t, store.ScopeAdmin, tok.Scope, tok.Name)
		require.Empty(t, tok.TenantID)
		require.False(t, tok.ReadOnly)
		require.Nil(t, tok.ExpiresAt)
	}
	require.NotNil(t, list[0].LastUsedAt, "history is kept")
	got, _, err := s.LookupAPIToken(ctx, liveSum)
	require.NoError(t, err)
	require.Equal(t, "ci", got.Name)
	live, err := s.LiveAPITokenName(ctx, "ci")
	require.NoError(t, err)
	require.True(t, live, "its dashboard sessions live on")
	_, _, err = s.LookupAPIToken(ctx, revokedSum)
	require.ErrorIs(t, err, store.ErrNotFound, "a revoked token stays revoked")
}
