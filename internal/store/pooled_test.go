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
	// A longer idle-in-transaction timeout than hookd's is not enough.
	_, err = db.Pool.Exec(ctx, `ALTER DATABASE `+db.Name+` SET idle_in_transaction_session_timeout = '1min'`)
	require.NoError(t, err)
	require.Equal(t, []string{"ALTER ROLE CURRENT_USER SET idle_in_transaction_session_timeout = '15s'"}, open())

	// A URL that chooses another mode without named statements keeps it.
	pool, err := store.OpenPool(ctx, store.PoolConfig{URL: db.URL + "&default_query_exec_mode=exec", MaxConns: 1, Pooled: true})
	require.NoError(t, err)
	defer pool.Close()
	require.Equal(t, pgx.QueryExecModeExec, pool.Config().ConnConfig.DefaultQueryExecMode)
}

// TestCheckPooledURL: a pooled connection string, URL or key=value, may
// set only the startup parameters PgBouncer passes on, and no exec mode
// with named prepared statements; the error names the setting, never the
// password.
func TestCheckPooledURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url, wantErr string
	}{
		{url: "postgres://hookd:pw@pgbouncer:6432/hookd?sslmode=disable&application_name=x&connect_timeout=5"},
		{url: "postgres://hookd:pw@pgbouncer:6432/hookd?default_query_exec_mode=describe_exec"},
		{url: "host=pgbouncer port=6432 dbname=hookd user=hookd password=pw TimeZone=UTC"},
		{url: "host=pgbouncer port=6432 dbname=hookd password=pw statement_timeout=5000", wantErr: "sets statement_timeout, which a pooler"},
		{url: "postgres://hookd:pw@pgbouncer:6432/hookd?options=-c%20jit%3Doff", wantErr: "sets options, which a pooler"},
		{url: "host=pgbouncer dbname=hookd password=pw default_query_exec_mode=cache_statement", wantErr: "sets default_query_exec_mode=cache_statement"},
		{url: "postgres://hookd:pw@pgbouncer:6432/hookd?default_query_exec_mode=cache_statement", wantErr: "sets default_query_exec_mode=cache_statement"},
	} {
		err := store.CheckPooledURL(tc.url)
		if tc.wantErr == "" {
			require.NoError(t, err, tc.url)
			continue
		}
		require.ErrorContains(t, err, tc.wantErr, tc.url)
		require.NotContains(t, err.Error(), "pw", tc.url)
	}
}
