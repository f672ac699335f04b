package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
)

// answer is one HTTP answer as a test sees it.
type answer struct {
	status int
	header http.Header
	body   []byte
	err    error
}

// call sends method path (with a JSON body when body is not nil and the
// bearer token when token is not empty) and returns the whole answer.
func call(ctx context.Context, client *http.Client, method, url, token string, body any) answer {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return answer{err: err}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return answer{err: err}
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: b, err: err}
}

// requireUnavailable checks a 503 problem+json answer.
func requireUnavailable(t *testing.T, a answer, what string) {
	t.Helper()
	require.NoError(t, a.err, what)
	require.Equal(t, http.StatusServiceUnavailable, a.status, "%s: %s", what, a.body)
	require.Equal(t, "application/problem+json", a.header.Get("Content-Type"), what)
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
	}
	require.NoError(t, json.Unmarshal(a.body, &p), "%s: %s", what, a.body)
	require.Equal(t, http.StatusServiceUnavailable, p.Status, what)
	require.NotEmpty(t, p.Type, what)
}

// TestPostgresUnavailable stops a private Postgres under a running api and
// dispatcher with deliveries in flight. While it is down the api answers
// 503 problem+json (readyz fails, POST /v1/messages accepts nothing) and the
// dispatcher stays up; when it returns, both resume without a restart and
// every accepted message is delivered.
func TestPostgresUnavailable(t *testing.T) {
	t.Parallel()
	pg := StartCluster(t)
	db := pg.NewDatabase(t, "hookd")
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: func(r *deliverytest.Request) deliverytest.Response {
		return deliverytest.Response{Status: http.StatusOK, Delay: 300 * time.Millisecond}
	}})
	api := StartAPI(t, db.URL, map[string]string{"NO_MIGRATE": "true"})
	d := StartDispatcher(t, "dispatcher", db.URL, map[string]string{
		"WORKERS": "20", "REQUEST_TIMEOUT": "2s", "RESCUE_STUCK_AFTER": "10s",
		"RETRY_SCHEDULE": "0s,200ms,500ms,1s,1s,1s,1s,1s",
	})
	api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/u"), "secret": testSecret})
	ctx := context.Background()
	client := &http.Client{Timeout: 10 * time.Second}

	const batch = 30
	for i := range batch {
		api.SendMessage(t, "acme", "order.created", map[string]any{"n": i})
	}
	// Stop Postgres with deliveries on the wire: their attempts end while
	// the ledger cannot write.
	Eventually(t, 30*time.Second, 5*time.Millisecond, "the first deliveries in flight", func() bool {
		return rc.Stats("/u").Requests > 0
	})
	pg.Stop(t)

	requireUnavailable(t, call(ctx, client, "GET", api.URL+"/readyz", "", nil), "api readyz")
	a := call(ctx, client, "POST", api.URL+"/v1/messages", api.Token,
		map[string]any{"tenant_id": "acme", "event_type": "order.created", "payload": map[string]any{"lost": true}})
	requireUnavailable(t, a, "POST /v1/messages")
	require.NotEmpty(t, a.header.Get("Retry-After"), "503 says when to come back")
	requireUnavailable(t, call(ctx, client, "GET", d.MetricsURL+"/readyz", "", nil), "dispatcher readyz")
	require.Equal(t, http.StatusOK, call(ctx, client, "GET", api.URL+"/healthz", "", nil).status, "api alive")
	// Long enough for every worker, River's fetch loop, the leader
	// elector, the listener and the ledger to fail and retry a few times.
	Consistently(t, 10*time.Second, 100*time.Millisecond, "the dispatcher and the api running while Postgres is down", func() bool {
		return !d.Exited() && !api.Exited()
	})
	require.Equal(t, http.StatusOK, call(ctx, client, "GET", d.MetricsURL+"/healthz", "", nil).status, "dispatcher alive")

	pg.Start(t)
	db.Pool.Reset() // the test's own connections died with the server
	Eventually(t, 30*time.Second, 100*time.Millisecond, "api ready again", func() bool {
		return call(ctx, client, "GET", api.URL+"/readyz", "", nil).status == http.StatusOK
	})
	Eventually(t, 30*time.Second, 100*time.Millisecond, "dispatcher ready again", func() bool {
		return call(ctx, client, "GET", d.MetricsURL+"/readyz", "", nil).status == http.StatusOK
	})
	for i := batch; i < 2*batch; i++ {
		api.SendMessage(t, "acme", "order.created", map[string]any{"n": i})
	}
	// Jobs whose completion was lost with Postgres wait for River's rescuer
	// (every 30 s, for jobs running longer than RESCUE_STUCK_AFTER).
	Eventually(t, 90*time.Second, 200*time.Millisecond, "every accepted message delivered", func() bool {
		var n int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE status = 'delivered'`).Scan(&n)
		return err == nil && n == 2*batch
	})
	var messages int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM messages`).Scan(&messages))
	require.Equal(t, 2*batch, messages, "the 503 answered POST wrote nothing")
	st := rc.Stats("/u")
	require.Equal(t, 2*batch, st.DistinctDelivered)
	require.Zero(t, st.BadSignatures)
	require.False(t, d.Exited(), "the dispatcher was never restarted")
	require.False(t, api.Exited(), "the api was never restarted")
	t.Logf("duplicates (attempts answered while the ledger could not write): %d", st.Duplicates)
}

// TestPostgresUnavailableClassChangeApplies: a traffic class changed right
// after a Postgres outage, while the dispatcher's listener is still backing
// off, reaches the dispatcher anyway: its NOTIFY was lost, so the reconnect
// reloads the classes. The change is seen through its effect: a class that
// tolerated any number of 401s now disables after two.
func TestPostgresUnavailableClassChangeApplies(t *testing.T) {
	t.Parallel()
	pg := StartCluster(t)
	db := pg.NewDatabase(t, "hookd")
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: func(r *deliverytest.Request) deliverytest.Response {
		return deliverytest.Response{Status: http.StatusUnauthorized}
	}})
	api := StartAPI(t, db.URL, map[string]string{"NO_MIGRATE": "true"})
	ctx := context.Background()
	class := map[string]any{"name": "flip", "auth_disable_after": 1000, "auth_disable_min_duration": "0s"}
	code, err := api.Do(ctx, "POST", "/v1/traffic-classes", class, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	// Attempts keep coming for 30 s, past the listener's reconnect.
	d := StartDispatcher(t, "dispatcher", db.URL, map[string]string{"RETRY_SCHEDULE": "0s" + strings.Repeat(",1s", 29)})
	e := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/locked"), "secret": testSecret, "traffic_class": "flip"})

	// Long enough for the listener's backoff to reach its cap (5 s).
	pg.Stop(t)
	Eventually(t, 30*time.Second, 100*time.Millisecond, "the listener backing off 5 s", func() bool {
		lines := d.Lines("msg=listener_disconnected")
		return len(lines) > 0 && strings.Contains(lines[len(lines)-1], "retry_in=5s")
	})
	pg.Start(t)
	class["auth_disable_after"] = 2
	Eventually(t, 10*time.Second, 10*time.Millisecond, "the class changed", func() bool {
		code, err := api.Do(ctx, "PUT", "/v1/traffic-classes/flip", class, nil)
		return err == nil && code == http.StatusOK
	})

	for i := range 3 {
		api.SendMessage(t, "acme", "user.updated", map[string]any{"n": i})
	}
	var got Endpoint
	Eventually(t, 30*time.Second, 100*time.Millisecond, "the endpoint disabled by the changed rule", func() bool {
		_, err := api.Do(ctx, "GET", "/v1/endpoints/"+e.ID, nil, &got)
		return err == nil && got.Status == "disabled"
	})
	require.Equal(t, "auth_failures", *got.DisabledReason)
}

// TestPostgresUnavailableFrozen freezes Postgres (SIGSTOP: connections stay open,
// nothing answers, as with a stalled disk or a paused VM) for longer than
// the ledger's write timeout while deliveries are in flight, then thaws it.
// Every delivery arrives, the dispatcher never restarts, and the log stays
// exact: one success per delivered delivery, no attempt number logged
// twice, nothing marked delivered that the receiver did not confirm.
func TestPostgresUnavailableFrozen(t *testing.T) {
	t.Parallel()
	pg := StartCluster(t)
	db := pg.NewDatabase(t, "hookd")
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: func(r *deliverytest.Request) deliverytest.Response {
		return deliverytest.Response{Status: http.StatusOK, Delay: 500 * time.Millisecond}
	}})
	api := StartAPI(t, db.URL, map[string]string{"NO_MIGRATE": "true"})
	e := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/f"), "secret": testSecret})
	const messages = 200
	for i := range messages {
		api.SendMessage(t, "acme", "order.created", map[string]any{"n": i})
	}
	// Queued before the dispatcher starts, so its workers have deliveries
	// in flight at once however slowly the api accepted them.
	d := StartDispatcher(t, "dispatcher", db.URL, map[string]string{
		"WORKERS": "60", "MAX_PER_ENDPOINT": "60", "REQUEST_TIMEOUT": "2s", "RETRY_SCHEDULE": "0s,500ms,1s,1s,1s,1s,1s,1s",
		// The freeze outlasts the ledger's writes, as a stalled server
		// outlasts the default 30 s, in less of the suite's time.
		"LEDGER_WRITE_TIMEOUT": "4s",
		// Past the freeze and the ledger's write timeout, so no job is
		// rescued while it still waits on a write; the default (the longest
		// endpoint timeout + 60s) would leave the lost completions a
		// minute behind the thaw.
		"RESCUE_STUCK_AFTER": "15s",
	})
	Eventually(t, 30*time.Second, 5*time.Millisecond, "deliveries in flight", func() bool {
		return rc.Stats("/f").InFlight >= 20
	})
	pg.Freeze(t)
	// Longer than the ledger's write timeout.
	Consistently(t, 8*time.Second, 200*time.Millisecond, "the dispatcher running while Postgres is frozen", func() bool {
		return !d.Exited()
	})
	Eventually(t, 10*time.Second, 100*time.Millisecond, "a ledger write timed out while frozen", func() bool {
		return len(d.Lines("msg=ledger_flush")) > 0
	})
	pg.Thaw(t)
	db.Pool.Reset()

	ctx := context.Background()
	Eventually(t, 3*time.Minute, 200*time.Millisecond, "every message delivered", func() bool {
		var n int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE status = 'delivered'`).Scan(&n)
		return err == nil && n == messages
	})
	st := rc.Stats("/f")
	require.Equal(t, messages, st.DistinctDelivered)
	marked := deliveredIDs(t, db, e.ID)
	for id := range rc.DeliveredIDs("/f") {
		require.True(t, marked[id], "%s confirmed and not marked delivered", id)
	}
	var successes, rows, distinct int
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE classification = 'success'), count(*), count(DISTINCT (delivery_id, attempt_number))
		FROM delivery_attempts`).Scan(&successes, &rows, &distinct))
	require.Equal(t, messages, successes, "one success logged per delivery")
	require.Equal(t, rows, distinct, "no attempt logged twice")
	require.False(t, d.Exited())
	t.Logf("duplicates (2xx whose record the freeze cut off): %d", st.Duplicates)
}
