package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hookd/hookd/internal/pgcluster"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestCheckFailsWhenTheRunChangedTheServer records a private cluster,
// changes it the ways a test run must not (ALTER SYSTEM, a restart, a
// stop, a server appearing) and checks that each fails the check, that a
// test database left behind is reported, and that an untouched server
// passes.
func TestCheckFailsWhenTheRunChangedTheServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := pgcluster.Start(ctx, pgcluster.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Remove()) })
	getenv := func(k string) string {
		switch k {
		case "PGSTATE_URL":
			return c.AdminURL()
		case "PGSTATE_GRACE":
			return "2s"
		}
		return ""
	}
	file := filepath.Join(t.TempDir(), "state.json")
	var out bytes.Buffer
	pgstate := func(cmd string) error {
		out.Reset()
		return run(ctx, []string{cmd, file}, getenv, &out)
	}
	exec := func(sql string) {
		conn, err := pgx.Connect(ctx, c.AdminURL())
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		require.NoError(t, err)
	}

	for _, tc := range []struct {
		name   string
		change func()
		want   string // in the error; empty: check passes
		warn   string // in its output
	}{
		{"untouched", func() {}, "", ""},
		{"an ALTER SYSTEM", func() { exec(`ALTER SYSTEM SET max_connections = 301`) }, "postgresql.auto.conf changed", ""},
		{"a restart", func() {
			require.NoError(t, c.Stop(ctx, "fast"))
			require.NoError(t, c.Start(ctx))
		}, "postmaster restarted", ""},
		{"a reload of a changed file setting", func() {
			exec(`ALTER SYSTEM SET work_mem = '7MB'`)
			exec(`SELECT pg_reload_conf()`)
		}, "setting work_mem from a configuration file", ""},
		{"a test database left behind", func() { exec(`CREATE DATABASE hookd_t_0123abcd`) }, "", "still there (this run's tests or another process's): hookd_t_0123abcd"},
		{"a database that is not a test's", func() { exec(`CREATE DATABASE somebody_elses`) }, "", ""},
		{"a stop", func() { require.NoError(t, c.Stop(ctx, "fast")) }, "no longer answers", ""},
		{"a start", func() { require.NoError(t, c.Start(ctx)) }, "a server answers that did not", ""},
	} {
		require.NoError(t, pgstate("record"), tc.name)
		tc.change()
		err := pgstate("check")
		if tc.want != "" {
			require.ErrorContains(t, err, tc.want, tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		if tc.warn != "" {
			require.Contains(t, out.String(), tc.warn, tc.name)
		} else {
			require.NotContains(t, out.String(), "warning", tc.name)
		}
	}
}
