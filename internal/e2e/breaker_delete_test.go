package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestDeletingEndpointsSettlesTheirParkedDeliveries: an endpoint whose
// breaker is open and one whose breaker is isolated, each with a parked
// backlog, are deleted; within seconds every delivery of both is final,
// failed with last_error "endpoint deleted", and nothing is left parked.
func TestDeletingEndpointsSettlesTheirParkedDeliveries(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: func(r *deliverytest.Request) deliverytest.Response {
		return deliverytest.Response{Status: http.StatusInternalServerError}
	}})
	api := StartAPI(t, db.URL, nil)
	code, err := api.Do(context.Background(), "POST", "/v1/traffic-classes", fastClass, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	StartDispatcher(t, "dispatcher-1", db.URL, map[string]string{"WORKERS": "20", "REQUEST_TIMEOUT": "2s", "RETRY_SCHEDULE": "0s,1s,1s,1s,1s,1s,1s,1s,1s,1s"})
	open := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/open"), "secret": testSecret, "traffic_class": "fast"})
	isolated := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/isolated"), "secret": testSecret, "traffic_class": "fast"})
	code, err = api.Do(context.Background(), "POST", "/v1/endpoints/"+isolated.ID+"/breaker/isolate", map[string]any{"reason": "test"}, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)

	const messages = 60
	for i := range messages {
		api.SendMessage(t, "acme", "order.created", map[string]any{"n": i})
	}
	parked := func(endpointID string) (n int) {
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM deliveries
			WHERE endpoint_id = $1 AND status = 'waiting' AND job_id IS NULL`, endpointID).Scan(&n))
		return n
	}
	Eventually(t, 60*time.Second, 50*time.Millisecond, "both backlogs parked", func() bool {
		var state string
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT state FROM breaker_states WHERE endpoint_id = $1`, open.ID).Scan(&state))
		return state != "closed" && parked(open.ID) >= messages/2 && parked(isolated.ID) == messages
	})

	deleted := time.Now()
	for _, id := range []string{open.ID, isolated.ID} {
		code, err := api.Do(context.Background(), "DELETE", "/v1/endpoints/"+id, nil, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, code)
	}
	Eventually(t, 5*time.Second, 50*time.Millisecond, "every delivery of both endpoints final", func() bool {
		var open int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM deliveries
			WHERE status NOT IN ('delivered', 'failed')`).Scan(&open))
		return open == 0
	})
	t.Logf("all %d deliveries final %.2f s after the deletes", 2*messages, time.Since(deleted).Seconds())
	var wrong int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM deliveries
		WHERE status = 'failed' AND last_error IS DISTINCT FROM 'endpoint deleted'
			AND last_attempt_at IS NULL`).Scan(&wrong))
	require.Zero(t, wrong, "a delivery settled by the delete says why")
	// The jobs left behind find the endpoint gone and send nothing more. A
	// job already past its checks when the delete committed (a probe, say)
	// may still finish its request: count from when none is running.
	Eventually(t, 10*time.Second, 50*time.Millisecond, "no job of a deleted endpoint running", func() bool {
		var running int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
			WHERE state = 'running' AND (kind = 'deliver' AND args->>'endpoint_id' = ANY($1) OR kind = 'deliver_message' AND EXISTS (
				SELECT 1 FROM jsonb_array_elements_text(args->'endpoints') x WHERE x = ANY($1)))`, []string{open.ID, isolated.ID}).Scan(&running))
		return running == 0
	})
	sent := rc.Stats("/open").Requests
	Consistently(t, 2*time.Second, 100*time.Millisecond, "nothing sent to a deleted endpoint", func() bool {
		return rc.Stats("/open").Requests == sent && rc.Stats("/isolated").Requests == 0
	})
}
