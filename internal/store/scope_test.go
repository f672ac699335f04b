package store_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
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

	admin, err := s.CreateAPIToken(ctx, store.NewAPIToken{Scope: store.ScopeAdmin, Name: "ops", Sum: adminSum})
	require.NoError(t, err)
	require.Equal(t, store.ScopeAdmin, admin.Scope)
	require.Empty(t, admin.TenantID)
	require.False(t, admin.ReadOnly)
	require.Nil(t, admin.ExpiresAt)

	tenant, err := s.CreateAPIToken(ctx, store.NewAPIToken{Scope: store.ScopeTenant, Name: "acme-portal", Sum: tenantSum, TenantID: "acme", ReadOnly: true, ExpiresIn: 720 * time.Hour})
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

	for id, want := range map[string]bool{admin.ID: true, tenant.ID: false, "tok_nope": false} {
		live, err := s.LiveAdminToken(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, live, "%s: only writable admin tokens hold sessions", id)
	}
	roSum := sha256.Sum256([]byte("hkd_ro"))
	watcher, err := s.CreateAPIToken(ctx, store.NewAPIToken{Scope: store.ScopeAdmin, Name: "watcher", Sum: roSum, ReadOnly: true})
	require.NoError(t, err)
	live, err := s.LiveAdminToken(ctx, watcher.ID)
	require.NoError(t, err)
	require.False(t, live, "a read-only admin token holds no session")

	// Expiry is by the database clock.
	_, err = b.db.Pool.Exec(ctx, `UPDATE api_tokens SET created_at = now() - interval '2 hours', expires_at = now() - interval '1 second' WHERE id = $1`, admin.ID)
	require.NoError(t, err)
	_, _, err = s.LookupAPIToken(ctx, adminSum)
	require.ErrorIs(t, err, store.ErrNotFound, "an expired token no longer authenticates")
	live, err = s.LiveAdminToken(ctx, admin.ID)
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
	resetTo(t, db, 9)
	liveSum, revokedSum := sha256.Sum256([]byte("hkd_live")), sha256.Sum256([]byte("hkd_revoked"))
	_, err := db.Pool.Exec(ctx, `INSERT INTO api_tokens (id, name, sha256, last_used_at, revoked_at) VALUES
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
	live, err := s.LiveAdminToken(ctx, got.ID)
	require.NoError(t, err)
	require.True(t, live, "it still opens dashboard sessions")
	_, _, err = s.LookupAPIToken(ctx, revokedSum)
	require.ErrorIs(t, err, store.ErrNotFound, "a revoked token stays revoked")
}

// TestTenantScopeIsExplicit: a token's scope and tenant must agree, the
// schema refuses a tenant token or portal session with an empty tenant
// (one acted as an admin before), and a query reads every tenant only when
// told to: the zero Tenants and an empty tenant id read nothing.
func TestTenantScopeIsExplicit(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()

	for _, in := range []store.NewAPIToken{
		{Scope: store.ScopeTenant, Name: "no-tenant"},
		{Scope: store.ScopeAdmin, Name: "admin-of-acme", TenantID: "acme"},
		{Name: "no-scope"},
		{Scope: "root", Name: "root"},
	} {
		in.Sum = sha256.Sum256([]byte(in.Name))
		_, err := s.CreateAPIToken(ctx, in)
		require.ErrorIs(t, err, store.ErrTokenScope, in.Name)
	}
	_, err := b.db.Pool.Exec(ctx, `INSERT INTO api_tokens (id, name, sha256, scope, tenant_id) VALUES ('tok_e', 'e', $1, 'tenant', '')`, make([]byte, 32))
	require.ErrorContains(t, err, "api_tokens_tenant_not_empty_check")
	_, err = b.db.Pool.Exec(ctx, `INSERT INTO portal_sessions (id, tenant_id, code_sha256, code_expires_at, created_by, expires_at)
		VALUES ('ps_e', '', $1, now() + interval '5 minutes', 'ops', now() + interval '1 hour')`, make([]byte, 32))
	require.ErrorContains(t, err, "portal_sessions_tenant_not_empty_check")
	require.Zero(t, b.count(t, "api_tokens")+b.count(t, "portal_sessions"))

	acme, globex := b.endpoint(t, "acme"), b.endpoint(t, "globex")
	var pending []string
	for _, tenant := range []string{"acme", "globex"} {
		m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: tenant, EventType: "a", Payload: json.RawMessage(`{}`)}, b.enq)
		require.NoError(t, err)
		require.Len(t, m.Deliveries, 1)
		pending = append(pending, m.Deliveries[0].ID)
	}
	cfg := func(store.Endpoint) breaker.Config { return testCfg }
	for _, c := range []struct {
		name    string
		tenants store.Tenants
		want    []string // the tenants whose rows are read
	}{
		{"the zero value", store.Tenants{}, nil},
		{"an empty tenant id", store.OneTenant(""), nil},
		{"one tenant", store.OneTenant("acme"), []string{"acme"}},
		{"every tenant", store.AllTenants(), []string{"acme", "globex"}},
	} {
		var eps, brs, msgs, dlvs []string
		list, err := s.ListEndpoints(ctx, c.tenants, store.Page{Limit: 10})
		require.NoError(t, err)
		for _, e := range list {
			eps = append(eps, e.TenantID)
		}
		bl, err := s.ListBreakers(ctx, store.BreakerFilter{Tenants: c.tenants, Page: store.Page{Limit: 10}}, cfg)
		require.NoError(t, err)
		for _, br := range bl {
			brs = append(brs, br.Endpoint.TenantID)
		}
		ml, err := s.SearchMessages(ctx, store.MessageSearch{Tenants: c.tenants, Limit: 10})
		require.NoError(t, err)
		for _, m := range ml {
			msgs = append(msgs, m.TenantID)
		}
		dl, err := s.SearchDeliveries(ctx, store.DeliverySearch{Tenants: c.tenants, Limit: 10})
		require.NoError(t, err)
		for _, d := range dl {
			dlvs = append(dlvs, d.TenantID)
		}
		slices.Sort(eps)
		slices.Sort(brs)
		slices.Sort(msgs)
		slices.Sort(dlvs)
		for what, got := range map[string][]string{"endpoints": eps, "breakers": brs, "messages": msgs, "deliveries": dlvs} {
			require.Equal(t, c.want, got, "%s: %s", c.name, what)
		}
		// A pending delivery is found (and refused as not retryable) only
		// within the scope; outside it, it is not found.
		res, err := s.RetryDeliveries(ctx, pending, c.tenants, b.enq)
		require.NoError(t, err)
		for i, tenant := range []string{"acme", "globex"} {
			if slices.Contains(c.want, tenant) {
				require.ErrorIs(t, res[i], store.ErrNotRetryable, "%s: %s", c.name, tenant)
			} else {
				require.ErrorIs(t, res[i], store.ErrNotFound, "%s: %s", c.name, tenant)
			}
		}
	}
	require.NotEqual(t, acme.ID, globex.ID)
}

// TestExplicitScopesMigration applies the explicit scopes migration to a
// database of the previous version holding tokens and portal sessions: a
// tenant token stored with an empty tenant (which acted as an admin) is
// revoked and recorded as an admin token, a portal session with an empty
// tenant is ended, and every other token and session is kept as it was.
func TestExplicitScopesMigration(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	resetTo(t, db, 25)
	adminSum, tenantSum, emptySum := sha256.Sum256([]byte("hkd_admin")), sha256.Sum256([]byte("hkd_tenant")), sha256.Sum256([]byte("hkd_empty"))
	_, err := db.Pool.Exec(ctx, `INSERT INTO api_tokens (id, name, sha256, scope, tenant_id, read_only) VALUES
		('tok_01', 'ops', $1, 'admin', NULL, false),
		('tok_02', 'acme-app', $2, 'tenant', 'acme', true),
		('tok_03', 'hand-made', $3, 'tenant', '', false)`, adminSum[:], tenantSum[:], emptySum[:])
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO portal_sessions (id, tenant_id, code_sha256, code_expires_at, created_by, expires_at) VALUES
		('ps_01', 'acme', $1, now() + interval '5 minutes', 'ops', now() + interval '1 hour'),
		('ps_02', '', $2, now() + interval '5 minutes', 'ops', now() + interval '1 hour')`, make([]byte, 32), append(make([]byte, 31), 1))
	require.NoError(t, err)

	require.NoError(t, store.Migrate(ctx, db.Pool, nil))
	s := store.New(db.Pool, nil)
	list, err := s.ListAPITokens(ctx, store.Page{})
	require.NoError(t, err)
	require.Len(t, list, 3)
	require.Equal(t, []string{store.ScopeAdmin, store.ScopeTenant, store.ScopeAdmin}, []string{list[0].Scope, list[1].Scope, list[2].Scope})
	require.Equal(t, "acme", list[1].TenantID)
	require.True(t, list[1].ReadOnly)
	require.Nil(t, list[0].RevokedAt)
	require.Nil(t, list[1].RevokedAt)
	require.NotNil(t, list[2].RevokedAt, "the token without a tenant is revoked")
	for sum, want := range map[[32]byte]error{adminSum: nil, tenantSum: nil, emptySum: store.ErrNotFound} {
		_, _, err := s.LookupAPIToken(ctx, sum)
		if want == nil {
			require.NoError(t, err)
		} else {
			require.ErrorIs(t, err, want)
		}
	}
	var sessions []string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(id ORDER BY id) FROM portal_sessions`).Scan(&sessions))
	require.Equal(t, []string{"ps_01"}, sessions)
}
