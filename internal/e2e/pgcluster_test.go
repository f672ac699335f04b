package e2e

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPrivateClusterKeepsCommittedRowsAcrossRestartAndCrash checks the
// cluster helper itself: a database it creates is migrated, and committed
// rows survive a fast restart and an immediate-mode crash.
func TestPrivateClusterKeepsCommittedRowsAcrossRestartAndCrash(t *testing.T) {
	t.Parallel()
	c := StartCluster(t)
	db := c.NewDatabase(t, "hookd")
	ctx := context.Background()
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries`).Scan(&n), "migrated")
	require.Zero(t, n)
	_, err := db.Pool.Exec(ctx, `CREATE TABLE probe (n int); INSERT INTO probe VALUES (1)`)
	require.NoError(t, err)
	count := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM probe`).Scan(&n))
		return n
	}

	c.Restart(t)
	require.True(t, c.Running())
	db.Pool.Reset() // its connections died with the server
	require.Equal(t, 1, count())
	c.Crash(t)
	require.False(t, c.Running())
	c.Start(t)
	db.Pool.Reset()
	require.Equal(t, 1, count())
}
