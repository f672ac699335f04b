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

// TestLostFetchAnswerIsRunWithinSeconds: the server runs a dispatcher's
// fetch of jobs and its answer never reaches the dispatcher (the
// connection breaks after the server ran it; after a network cut, a fetch
// River stopped waiting for runs when the link comes back). The jobs stay
// running under a live dispatcher's ID, which the fleet's rescue of gone
// dispatchers never takes: the dispatcher's own heartbeat releases them,
// and the message is delivered seconds after, once, not after
// RESCUE_STUCK_AFTER.
func TestLostFetchAnswerIsRunWithinSeconds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	// River's fetch and hookd's windowed one (used once River's is slow,
	// as on a busy machine) both lock their jobs in locked_jobs.
	proxy := StartPGProxy(t, u.Host, `locked_jobs`)
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: func(*deliverytest.Request) deliverytest.Response {
		return deliverytest.Response{Status: http.StatusOK}
	}})
	api := StartAPI(t, db.URL, nil)
	const rescueAfter = 5 * time.Minute
	d := StartDispatcher(t, "dispatcher", proxy.URL(db.Name), map[string]string{"RESCUE_STUCK_AFTER": rescueAfter.String()})
	api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/l"), "secret": testSecret})

	proxy.LoseAnswersWithRows(1)
	sent := time.Now()
	api.SendMessage(t, "acme", "order.created", map[string]any{"n": 1})
	Eventually(t, 2*time.Minute, 50*time.Millisecond, "the message delivered", func() bool {
		return rc.Stats("/l").DistinctDelivered == 1
	})
	took := time.Since(sent)
	require.Equal(t, 1, proxy.Lost(), "the answer of the fetch that found the job was lost")
	var released int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job
		WHERE queue = 'deliver' AND errors::text LIKE '%the answer to the fetch%'`).Scan(&released))
	require.Equal(t, 1, released, "the message's job was released")
	require.Equal(t, 1.0, metricValue(t, d.MetricsURL, "dispatcher_fleet_lost_runs_released_total"))
	require.Zero(t, rc.Stats("/l").Duplicates)
	t.Logf("delivered %.1f s after it was sent; the lost fetch's job released by the heartbeat (rescue after %s)", took.Seconds(), rescueAfter)
	require.Less(t, took, time.Minute, "released within seconds, not after RESCUE_STUCK_AFTER")
}
