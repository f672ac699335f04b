package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/config"
)

// TestPooledNeedsADirectURL: behind a pooler (--db-pooled) the api needs
// --direct-database-url for migrations (they hold
// session locks); a direct URL without a pooler, or the pooled URL given
// as the direct one, is refused. Each refusal names the flag before any
// connection is made.
func TestPooledNeedsADirectURL(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	const pooled = "postgres://postgres@127.0.0.1:1/hookd?sslmode=disable&connect_timeout=2"
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{env: map[string]string{"DB_POOLED": "true"}, want: "--direct-database-url (DIRECT_DATABASE_URL): is required with --db-pooled (DB_POOLED): " +
			"migrations need a session of their own, which a pooler in transaction mode does not keep"},
		{env: map[string]string{"DB_POOLED": "true", "NO_MIGRATE": "true"}, want: "--direct-database-url (DIRECT_DATABASE_URL): is required with --db-pooled (DB_POOLED): " +
			"migrations need a session of their own, which a pooler in transaction mode does not keep"},
		{args: []string{"migrate", "--db-pooled"}, want: "--direct-database-url (DIRECT_DATABASE_URL): is required with --db-pooled (DB_POOLED): " +
			"migrations need a session of their own, which a pooler in transaction mode does not keep"},
		{env: map[string]string{"DIRECT_DATABASE_URL": "postgres://postgres@127.0.0.1:2/hookd"}, want: "--direct-database-url (DIRECT_DATABASE_URL): is used only with --db-pooled (DB_POOLED): " +
			"without a pooler every connection goes to --database-url"},
		{env: map[string]string{"DB_POOLED": "true", "DIRECT_DATABASE_URL": pooled},
			want: "--direct-database-url (DIRECT_DATABASE_URL): is --database-url itself: with --db-pooled it must reach PostgreSQL without the pooler"},
		{env: map[string]string{"DB_POOLED": "true", "DIRECT_DATABASE_URL": "postgres://postgres@127.0.0.1:2/hookd?sslmode=disable&connect_timeout=2"}},
	} {
		env := map[string]string{"API_TOKEN": "t", "DATABASE_URL": pooled}
		for k, v := range tc.env {
			env[k] = v
		}
		err := run(ctx, tc.args, func(k string) string { return env[k] }, strings.NewReader(""), io.Discard, io.Discard)
		var ue *config.UsageError
		if tc.want == "" {
			require.Error(t, err, "the cancelled context stops it at the database")
			require.False(t, errors.As(err, &ue), "%v: %v", tc.env, err)
			continue
		}
		require.ErrorAs(t, err, &ue, "%v", tc.env)
		require.Equal(t, tc.want, err.Error())
	}
}
