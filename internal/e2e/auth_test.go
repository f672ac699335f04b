package e2e

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store/storetest"
)

const opsSecret = "whsec_b3BlcmF0aW9uYWxzZWNyZXRvcGVyYXRpb25hbA=="

// TestAuthWallDisablesAndEnableReleasesHeld: an endpoint answering 401 to
// everything is disabled after its class's streak, its breaker never opens,
// its later messages are held; once its receiver is fixed and it is
// enabled, every held delivery arrives exactly once. Another endpoint of the
// same tenant is untouched throughout.
func TestAuthWallDisablesAndEnableReleasesHeld(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	var fixed atomic.Bool
	log := &opsLog{seen: map[string]bool{}, tries: map[string]int{}}
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret, opsSecret}, Respond: func(r *deliverytest.Request) deliverytest.Response {
		if r.Path == "/ops" {
			if err := log.record(r); err != nil {
				return deliverytest.Response{Status: http.StatusBadRequest}
			}
			return deliverytest.Response{Status: http.StatusOK}
		}
		if r.Path == "/locked" && !fixed.Load() {
			return deliverytest.Response{Status: http.StatusUnauthorized, Body: []byte(`{"error":"bad token"}`)}
		}
		return deliverytest.Response{Status: http.StatusOK}
	}})
	api := StartAPI(t, db.URL, nil)
	code, err := api.Do(context.Background(), "POST", "/v1/traffic-classes", map[string]any{
		"name": "authfast", "window": "2s", "min_throughput": 5, "auth_disable_after": 5, "auth_disable_min_duration": "1s",
	}, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	d := StartDispatcher(t, "dispatcher", db.URL, map[string]string{
		"RETRY_SCHEDULE":             "0s,300ms,300ms,300ms,300ms,300ms,300ms,300ms,300ms,300ms",
		"OPERATIONAL_WEBHOOK_URL":    rc.URL("/ops"),
		"OPERATIONAL_WEBHOOK_SECRET": opsSecret,
	})
	locked := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/locked"), "secret": testSecret, "traffic_class": "authfast"})
	api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/fine"), "secret": testSecret, "traffic_class": "authfast"})

	var sent int
	send := func() {
		api.SendMessage(t, "acme", "user.updated", map[string]any{"n": sent})
		sent++
	}
	for range 10 {
		send()
		time.Sleep(200 * time.Millisecond)
	}
	var e Endpoint
	Eventually(t, 30*time.Second, 50*time.Millisecond, "the endpoint disabled for auth failures", func() bool {
		_, err := api.Do(context.Background(), "GET", "/v1/endpoints/"+locked.ID, nil, &e)
		return err == nil && e.Status == "disabled"
	})
	require.Equal(t, "auth_failures", *e.DisabledReason)

	// Later messages are held: deliveries exist, nothing is sent.
	before := rc.Stats("/locked").Requests
	for range 5 {
		send()
	}
	Eventually(t, 30*time.Second, 50*time.Millisecond, "every delivery to the disabled endpoint held", func() bool {
		var pending int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND status <> 'held'`, locked.ID).Scan(&pending))
		return pending == 0
	})
	require.Equal(t, before, rc.Stats("/locked").Requests, "nothing sent while disabled")
	var transitions int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM breaker_transitions WHERE endpoint_id = $1`, locked.ID).Scan(&transitions))
	require.Zero(t, transitions, "auth failures never reach the breaker")
	require.Equal(t, 1.0, metricValue(t, d.MetricsURL, `endpoint_auto_disabled_total{reason="auth_failures"}`))
	require.Len(t, d.Lines("msg=endpoint_auto_disabled"), 1)
	var events int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM endpoint_events WHERE endpoint_id = $1 AND kind = 'disabled' AND reason = 'auth_failures'`, locked.ID).Scan(&events))
	require.Equal(t, 1, events)
	Eventually(t, 30*time.Second, 50*time.Millisecond, "the operational endpoint.disabled webhook", func() bool {
		return len(log.find("endpoint.disabled", locked.ID)) == 1
	})
	require.Equal(t, "auth_failures", log.find("endpoint.disabled", locked.ID)[0].Data["reason"])
	require.Zero(t, rc.Stats("/ops").BadSignatures)

	// Fix the receiver and enable: every held delivery arrives, once.
	fixed.Store(true)
	var enabled struct {
		Endpoint
		Releasing int `json:"releasing"`
	}
	code, err = api.Do(context.Background(), "POST", "/v1/endpoints/"+locked.ID+"/enable", nil, &enabled)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "enabled", enabled.Status)
	require.Equal(t, sent, enabled.Releasing, "the answer counts every held delivery, released by the dispatcher")
	Eventually(t, time.Minute, 100*time.Millisecond, "every message delivered to both endpoints", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE status = 'delivered' AND tenant_id = 'acme'`).Scan(&n))
		return n == 2*sent
	})
	st := rc.Stats("/locked")
	require.Equal(t, sent, st.DistinctDelivered, "none lost")
	require.Zero(t, st.Duplicates, "none duplicated")
	fine := rc.Stats("/fine")
	require.Equal(t, sent, fine.DistinctDelivered)
	require.Equal(t, sent, fine.Requests, "the other endpoint saw every message once, first try")
	require.Zero(t, rc.Stats("/locked").BadSignatures)
}

// TestShadowClassNeverRefuses: under a class with enforce=false the breaker
// records its would-be open, but every delivery is still attempted.
func TestShadowClassNeverRefuses(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	var failing atomic.Bool
	failing.Store(true)
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: func(r *deliverytest.Request) deliverytest.Response {
		if failing.Load() {
			return deliverytest.Response{Status: http.StatusBadGateway}
		}
		return deliverytest.Response{Status: http.StatusOK}
	}})
	api := StartAPI(t, db.URL, nil)
	shadow := map[string]any{}
	for k, v := range fastClass {
		shadow[k] = v
	}
	shadow["name"], shadow["enforce"] = "shadowfast", false
	code, err := api.Do(context.Background(), "POST", "/v1/traffic-classes", shadow, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	// Retries keep coming for over a minute, so none is exhausted before
	// the receiver recovers.
	StartDispatcher(t, "dispatcher", db.URL, map[string]string{"RETRY_SCHEDULE": "0s,3s" + strings.Repeat(",2s", 40)})
	e := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/s"), "secret": testSecret, "traffic_class": "shadowfast"})
	const messages = 120
	for i := range messages {
		api.SendMessage(t, "acme", "a.b", map[string]any{"n": i})
		time.Sleep(20 * time.Millisecond)
	}
	Eventually(t, 30*time.Second, 50*time.Millisecond, "a would-be open recorded", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM breaker_transitions WHERE endpoint_id = $1 AND to_state = 'open' AND shadow`, e.ID).Scan(&n))
		return n > 0
	})
	// Every message was attempted on its first try: nothing refused.
	Eventually(t, 30*time.Second, 50*time.Millisecond, "every first attempt made", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(DISTINCT delivery_id) FROM delivery_attempts WHERE endpoint_id = $1 AND attempt_number = 1`, e.ID).Scan(&n))
		return n == messages
	})
	var waiting int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE status = 'waiting' OR breaker_open_until IS NOT NULL`).Scan(&waiting))
	require.Zero(t, waiting, "shadow mode never refuses")
	failing.Store(false)
	deadline := time.Now().Add(time.Minute)
	for rc.Stats("/s").DistinctDelivered != messages && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if rc.Stats("/s").DistinctDelivered != messages {
		rows, _ := db.Pool.Query(context.Background(), `SELECT d.status, d.attempt_count, j.state, j.attempt, j.scheduled_at - now() FROM deliveries d LEFT JOIN river_job j ON j.id = d.job_id WHERE d.status <> 'delivered' LIMIT 5`)
		for rows.Next() {
			var st, js string
			var ac, ja int
			var in time.Duration
			_ = rows.Scan(&st, &ac, &js, &ja, &in)
			t.Logf("delivery %s attempts %d job %s attempt %d due in %s", st, ac, js, ja, in)
		}
		rows.Close()
		t.Fatalf("delivered %d of %d", rc.Stats("/s").DistinctDelivered, messages)
	}
}
