package dispatcher_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/dispatcher"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestDispatcherRefusesAFleetPastTheServersConnections: a dispatcher
// whose start would take the live fleet's connections past the server's
// max_connections does not start, says why, and leaves no heartbeat; one
// that fits registers its connections.
func TestDispatcherRefusesAFleetPastTheServersConnections(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	var usable int
	require.NoError(t, db.Pool.QueryRow(t.Context(),
		`SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int`).Scan(&usable))
	// A live dispatcher that registered all but 5 of the server's connections.
	_, err := db.Pool.Exec(t.Context(), `INSERT INTO hookd_dispatchers (id, db_connections) VALUES ('big', $1)`, usable-5)
	require.NoError(t, err)

	cfg := dispatcher.DefaultConfig()
	cfg.MetricsAddr = "127.0.0.1:0"
	cfg.AllowPrivateTargets = true
	cfg.Breakers = false
	d, err := dispatcher.New(cfg, dispatcher.Deps{Pool: db.Pool, Logger: slog.New(slog.DiscardHandler), Stdout: io.Discard})
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() { errc <- d.Run(t.Context()) }()
	select {
	case err = <-errc:
	case <-time.After(waitFor):
		t.Fatal("the dispatcher started")
	}
	require.ErrorIs(t, err, delivery.ErrFleetConnections)
	require.ErrorContains(t, err, "--db-max-conns")
	var n int
	require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM hookd_dispatchers WHERE id <> 'big'`).Scan(&n))
	require.Zero(t, n, "no heartbeat left behind")

	// With room made, it starts and registers what it may open.
	_, err = db.Pool.Exec(t.Context(), `UPDATE hookd_dispatchers SET db_connections = 10 WHERE id = 'big'`)
	require.NoError(t, err)
	_, cancel, done := startRun(t, cfg, db.Pool, slog.LevelError)
	require.Eventually(t, func() bool {
		var conns int
		err := db.Pool.QueryRow(t.Context(), `SELECT coalesce(sum(db_connections), 0) FROM hookd_dispatchers WHERE id <> 'big'`).Scan(&conns)
		return err == nil && conns == int(db.Pool.Config().MaxConns)+dispatcher.LedgerConns+1
	}, waitFor, 20*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}

// TestFleetSeesAJoinAndALeaveAtOnce: a dispatcher learns of another's
// start and of its stop from the fleet's notification, not at its own
// next heartbeat (an hour here), so its share of the fetch turns follows
// at once: a dispatcher added to a loaded fleet used to find nothing to
// fetch until the others' next heartbeats.
func TestFleetSeesAJoinAndALeaveAtOnce(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	cfg := dispatcher.DefaultConfig()
	cfg.MetricsAddr = "127.0.0.1:0"
	cfg.AllowPrivateTargets = true
	cfg.Breakers = false
	cfg.FleetHeartbeat = time.Hour
	size := func(base string, n string) func() bool { return metricLine(t, base, "dispatcher_fleet_size "+n+"\n") }
	// Warnings logged: a failed leave or heartbeat (fleet_leave,
	// fleet_heartbeat) is what a failure here would come from.
	first, cancelFirst, firstDone := startRun(t, cfg, db.Pool, slog.LevelWarn)
	defer func() { cancelFirst(); require.NoError(t, <-firstDone) }()
	require.Eventually(t, size(first, "1"), waitFor, 10*time.Millisecond)

	second, cancelSecond, secondDone := startRun(t, cfg, db.Pool, slog.LevelWarn)
	require.Eventually(t, size(second, "2"), waitFor, 10*time.Millisecond, "the second joined, counting the first")
	require.Eventually(t, size(first, "2"), waitFor, 10*time.Millisecond, "the first heard of it")
	cancelSecond()
	require.NoError(t, <-secondDone)
	require.Eventually(t, size(first, "1"), waitFor, 10*time.Millisecond, "and of its leave")
}
