package e2e

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestLedgerCommitAckLost: the ledger's write (one statement, its own
// transaction) reaches Postgres and commits, but its acknowledgement is
// lost (the connection drops before the answer), so the worker cannot
// know its attempt was recorded and its job runs again. That run must find the record and not send again: every
// message arrives exactly once and the log holds one success per delivery.
func TestLedgerCommitAckLost(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	proxy := StartPGProxy(t, u.Host, `insert into delivery_attempts`)
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: func(r *deliverytest.Request) deliverytest.Response {
		return deliverytest.Response{Status: http.StatusOK, Delay: 20 * time.Millisecond}
	}})
	api := StartAPI(t, db.URL, nil)
	// MAX_JOBS as WORKERS: the ledger's batches stay small enough that
	// the 50 messages take more commits than the acknowledgements lost.
	StartDispatcher(t, "dispatcher", proxy.URL(db.Name), map[string]string{"WORKERS": "10", "MAX_JOBS": "10", "RETRY_SCHEDULE": "0s,200ms,200ms,200ms"})
	api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/l"), "secret": testSecret})

	const lose, messages = 5, 50
	proxy.LoseCommitAcks(lose)
	for i := range messages {
		api.SendMessage(t, "acme", "order.created", map[string]any{"n": i})
	}
	ctx := context.Background()
	// Delivered, and every job finished: a job whose record committed
	// unacknowledged runs again after the delivery is already delivered.
	Eventually(t, time.Minute, 100*time.Millisecond, "every message delivered and every job done", func() bool {
		var n, open int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM deliveries WHERE status = 'delivered'),
			(SELECT count(*) FROM river_job WHERE queue = 'deliver' AND state <> 'completed')`).Scan(&n, &open))
		return n == messages && open == 0
	})
	require.Equal(t, lose, proxy.Lost(), "acknowledgements lost")
	st := rc.Stats("/l")
	require.Equal(t, messages, st.DistinctDelivered)
	require.Zero(t, st.Duplicates, "a recorded attempt is not sent again")
	var successes, rows, distinct int
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE classification = 'success'), count(*), count(DISTINCT (delivery_id, attempt_number))
		FROM delivery_attempts`).Scan(&successes, &rows, &distinct))
	require.Equal(t, messages, successes, "one success logged per delivery")
	require.Equal(t, rows, distinct, "no attempt logged twice")
}
