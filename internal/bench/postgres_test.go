package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStartClusterSetsUpWhatTheScenariosNeed starts the bench's cluster (the
// shared private-cluster helper with the bench's settings): it is durable,
// preloads pg_stat_statements, has the service roles and the migrated
// template, and stop removes it.
func TestStartClusterSetsUpWhatTheScenariosNeed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := startCluster(ctx, "", slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	dir := filepath.Dir(c.pg.DataDir())
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			c.stop()
		}
	})
	for setting, want := range map[string]string{
		"fsync":                    "on",
		"synchronous_commit":       "on",
		"shared_preload_libraries": "pg_stat_statements",
		"log_lock_waits":           "on",
		"deadlock_timeout":         "10ms",
	} {
		var got string
		require.NoError(t, c.admin.QueryRow(ctx, `SELECT current_setting($1)`, setting).Scan(&got))
		require.Equal(t, want, got, setting)
	}
	var roles int
	require.NoError(t, c.admin.QueryRow(ctx, `SELECT count(*) FROM pg_roles WHERE rolname IN ($1, $2)`, roleAPI, roleDispatcher).Scan(&roles))
	require.Equal(t, 2, roles)
	pool, _, err := c.createDatabase(ctx, "bench_probe")
	require.NoError(t, err)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM deliveries`).Scan(&n), "cloned from the migrated template")
	pool.Close()
	require.NoError(t, c.dropDatabase(ctx, "bench_probe"))
	require.Positive(t, c.postmasterPID())

	c.stop()
	stopped = true
	_, err = os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist)
}
