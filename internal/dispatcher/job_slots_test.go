package dispatcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/dispatcher"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestJobsBeyondWorkersHoldNoRequest: River runs more delivery jobs at
// once than WORKERS (MaxJobs, by default 3 x Workers), because a job
// also waits for its payload, its place and the ledger's commit, which
// hold no request. With Workers 2 and the ledger's commits held up (the
// six deliveries' rows locked by the test), six messages to six
// endpoints are all sent: two jobs waiting for their commit no longer
// stop the other four from sending. The requests in flight stay within
// WORKERS, and every message is delivered once when the lock goes.
func TestJobsBeyondWorkersHoldNoRequest(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	secret := newSecret(t)
	// Every endpoint has the same URL, so the receiver's one path counts
	// the requests in flight to all of them; each answer takes a while,
	// so that requests would overlap.
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{secret}, Respond: func(*deliverytest.Request) deliverytest.Response {
		return deliverytest.Response{Delay: 20 * time.Millisecond}
	}})
	st := store.New(db.Pool, nil)
	inserter, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	require.NoError(t, err)
	const n = 6
	for i := range n {
		tenant := fmt.Sprintf("t%d", i)
		_, err := st.CreateEndpoint(t.Context(), store.Endpoint{TenantID: tenant, URL: rc.URL("/hook"), Secret: secret})
		require.NoError(t, err)
		_, _, err = st.CreateMessage(t.Context(), store.NewMessage{TenantID: tenant, EventType: "order.created", Payload: json.RawMessage(`{"n":1}`)}, &delivery.Enqueuer{Client: inserter})
		require.NoError(t, err)
	}
	// The ledger's status updates wait for this lock; nothing before a
	// request takes these rows' locks.
	tx, err := db.Pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(t.Context(), `SET LOCAL idle_in_transaction_session_timeout = 0`)
	require.NoError(t, err)
	var locked int
	require.NoError(t, tx.QueryRow(t.Context(), `WITH l AS (SELECT id FROM deliveries FOR UPDATE) SELECT count(*) FROM l`).Scan(&locked))
	require.Equal(t, n, locked)

	cfg := dispatcher.DefaultConfig()
	cfg.MetricsAddr = "127.0.0.1:0"
	cfg.AllowPrivateTargets = true
	cfg.Breakers = false
	cfg.Workers = 2
	cfg.ShutdownGrace = time.Second
	_, cancel, done := startRun(t, cfg, db.Pool, slog.LevelError)
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	require.Eventually(t, func() bool { return rc.Stats("/hook").Requests >= n },
		waitFor, 10*time.Millisecond, "every message is sent while the first commits wait")
	require.NoError(t, tx.Rollback(t.Context()))
	require.Eventually(t, func() bool {
		var delivered int
		require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM deliveries WHERE status = 'delivered'`).Scan(&delivered))
		return delivered == n
	}, waitFor, 20*time.Millisecond, "every message is delivered")
	stats := rc.Stats("/hook")
	require.LessOrEqual(t, stats.MaxInFlight, cfg.Workers, "requests in flight stay within WORKERS")
	require.Equal(t, n, stats.Requests, "each message sent once")
	require.Equal(t, n, stats.DistinctDelivered)
}
