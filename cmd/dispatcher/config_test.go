package main

import (
	"context"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/config"
	"github.com/hookd/hookd/internal/dispatcher"
)

// TestEveryConfigFieldHasAFlag: each dispatcher.Config field but the actor
// (derived from the host) is set by a real flag, so a refused field is
// reported as the flag the operator set.
func TestEveryConfigFieldHasAFlag(t *testing.T) {
	t.Parallel()
	fs, set := newFlagSet(func(string) string { return "" }, io.Discard)
	names := fs.Names()
	typ := reflect.TypeFor[dispatcher.Config]()
	for i := range typ.NumField() {
		field := typ.Field(i).Name
		if field == "Actor" {
			continue
		}
		flag, ok := flagOf[field]
		require.True(t, ok, "Config.%s has no flag in flagOf", field)
		require.Contains(t, names, "--"+flag, "Config.%s", field)
	}
	require.Len(t, flagOf, typ.NumField()-1, "flagOf names a field Config does not have")
	require.Equal(t, dispatcher.DefaultConfig(), set.config(), "the flags' defaults are DefaultConfig")
}

// TestRefusedValuesNameTheFlag: a value the dispatcher refuses is a usage
// error naming the flag and its environment twin, reported before any
// connection is made.
func TestRefusedValuesNameTheFlag(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{args: []string{"--workers", "0"}, want: "--workers (WORKERS): must be from 1 to 10000"},
		{args: []string{"--workers", "10", "--max-jobs", "5"}, want: "--max-jobs (MAX_JOBS): must be 0 (3 x workers) or from workers (10) to 30000"},
		{env: map[string]string{"SHUTDOWN_GRACE": "0s"}, want: "--shutdown-grace (SHUTDOWN_GRACE): must be positive"},
		{args: []string{"run", "--retry-schedule", "0s,-1s"}, want: "--retry-schedule (RETRY_SCHEDULE): parse schedule: entry 2: negative delay -1s"},
		{args: []string{"--rescue-stuck-after", "10s"}, want: "--rescue-stuck-after (RESCUE_STUCK_AFTER): must exceed the request timeout + 5s (20s)"},
		{args: []string{"--ledger-write-timeout", "500ms"}, want: "--ledger-write-timeout (LEDGER_WRITE_TIMEOUT): must be at least 1s"},
		{args: []string{"--operational-webhook-url", "https://ops.example/"}, want: "--operational-webhook-secret (OPERATIONAL_WEBHOOK_SECRET): parse secret: missing \"whsec_\" prefix (required with the operational webhook URL)"},
		{args: []string{"migrate", "--db-max-conns", "3"}, want: "--db-max-conns (DB_MAX_CONNS): must be 0 (from the cores) or at least 4"},
		// Behind a pooler: what needs a session has a direct URL, and the
		// pooled URL asks for nothing a pooler in transaction mode loses.
		{env: map[string]string{"DB_POOLED": "true"}, want: "--direct-database-url (DIRECT_DATABASE_URL): is required with --db-pooled (DB_POOLED): " +
			"the LISTEN connection, the session locks and the ledger need a session of their own, which a pooler in transaction mode does not keep"},
		{args: []string{"migrate", "--db-pooled"}, want: "--direct-database-url (DIRECT_DATABASE_URL): is required with --db-pooled (DB_POOLED): " +
			"migrations need a session of their own, which a pooler in transaction mode does not keep"},
		{env: map[string]string{"DIRECT_DATABASE_URL": "postgres://hookd@db:5432/hookd"}, want: "--direct-database-url (DIRECT_DATABASE_URL): is used only with --db-pooled (DB_POOLED): " +
			"without a pooler every connection goes to --database-url"},
		{args: []string{"--db-pooled", "--database-url", "postgres://hookd@pgbouncer:6432/hookd", "--direct-database-url", "postgres://hookd@pgbouncer:6432/hookd"},
			want: "--direct-database-url (DIRECT_DATABASE_URL): is --database-url itself: with --db-pooled it must reach PostgreSQL without the pooler"},
		{args: []string{"--db-pooled", "--database-url", "postgres://hookd:secret@pgbouncer:6432/hookd?jit=off&search_path=hookd", "--direct-database-url", "postgres://hookd@db:5432/hookd"},
			want: "--database-url (DATABASE_URL): with --db-pooled (DB_POOLED): sets jit, search_path, which a pooler in transaction mode refuses as a startup parameter " +
				"(or drops, with ignore_startup_parameters): set it for hookd's role instead (ALTER ROLE ... SET)"},
		{env: map[string]string{"DB_POOLED": "1", "DATABASE_URL": "postgres://hookd@pgbouncer:6432/hookd?default_query_exec_mode=cache_statement", "DIRECT_DATABASE_URL": "postgres://hookd@db:5432/hookd"},
			want: "--database-url (DATABASE_URL): with --db-pooled (DB_POOLED): sets default_query_exec_mode=cache_statement, whose named prepared statements a pooler in transaction mode " +
				"loses between transactions: leave it out (hookd then uses cache_describe) or choose describe_exec, exec or simple_protocol"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			err := run(context.Background(), tt.args, func(k string) string { return tt.env[k] }, strings.NewReader(""), io.Discard, io.Discard)
			var ue *config.UsageError
			require.ErrorAs(t, err, &ue)
			require.EqualError(t, err, tt.want)
		})
	}
}

// TestTrialPoolSizeIsDeprecated: --trial-pool-size and TRIAL_POOL_SIZE are
// still accepted, so that a deployment setting them keeps starting, and
// log flag_deprecated; unset, nothing is logged.
func TestTrialPoolSizeIsDeprecated(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		env  map[string]string
		warn bool
	}{
		{"flag", []string{"--trial-pool-size", "4"}, nil, true},
		{"env", nil, map[string]string{"TRIAL_POOL_SIZE": "8"}, true},
		{"unset", nil, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"DATABASE_URL": "postgres://hookd@127.0.0.1:1/hookd?connect_timeout=1"}
			for k, v := range tt.env {
				env[k] = v
			}
			var stderr strings.Builder
			err := run(context.Background(), tt.args, func(k string) string { return env[k] }, strings.NewReader(""), io.Discard, &stderr)
			require.Error(t, err, "no database listens there")
			var ue *config.UsageError
			require.False(t, errors.As(err, &ue), "accepted: %v", err)
			if tt.warn {
				require.Contains(t, stderr.String(), "msg=flag_deprecated flag=trial-pool-size env=TRIAL_POOL_SIZE")
			} else {
				require.NotContains(t, stderr.String(), "flag_deprecated")
			}
		})
	}
}
