package store_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestPooledPoolKeepsNoSessionState: a pool behind a pooler uses unnamed
// statements (cache_describe) and sends no startup parameter but
// application_name, so the server's sessions have jit and
// idle_in_transaction_session_timeout only from the role's (here the
// database's) settings; RoleSettings names the statements that give
// them while they are missing, and none once they are set. Without a
// pooler both are startup parameters, as before.
func TestPooledPoolKeepsNoSessionState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)

	plain, err := store.OpenPool(ctx, store.PoolConfig{URL: db.URL, MaxConns: 1, ApplicationName: "plain"})
	require.NoError(t, err)
	defer plain.Close()
	require.Equal(t, pgx.QueryExecModeCacheStatement, plain.Config().ConnConfig.DefaultQueryExecMode)
	missing, err := store.RoleSettings(ctx, plain)
	require.NoError(t, err)
	require.Empty(t, missing, "without a pooler the startup parameters give both")

	open := func() []string {
		t.Helper()
		pool, err := store.OpenPool(ctx, store.PoolConfig{URL: db.URL, MaxConns: 1, ApplicationName: "pooled", Pooled: true})
		require.NoError(t, err)
		defer pool.Close()
		cc := pool.Config().ConnConfig
		require.Equal(t, pgx.QueryExecModeCacheDescribe, cc.DefaultQueryExecMode)
		require.Equal(t, map[string]string{"application_name": "pooled"}, cc.RuntimeParams)
		missing, err := store.RoleSettings(ctx, pool)
		require.NoError(t, err)
		return missing
	}
	require.Equal(t, []string{
		"ALTER ROLE CURRENT_USER SET jit = off",
		"ALTER ROLE CURRENT_USER SET idle_in_transaction_session_timeout = '15s'",
	}, open())
	for _, q := range []string{
		`ALTER DATABASE ` + db.Name + ` SET jit = off`,
		`ALTER DATABASE ` + db.Name + ` SET idle_in_transaction_session_timeout = '15s'`,
	} {
		_, err := db.Pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	require.Empty(t, open(), "the database's settings give both")

	// A URL that chooses another mode without named statements keeps it.
	pool, err := store.OpenPool(ctx, store.PoolConfig{URL: db.URL + "&default_query_exec_mode=exec", MaxConns: 1, Pooled: true})
	require.NoError(t, err)
	defer pool.Close()
	require.Equal(t, pgx.QueryExecModeExec, pool.Config().ConnConfig.DefaultQueryExecMode)
}
