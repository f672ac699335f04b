package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestMetricsAfterARunWithOneFailingEndpoint is the metrics' end-to-end
// test: two dispatchers deliver N messages to a healthy
// endpoint and to one answering 500 under a fast class; their /metrics
// pages, summed as Prometheus would, agree exactly with the delivery log
// wherever the figure is deterministic.
func TestMetricsAfterARunWithOneFailingEndpoint(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: func(r *deliverytest.Request) deliverytest.Response {
		if r.Path == "/failing" {
			return deliverytest.Response{Status: http.StatusInternalServerError}
		}
		return deliverytest.Response{Status: http.StatusOK}
	}})
	// Receivers on loopback are private targets.
	env := map[string]string{"ALLOW_PRIVATE_TARGETS": "true"}
	api := StartAPI(t, db.URL, env)
	require.NotEmpty(t, api.MetricsURL)
	code, err := api.Do(ctx, "POST", "/v1/traffic-classes", map[string]any{
		"name": "fast", "trip": "rate", "failure_rate_threshold": 0.5, "window": "2s", "min_throughput": 10,
		"open_duration": "30s", "half_open_trials": 3, "half_open_concurrency": 1,
	}, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)

	denv := map[string]string{
		"ALLOW_PRIVATE_TARGETS": "true", "WORKERS": "20", "QUEUE_METRICS_INTERVAL": "1s",
		// Failed deliveries come back quickly, to find the breaker open.
		"RETRY_SCHEDULE": "0s,1s,1s,1s,1s,1s,1s,1s,1s,1s",
	}
	ds := []*Dispatcher{StartDispatcher(t, "dispatcher-1", db.URL, denv), StartDispatcher(t, "dispatcher-2", db.URL, denv)}
	failing := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/failing"), "secret": testSecret, "traffic_class": "fast"})
	healthy := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/ok"), "secret": testSecret, "traffic_class": "fast"})

	const n = 40
	start := time.Now()
	for i := range n {
		api.SendMessage(t, "acme", "order.created", map[string]any{"n": i})
	}

	sum := func(series string) float64 {
		var total float64
		for _, d := range ds {
			total += metricValue(t, d.MetricsURL, series)
		}
		return total
	}
	attempts := func(where string, args ...any) float64 {
		var c int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM delivery_attempts WHERE `+where, args...).Scan(&c))
		return float64(c)
	}
	Eventually(t, 30*time.Second, 100*time.Millisecond, "every message delivered to the healthy endpoint", func() bool {
		return sum(`webhook_delivery_total{endpoint="`+healthy.ID+`",outcome="success"}`) == n
	})
	Eventually(t, 20*time.Second, 100*time.Millisecond, "the failing endpoint's breaker open and its attempts over", func() bool {
		var state string
		_ = db.Pool.QueryRow(ctx, `SELECT state FROM breaker_states WHERE endpoint_id = $1`, failing.ID).Scan(&state)
		logged := attempts(`endpoint_id = $1`, failing.ID)
		return state == "open" && sum(`webhook_delivery_total{endpoint="`+failing.ID+`",outcome="failure"}`) == logged &&
			sum("webhook_delivery_duration_seconds_count") == attempts("true")
	})

	// The breaker stays open 30 s (plus jitter): everything below is read
	// before a trial can change it.
	require.Less(t, time.Since(start), 25*time.Second, "checked before the open duration ends")
	require.Equal(t, float64(n), sum(`webhook_delivery_total{endpoint="`+healthy.ID+`",outcome="success"}`))
	require.Equal(t, attempts(`endpoint_id = $1`, healthy.ID), float64(n), "one attempt per healthy delivery")
	fivexx := attempts(`endpoint_id = $1 AND status_code >= 500`, failing.ID)
	require.GreaterOrEqual(t, fivexx, 10.0, "min_throughput failures before the trip")
	require.Equal(t, fivexx, sum(`webhook_delivery_5xx_total{endpoint="`+failing.ID+`"}`))
	require.Zero(t, sum(`webhook_delivery_5xx_total{endpoint="`+healthy.ID+`"}`))
	require.Equal(t, attempts("true"), sum("webhook_delivery_duration_seconds_count"), "one duration observation per logged attempt")

	require.Equal(t, 1.0, sum(`breaker_open_total{endpoint="`+failing.ID+`"}`), "one open, made by one of the dispatchers")
	require.Zero(t, sum(`breaker_open_total{endpoint="`+healthy.ID+`"}`))
	Eventually(t, 5*time.Second, 50*time.Millisecond, "every dispatcher sees the breaker open", func() bool {
		for _, d := range ds {
			if metricValue(t, d.MetricsURL, `breaker_state{endpoint="`+failing.ID+`",state="open"}`) != 1 ||
				metricValue(t, d.MetricsURL, `breaker_state{endpoint="`+failing.ID+`",state="closed"}`) != 0 {
				return false
			}
		}
		return true
	})
	// The failing deliveries' retries, a second after each failure, find
	// the breaker open (first attempts may all have been made before it
	// opened).
	Eventually(t, 10*time.Second, 50*time.Millisecond, "deliveries refused while open", func() bool {
		return sum(`breaker_rejected_total{endpoint="`+failing.ID+`"}`) > 0
	})
	require.Zero(t, sum(`breaker_rejected_total{endpoint="`+healthy.ID+`"}`))
	require.Zero(t, sum(`endpoint_auto_disabled_total{reason="auth_failures"}`))

	// Fleet-wide figures: each dispatcher exports the same values, those
	// of the deliver queue (measured every second here).
	Eventually(t, 10*time.Second, 100*time.Millisecond, "queue metrics equal to the queue", func() bool {
		for _, state := range store.QueueStates {
			var jobs float64
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE queue = 'deliver' AND state = $1::river_job_state`, state).Scan(&jobs))
			for _, d := range ds {
				if metricValue(t, d.MetricsURL, `webhook_queue_depth{state="`+state+`"}`) != jobs {
					return false
				}
			}
		}
		for _, d := range ds {
			if metricValue(t, d.MetricsURL, "webhook_oldest_pending_seconds") != 0 {
				return false
			}
		}
		return true
	})
	// Refused deliveries wait for the breaker parked: without a River job.
	Eventually(t, 10*time.Second, 100*time.Millisecond, "refused deliveries parked and counted", func() bool {
		var parked int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND status = 'waiting' AND job_id IS NULL`, failing.ID).Scan(&parked))
		return parked > 0 && sum("webhook_delivery_parked_total") > 0
	})
	require.Zero(t, sum("webhook_delivery_unparked_total"), "nothing released while the breaker is open")
	for _, d := range ds {
		require.Equal(t, 30.0, metricValue(t, d.MetricsURL, `breaker_class_open_duration_seconds{class="fast"}`))
		require.Zero(t, metricValue(t, d.MetricsURL, "breaker_fleet_suspect"))
		require.Positive(t, metricValue(t, d.MetricsURL, "go_goroutines"))
		require.Positive(t, metricValue(t, d.MetricsURL, "process_resident_memory_bytes"))
	}

	// The api counts its requests by route pattern.
	require.Equal(t, float64(n), metricValue(t, api.MetricsURL, `http_requests_total{method="POST",route="/v1/messages",status="202"}`))
	require.Equal(t, 2.0, metricValue(t, api.MetricsURL, `http_requests_total{method="POST",route="/v1/endpoints",status="201"}`))
	require.Equal(t, 1.0, metricValue(t, api.MetricsURL, `http_requests_total{method="POST",route="/v1/traffic-classes",status="201"}`))
	require.Positive(t, metricValue(t, api.MetricsURL, "process_resident_memory_bytes"))
	resp, err := http.Get(api.URL + "/metrics")
	require.NoError(t, err)
	resp.Body.Close()
	require.NotEqual(t, http.StatusOK, resp.StatusCode, "/metrics is not on the API's listener")
}
