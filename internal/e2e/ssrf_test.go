package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestGuardedDispatcherBlocksLoopback: a dispatcher without
// ALLOW_PRIVATE_TARGETS never connects to a receiver on 127.0.0.1 (which an
// api with the guard lifted let through at registration). Every attempt is
// recorded as blocked, retried on the schedule, the delivery ends failed,
// the receiver saw nothing and the breaker was told nothing, even under a
// class that would open after a handful of failures.
func TestGuardedDispatcherBlocksLoopback(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}})
	api := StartAPI(t, db.URL, nil)
	code, err := api.Do(context.Background(), "POST", "/v1/traffic-classes", map[string]any{
		"name": "touchy", "trip": "rate", "failure_rate_threshold": 0.5, "window": "5s", "min_throughput": 3,
		"open_duration": "10s", "half_open_trials": 1, "half_open_concurrency": 1,
	}, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	d := StartDispatcher(t, "dispatcher", db.URL, map[string]string{
		"ALLOW_PRIVATE_TARGETS": "false",
		"RETRY_SCHEDULE":        "0s,50ms,50ms",
	})
	e := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/internal"), "secret": testSecret, "traffic_class": "touchy"})
	const messages = 5
	var ids []string
	for i := range messages {
		m := api.SendMessage(t, "acme", "invoice.paid", map[string]any{"n": i})
		ids = append(ids, m.Deliveries[0].ID)
	}
	count := func(query string, args ...any) int {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), query, args...).Scan(&n))
		return n
	}
	Eventually(t, 30*time.Second, 50*time.Millisecond, "every delivery failed after its three attempts", func() bool {
		return count(`SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND status = 'failed'`, e.ID) == messages
	})
	require.Equal(t, 3*messages, count(`SELECT count(*) FROM delivery_attempts WHERE endpoint_id = $1`, e.ID))
	require.Equal(t, 3*messages, count(`SELECT count(*) FROM delivery_attempts
		WHERE endpoint_id = $1 AND classification = 'blocked' AND error_class = 'blocked' AND status_code IS NULL`, e.ID),
		"every attempt is blocked")

	var del struct {
		Status    string `json:"status"`
		LastError string `json:"last_error"`
	}
	code, err = api.Do(context.Background(), "GET", "/v1/deliveries/"+ids[0], nil, &del)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "failed", del.Status)
	require.Contains(t, del.LastError, "blocked: ")
	require.Contains(t, del.LastError, "127.0.0.1 is a loopback address")

	require.Zero(t, rc.Stats("/internal").Requests, "nothing reached the receiver")

	// A dispatcher stopping flushes every outcome it counted before it
	// exits: after that, no outcome counted, no transition, still closed in
	// its first generation.
	require.NoError(t, d.Stop(30*time.Second), "a clean exit:\n%s", d.Tail(20))
	require.Zero(t, count(`SELECT (SELECT count(*) FROM breaker_buckets WHERE endpoint_id = $1) + (SELECT count(*) FROM breaker_tallies WHERE endpoint_id = $1) + (SELECT count(*) FROM breaker_slots WHERE endpoint_id = $1)`, e.ID), "no outcome reached the breaker window")
	require.Zero(t, count(`SELECT count(*) FROM breaker_transitions WHERE endpoint_id = $1`, e.ID))
	var br struct {
		State               string `json:"state"`
		Generation          int64  `json:"generation"`
		Observations        int    `json:"observations"`
		Failures            int    `json:"failures"`
		ConsecutiveFailures int    `json:"consecutive_failures"`
	}
	code, err = api.Do(context.Background(), "GET", "/v1/endpoints/"+e.ID+"/breaker", nil, &br)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "closed", br.State)
	require.EqualValues(t, 1, br.Generation)
	require.Zero(t, br.Observations)
	require.Zero(t, br.Failures)
	require.Zero(t, br.ConsecutiveFailures)

	// A blocked attempt says nothing about credentials either.
	var status string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT status FROM endpoints WHERE id = $1`, e.ID).Scan(&status))
	require.Equal(t, "enabled", status)
	// River's notifier may log its LISTEN connection closing under it at
	// the stop: not an error of the attempts.
	var errs []string
	for _, l := range d.Lines("level=ERROR") {
		if !strings.Contains(l, "notifier.Notifier") {
			errs = append(errs, l)
		}
	}
	require.Empty(t, errs, "blocked attempts are not errors of the dispatcher")
	require.NotEmpty(t, d.Lines("msg=dispatcher_started"))
	require.Empty(t, d.Lines("ssrf_guard_off"))
}

// TestGuardedAPIRefusesLoopbackEndpoints: an api without
// ALLOW_PRIVATE_TARGETS refuses to register an endpoint on 127.0.0.1 or
// localhost with 400 naming the url field and the reason.
func TestGuardedAPIRefusesLoopbackEndpoints(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	api := StartAPI(t, db.URL, map[string]string{"ALLOW_PRIVATE_TARGETS": "false"})
	for url, reason := range map[string]string{
		"http://127.0.0.1:9/hook":        `^127\.0\.0\.1 is a loopback address$`,
		"http://localhost:9/hook":        `^resolves to (127\.0\.0\.1|::1), a loopback address$`,
		"http://169.254.169.254/latest/": `^169\.254\.169\.254 is a link-local address \(cloud metadata\)$`,
	} {
		var p struct {
			Status int `json:"status"`
			Errors []struct {
				Field   string `json:"field"`
				Message string `json:"message"`
			} `json:"errors"`
		}
		code, err := api.Do(context.Background(), "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": url}, &p)
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, code, url)
		require.Len(t, p.Errors, 1)
		require.Equal(t, "url", p.Errors[0].Field)
		require.Regexp(t, reason, p.Errors[0].Message)
	}
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM endpoints`).Scan(&n))
	require.Zero(t, n, "nothing written")
}
