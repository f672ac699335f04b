package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestRateLimitMigrationKeepsEndpoints applies the rate limit migration to
// a database of the previous version holding an endpoint: it reads back
// unlimited, and a limit can then be set and removed.
func TestRateLimitMigrationKeepsEndpoints(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public;`)
	require.NoError(t, err)
	require.NoError(t, store.MigrateTo(ctx, db.Pool, 10))
	_, err = db.Pool.Exec(ctx, `INSERT INTO endpoints (id, tenant_id, url, secret) VALUES ('ep_old', 'acme', 'https://acme.example/h', $1)`, testSecret)
	require.NoError(t, err)

	require.NoError(t, store.Migrate(ctx, db.Pool, nil))
	s := store.New(db.Pool, nil)
	e, err := s.GetEndpoint(ctx, "ep_old")
	require.NoError(t, err)
	require.Nil(t, e.RateLimit)
	require.Equal(t, "https://acme.example/h", e.URL)

	twenty := 20
	e, err = s.UpdateEndpoint(ctx, "ep_old", store.EndpointPatch{RateLimit: &twenty})
	require.NoError(t, err)
	require.Equal(t, 20, *e.RateLimit)
	desc := "kept"
	e, err = s.UpdateEndpoint(ctx, "ep_old", store.EndpointPatch{Description: &desc})
	require.NoError(t, err)
	require.Equal(t, 20, *e.RateLimit, "a patch without it keeps it")
	zero := 0
	e, err = s.UpdateEndpoint(ctx, "ep_old", store.EndpointPatch{RateLimit: &zero})
	require.NoError(t, err)
	require.Nil(t, e.RateLimit, "0 removes it")
}

// TestHeartbeatCountsLiveDispatchers: each heartbeat counts the
// dispatchers heard from within the stale window, itself included; one
// that left or went stale no longer counts.
func TestHeartbeatCountsLiveDispatchers(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	s := store.New(db.Pool, nil)
	const stale = time.Minute

	beat := func(id string, conns int) store.FleetBeat {
		t.Helper()
		b, err := s.Heartbeat(ctx, id, conns, stale)
		require.NoError(t, err)
		return b
	}
	b := beat("a", 13)
	require.Equal(t, 1, b.Live)
	require.Equal(t, 13, b.Connections)
	var usable int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int`).Scan(&usable))
	require.Equal(t, usable, b.MaxConnections)
	b = beat("b", 20)
	require.Equal(t, 2, b.Live)
	require.Equal(t, 33, b.Connections)
	b = beat("a", 15)
	require.Equal(t, 2, b.Live, "a second beat is the same dispatcher")
	require.Equal(t, 35, b.Connections, "with what it registers now")

	require.NoError(t, s.LeaveFleet(ctx, "b"))
	b = beat("a", 15)
	require.Equal(t, 1, b.Live)
	require.Equal(t, 15, b.Connections)

	// c went silent two minutes ago: stale, and forgotten.
	_, err := db.Pool.Exec(ctx, `INSERT INTO hookd_dispatchers (id, heartbeat_at, db_connections) VALUES ('c', now() - interval '2 minutes', 50)`)
	require.NoError(t, err)
	b = beat("a", 15)
	require.Equal(t, 1, b.Live)
	require.Equal(t, 15, b.Connections)
	var left int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM hookd_dispatchers WHERE id = 'c'`).Scan(&left))
	require.Zero(t, left)
}
