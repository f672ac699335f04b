package store_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

func TestPortalCodeExchangedOnce(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	code := sha256.Sum256([]byte("code"))
	p, err := s.CreatePortalSession(ctx, store.NewPortalSession{TenantID: "acme", ReadOnly: true, Theme: json.RawMessage(`{"name":"Acme"}`),
		CodeSum: code, CodeTTL: 5 * time.Minute, ExpiresIn: time.Hour, CreatedBy: "ops"})
	require.NoError(t, err)
	require.Regexp(t, `^ps_`, p.ID)
	require.WithinDuration(t, p.CreatedAt.Add(time.Hour), p.ExpiresAt, time.Second)

	// Of concurrent exchanges of one code, exactly one wins.
	const tries = 8
	var wg sync.WaitGroup
	wins := make(chan store.PortalSession, tries)
	for i := range tries {
		wg.Go(func() {
			got, err := s.ExchangePortalCode(ctx, code, sha256.Sum256([]byte{byte(i)}))
			if err == nil {
				wins <- got
			} else {
				require.ErrorIs(t, err, store.ErrNotFound)
			}
		})
	}
	wg.Wait()
	close(wins)
	require.Len(t, wins, 1)
	won := <-wins
	require.Equal(t, "acme", won.TenantID)
	require.True(t, won.ReadOnly)
	require.JSONEq(t, `{"name":"Acme"}`, string(won.Theme))

	_, err = s.ExchangePortalCode(ctx, code, sha256.Sum256([]byte("again")))
	require.ErrorIs(t, err, store.ErrNotFound, "a used code is refused")
	_, err = s.LookupPortalSession(ctx, sha256.Sum256([]byte("again")))
	require.ErrorIs(t, err, store.ErrNotFound)
}

func TestPortalSessionExpiry(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	code, cookie := sha256.Sum256([]byte("c")), sha256.Sum256([]byte("s"))
	p, err := s.CreatePortalSession(ctx, store.NewPortalSession{TenantID: "acme", CodeSum: code, CodeTTL: time.Minute, ExpiresIn: time.Hour, CreatedBy: "ops"})
	require.NoError(t, err)
	_, err = s.ExchangePortalCode(ctx, code, cookie)
	require.NoError(t, err)
	got, err := s.LookupPortalSession(ctx, cookie)
	require.NoError(t, err)
	require.Equal(t, p.ID, got.ID)

	_, err = b.db.Pool.Exec(ctx, `UPDATE portal_sessions SET created_at = now() - interval '2 hours', expires_at = now() - interval '1 second' WHERE id = $1`, p.ID)
	require.NoError(t, err)
	_, err = s.LookupPortalSession(ctx, cookie)
	require.ErrorIs(t, err, store.ErrNotFound, "an ended session lets nothing in")

	late := sha256.Sum256([]byte("late"))
	p2, err := s.CreatePortalSession(ctx, store.NewPortalSession{TenantID: "acme", CodeSum: late, CodeTTL: time.Minute, ExpiresIn: time.Hour, CreatedBy: "ops"})
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE portal_sessions SET code_expires_at = now() - interval '1 second' WHERE id = $1`, p2.ID)
	require.NoError(t, err)
	_, err = s.ExchangePortalCode(ctx, late, sha256.Sum256([]byte("x")))
	require.ErrorIs(t, err, store.ErrNotFound, "an expired code is refused")
}

// TestUpgradeAddsPortalSessions: a database at the schema before portal
// sessions, with tokens and endpoints, migrates with them intact and then
// stores sessions.
func TestUpgradeAddsPortalSessions(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	db := b.db
	ctx := context.Background()
	resetTo(t, db, 14)
	s := store.New(db.Pool, nil)
	// The endpoint as that schema stored it: CreateEndpoint writes columns
	// later migrations add.
	e := store.Endpoint{ID: createEndpointV10(t, db, "acme", "https://example.com/a", testSecret, "")}
	_, err := s.CreateAPIToken(ctx, store.NewAPIToken{Scope: store.ScopeTenant, Name: "ci", Sum: sha256.Sum256([]byte("t")), TenantID: "acme"})
	require.NoError(t, err)

	require.NoError(t, store.Migrate(ctx, db.Pool, nil))
	got, err := s.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.Equal(t, testSecret, got.Secret)
	tokens, err := s.ListAPITokens(ctx, store.Page{})
	require.NoError(t, err)
	require.Len(t, tokens, 1)
	_, err = s.CreatePortalSession(ctx, store.NewPortalSession{TenantID: "acme", CodeSum: sha256.Sum256([]byte("c")), CodeTTL: time.Minute, ExpiresIn: time.Hour, CreatedBy: "ci"})
	require.NoError(t, err)
}

// TestPortalSessionsEnd: a tenant's sessions are listed in creation order;
// ending one (a logout, an admin) stops its cookie and its unused code at
// once, and ending it again is ErrNotFound; revoking a token ends every
// session it opened, and no other.
func TestPortalSessionsEnd(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	ops, err := s.CreateAPIToken(ctx, store.NewAPIToken{Scope: store.ScopeAdmin, Name: "ops", Sum: sha256.Sum256([]byte("ops"))})
	require.NoError(t, err)
	other, err := s.CreateAPIToken(ctx, store.NewAPIToken{Scope: store.ScopeAdmin, Name: "other", Sum: sha256.Sum256([]byte("other"))})
	require.NoError(t, err)
	open := func(tenant string, by store.APIToken, n byte) (store.PortalSession, [32]byte, [32]byte) {
		code, cookie := sha256.Sum256([]byte{'c', n}), sha256.Sum256([]byte{'s', n})
		p, err := s.CreatePortalSession(ctx, store.NewPortalSession{TenantID: tenant, CodeSum: code, CodeTTL: time.Minute,
			ExpiresIn: time.Hour, CreatedBy: by.Name, CreatedByTokenID: by.ID})
		require.NoError(t, err)
		require.Equal(t, by.ID, p.CreatedByTokenID)
		return p, code, cookie
	}
	logout, _, logoutCookie := open("acme", ops, 1)
	_, err = s.ExchangePortalCode(ctx, sha256.Sum256([]byte{'c', 1}), logoutCookie)
	require.NoError(t, err)
	unused, unusedCode, _ := open("acme", ops, 2)
	byOps, byOpsCode, byOpsCookie := open("acme", ops, 3)
	_, err = s.ExchangePortalCode(ctx, byOpsCode, byOpsCookie)
	require.NoError(t, err)
	byOther, otherCode, otherCookie := open("acme", other, 4)
	_, err = s.ExchangePortalCode(ctx, otherCode, otherCookie)
	require.NoError(t, err)
	globex, _, _ := open("globex", ops, 5)

	list, err := s.ListPortalSessions(ctx, "acme", store.Page{Limit: 10})
	require.NoError(t, err)
	var ids []string
	for _, p := range list {
		ids = append(ids, p.ID)
	}
	require.Equal(t, []string{logout.ID, unused.ID, byOps.ID, byOther.ID}, ids)
	require.NotNil(t, list[0].CodeUsedAt)
	require.Nil(t, list[1].CodeUsedAt)
	page, err := s.ListPortalSessions(ctx, "acme", store.Page{After: unused.ID, Limit: 1})
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, byOps.ID, page[0].ID)

	ended, err := s.EndPortalSession(ctx, logout.ID)
	require.NoError(t, err)
	require.NotNil(t, ended.EndedAt)
	_, err = s.LookupPortalSession(ctx, logoutCookie)
	require.ErrorIs(t, err, store.ErrNotFound, "an ended session's cookie reaches nothing")
	_, err = s.EndPortalSession(ctx, logout.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.EndPortalSession(ctx, "ps_nope")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.EndPortalSession(ctx, unused.ID)
	require.NoError(t, err)
	_, err = s.ExchangePortalCode(ctx, unusedCode, sha256.Sum256([]byte("late")))
	require.ErrorIs(t, err, store.ErrNotFound, "an ended session's code opens nothing")

	_, err = s.RevokeAPIToken(ctx, store.TokenRef{ID: ops.ID})
	require.NoError(t, err)
	_, err = s.LookupPortalSession(ctx, byOpsCookie)
	require.ErrorIs(t, err, store.ErrNotFound, "the revoked token's session ended")
	got, err := s.LookupPortalSession(ctx, otherCookie)
	require.NoError(t, err, "another token's session lives on")
	require.Equal(t, byOther.ID, got.ID)
	list, err = s.ListPortalSessions(ctx, "globex", store.Page{Limit: 10})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, globex.ID, list[0].ID)
	require.NotNil(t, list[0].EndedAt, "the revoke ends the token's sessions of every tenant")
}

// TestDashboardSessionsEnd: a stored dashboard session is live until its
// logout ends it or it expires (by the database clock); an unknown one
// never is.
func TestDashboardSessionsEnd(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	for _, in := range []store.NewDashboardSession{
		{ID: "a", TokenID: "tok_1", Name: "ops", ExpiresIn: time.Hour},
		{ID: "b", TokenID: "bootstrap", Name: "bootstrap", ExpiresIn: time.Hour},
		{ID: "c", Name: "alice", ExpiresIn: time.Hour},
	} {
		require.NoError(t, s.CreateDashboardSession(ctx, in))
	}
	live := func(id string) bool {
		ok, err := s.LiveDashboardSession(ctx, id)
		require.NoError(t, err)
		return ok
	}
	require.True(t, live("a"))
	require.True(t, live("c"))
	require.False(t, live("nope"))
	require.NoError(t, s.EndDashboardSession(ctx, "a"))
	require.False(t, live("a"), "a logout ends the session")
	require.NoError(t, s.EndDashboardSession(ctx, "a"))
	require.NoError(t, s.EndDashboardSession(ctx, "nope"))
	_, err := b.db.Pool.Exec(ctx, `UPDATE dashboard_sessions SET created_at = now() - interval '3 days', expires_at = now() - interval '2 days' WHERE id = 'b'`)
	require.NoError(t, err)
	require.False(t, live("b"), "an expired session is not live")
	require.NoError(t, s.CreateDashboardSession(ctx, store.NewDashboardSession{ID: "d", TokenID: "tok_2", Name: "ops", ExpiresIn: time.Hour}))
	var ids []string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT array_agg(id ORDER BY id) FROM dashboard_sessions`).Scan(&ids))
	require.Equal(t, []string{"a", "c", "d"}, ids, "sessions over for a day are pruned")
}

// TestSessionEndsMigration applies the session ends migration to a database
// of the previous version holding portal sessions and tokens: each session
// is kept, bound to the id of the live admin token of its creator's name
// (none for the bootstrap token's), and still logs in.
func TestSessionEndsMigration(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	resetTo(t, db, 29)
	_, err := db.Pool.Exec(ctx, `INSERT INTO api_tokens (id, name, sha256, scope, revoked_at) VALUES
		('tok_01', 'ops', $1, 'admin', now()), ('tok_02', 'ops', $2, 'admin', NULL)`, make([]byte, 32), append(make([]byte, 31), 1))
	require.NoError(t, err)
	cookie := sha256.Sum256([]byte("cookie"))
	_, err = db.Pool.Exec(ctx, `INSERT INTO portal_sessions (id, tenant_id, code_sha256, code_expires_at, code_used_at, session_sha256, created_by, expires_at) VALUES
		('ps_01', 'acme', $1, now() + interval '5 minutes', now(), $2, 'ops', now() + interval '1 hour'),
		('ps_02', 'acme', $3, now() + interval '5 minutes', NULL, NULL, 'bootstrap', now() + interval '1 hour')`,
		make([]byte, 32), cookie[:], append(make([]byte, 31), 1))
	require.NoError(t, err)

	require.NoError(t, store.Migrate(ctx, db.Pool, nil))
	s := store.New(db.Pool, nil)
	list, err := s.ListPortalSessions(ctx, "acme", store.Page{Limit: 10})
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "tok_02", list[0].CreatedByTokenID, "the live token of the name")
	require.Empty(t, list[1].CreatedByTokenID)
	for _, p := range list {
		require.Nil(t, p.EndedAt)
	}
	got, err := s.LookupPortalSession(ctx, cookie)
	require.NoError(t, err)
	require.Equal(t, "ps_01", got.ID)
	_, err = s.RevokeAPIToken(ctx, store.TokenRef{ID: "tok_02"})
	require.NoError(t, err)
	_, err = s.LookupPortalSession(ctx, cookie)
	require.ErrorIs(t, err, store.ErrNotFound, "revoking its token ends a session opened before the migration")
	require.NoError(t, s.CreateDashboardSession(ctx, store.NewDashboardSession{ID: "d", TokenID: "bootstrap", Name: "bootstrap", ExpiresIn: time.Hour}))
}
