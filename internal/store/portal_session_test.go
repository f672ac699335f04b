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
	_, err := db.Pool.Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public;`)
	require.NoError(t, err)
	require.NoError(t, store.MigrateTo(ctx, db.Pool, 14))
	s := store.New(db.Pool, nil)
	// The endpoint as that schema stored it: CreateEndpoint writes columns
	// later migrations add.
	e := store.Endpoint{ID: createEndpointV10(t, db, "acme", "https://example.com/a", testSecret, "")}
	_, err = s.CreateAPIToken(ctx, store.NewAPIToken{Scope: store.ScopeTenant, Name: "ci", Sum: sha256.Sum256([]byte("t")), TenantID: "acme"})
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
