package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store/storetest"
)

// opsEvent is one operational event as a receiver got it.
type opsEvent struct {
	MsgID     string         `json:"-"`
	Type      string         `json:"type"`
	Timestamp time.Time      `json:"timestamp"`
	Data      map[string]any `json:"data"`
}

// opsLog records the operational events a receiver path answered 2xx,
// once per webhook-id, and every webhook-id a failing path was sent.
type opsLog struct {
	mu     sync.Mutex
	seen   map[string]bool
	events []opsEvent
	tries  map[string]int
}

func (l *opsLog) record(r *deliverytest.Request) error {
	var ev opsEvent
	if err := json.Unmarshal(r.Body, &ev); err != nil {
		return err
	}
	ev.MsgID = r.MsgID
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.seen[ev.MsgID] {
		l.seen[ev.MsgID] = true
		l.events = append(l.events, ev)
	}
	return nil
}

func (l *opsLog) try(id string) {
	l.mu.Lock()
	l.tries[id]++
	l.mu.Unlock()
}

// find returns the events of type typ about endpoint, in arrival order.
func (l *opsLog) find(typ, endpoint string) []opsEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []opsEvent
	for _, ev := range l.events {
		if ev.Type == typ && ev.Data["endpoint_id"] == endpoint {
			out = append(out, ev)
		}
	}
	return out
}

func (l *opsLog) maxTries() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.tries {
		n = max(n, c)
	}
	return n
}

// TestOperationalEventsEndToEnd: one run of a real api and dispatcher
// produces every operational event type, each received by the operational
// endpoint that --operational-webhook-url registers, signed with its
// secret (the receiver verifies every request): endpoint CRUD, an auth
// wall that disables an endpoint and its enable, a breaker that opens on
// 500s and closes once they stop, a delivery whose short retry schedule
// is exhausted and the retry that delivers it. An operational endpoint
// that always fails is retried with a stable webhook-id, and no event is
// ever about an operational endpoint: their count stays put once the
// customer side is quiet.
func TestOperationalEventsEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Now()
	phase := func(name string) { t.Logf("%s at %s", name, time.Since(start).Round(time.Millisecond)) }
	db := storetest.New(t)
	log := &opsLog{seen: map[string]bool{}, tries: map[string]int{}}
	ops := deliverytest.Start(t, deliverytest.Options{Secrets: []string{opsSecret}, Respond: func(r *deliverytest.Request) deliverytest.Response {
		if r.Path == "/broken" {
			log.try(r.MsgID)
			return deliverytest.Response{Status: http.StatusInternalServerError}
		}
		if err := log.record(r); err != nil {
			return deliverytest.Response{Status: http.StatusBadRequest}
		}
		return deliverytest.Response{Status: http.StatusOK}
	}})
	var brkFixed, flakyFixed atomic.Bool
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: func(r *deliverytest.Request) deliverytest.Response {
		switch {
		case r.Path == "/locked":
			return deliverytest.Response{Status: http.StatusUnauthorized}
		case r.Path == "/brk" && !brkFixed.Load(), r.Path == "/flaky" && !flakyFixed.Load():
			return deliverytest.Response{Status: http.StatusInternalServerError}
		}
		return deliverytest.Response{Status: http.StatusOK}
	}})
	api := StartAPI(t, db.URL, nil)
	for _, class := range []map[string]any{
		fastClass,
		{"name": "authfast", "window": "2s", "min_throughput": 5, "auth_disable_after": 5, "auth_disable_min_duration": "1s"},
	} {
		code, err := api.Do(ctx, "POST", "/v1/traffic-classes", class, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, code)
	}
	// Three attempts 50 ms apart: retries are exhausted within a second.
	d := StartDispatcher(t, "dispatcher", db.URL, map[string]string{
		"RETRY_SCHEDULE":             "0s,50ms,50ms",
		"OPERATIONAL_WEBHOOK_URL":    ops.URL("/ops"),
		"OPERATIONAL_WEBHOOK_SECRET": opsSecret,
	})
	require.Len(t, d.Lines("msg=operational_endpoint_registered"), 1)
	var list struct {
		Data []struct {
			ID         string   `json:"id"`
			URL        string   `json:"url"`
			EventTypes []string `json:"event_types"`
		} `json:"data"`
	}
	code, err := api.Do(ctx, "GET", "/v1/operational-endpoints", nil, &list)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, list.Data, 1, "the flag registered one operational endpoint")
	require.Equal(t, ops.URL("/ops"), list.Data[0].URL)
	require.Empty(t, list.Data[0].EventTypes, "subscribed to everything")
	flagged := list.Data[0].ID
	var broken struct {
		ID string `json:"id"`
	}
	code, err = api.Do(ctx, "POST", "/v1/operational-endpoints", map[string]any{"url": ops.URL("/broken"), "secret": opsSecret}, &broken)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	customer := map[string]bool{}
	create := func(tenant, path, class string) Endpoint {
		body := map[string]any{"tenant_id": tenant, "url": rc.URL(path), "secret": testSecret}
		if class != "" {
			body["traffic_class"] = class
		}
		e := api.CreateEndpoint(t, body)
		customer[e.ID] = true
		return e
	}
	waitFor := func(typ, endpoint string) opsEvent {
		t.Helper()
		Eventually(t, 30*time.Second, 20*time.Millisecond, typ+" about "+endpoint, func() bool { return len(log.find(typ, endpoint)) > 0 })
		return log.find(typ, endpoint)[0]
	}

	phase("started")

	// CRUD on an endpoint.
	crud := create("crudco", "/crud", "")
	code, err = api.Do(ctx, "PATCH", "/v1/endpoints/"+crud.ID, map[string]any{"description": "renamed"}, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	code, err = api.Do(ctx, "DELETE", "/v1/endpoints/"+crud.ID, nil, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, code)
	require.Equal(t, rc.URL("/crud"), waitFor("endpoint.created", crud.ID).Data["url"])
	require.Equal(t, "renamed", waitFor("endpoint.updated", crud.ID).Data["description"])
	require.Equal(t, "crudco", waitFor("endpoint.deleted", crud.ID).Data["tenant_id"])

	phase("crud done")

	// An auth wall: 401 until the endpoint is disabled, then enabled again.
	locked := create("authco", "/locked", "authfast")
	Eventually(t, 30*time.Second, 150*time.Millisecond, "the endpoint disabled for auth failures", func() bool {
		if len(log.find("endpoint.disabled", locked.ID)) > 0 {
			return true
		}
		api.SendMessage(t, "authco", "user.updated", map[string]any{"at": time.Now()})
		return false
	})
	disabled := log.find("endpoint.disabled", locked.ID)[0]
	require.Equal(t, "auth_failures", disabled.Data["reason"])
	code, err = api.Do(ctx, "POST", "/v1/endpoints/"+locked.ID+"/enable", nil, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	waitFor("endpoint.enabled", locked.ID)

	phase("auth wall done")

	// A breaker that opens on 500s and closes once they stop.
	brk := create("brkco", "/brk", "fast")
	Eventually(t, 30*time.Second, 20*time.Millisecond, "the breaker opened", func() bool {
		if len(log.find("breaker.opened", brk.ID)) > 0 {
			return true
		}
		api.SendMessage(t, "brkco", "order.paid", map[string]any{"at": time.Now()})
		return false
	})
	opened := log.find("breaker.opened", brk.ID)[0]
	require.GreaterOrEqual(t, opened.Data["failure_rate"], 0.5)
	require.GreaterOrEqual(t, opened.Data["requests"], 20.0, "the window held min_throughput requests")
	require.Equal(t, 0.5, opened.Data["threshold"])
	openUntil, err := time.Parse(time.RFC3339Nano, opened.Data["open_until"].(string))
	require.NoError(t, err)
	require.True(t, openUntil.After(opened.Timestamp), "open_until %s after %s", openUntil, opened.Timestamp)
	brkFixed.Store(true)
	Eventually(t, 30*time.Second, 100*time.Millisecond, "the breaker closed", func() bool {
		if len(log.find("breaker.closed", brk.ID)) > 0 {
			return true
		}
		// New messages are the half-open breaker's trials.
		api.SendMessage(t, "brkco", "order.paid", map[string]any{"at": time.Now()})
		return false
	})

	phase("breaker done")

	// A delivery that exhausts its retries, then a retry that delivers it.
	flaky := create("flakyco", "/flaky", "")
	m := api.SendMessage(t, "flakyco", "invoice.paid", map[string]any{"n": 1})
	require.Len(t, m.Deliveries, 1)
	dlv := m.Deliveries[0].ID
	failed := waitFor("delivery.failed", flaky.ID)
	require.Equal(t, dlv, failed.Data["delivery_id"])
	require.Equal(t, m.ID, failed.Data["message_id"])
	require.Equal(t, "flakyco", failed.Data["tenant_id"])
	require.EqualValues(t, 3, failed.Data["attempts"], "the whole schedule")
	require.NotEmpty(t, failed.Data["last_error"])
	flakyFixed.Store(true)
	code, err = api.Do(ctx, "POST", "/v1/deliveries/"+dlv+"/retry", nil, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, code)
	recovered := waitFor("delivery.recovered", flaky.ID)
	require.Equal(t, dlv, recovered.Data["delivery_id"])
	require.Len(t, log.find("delivery.failed", flaky.ID), 1)

	phase("failed/recovered done")

	// Every request to /ops was signed with the operational secret; the
	// failing operational endpoint was retried under one webhook-id.
	require.Zero(t, ops.Stats("/ops").BadSignatures)
	require.Zero(t, ops.Stats("/broken").BadSignatures)
	require.Zero(t, ops.Stats("/ops").Duplicates)
	Eventually(t, 30*time.Second, 50*time.Millisecond, "an event retried to the failing operational endpoint", func() bool { return log.maxTries() >= 2 })

	phase("retries seen")

	// No event is about an operational endpoint, and none is produced once
	// the customer side is quiet (however the failing one fares).
	count := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM messages WHERE tenant_id = '_operational'`).Scan(&n))
		return n
	}
	Eventually(t, 30*time.Second, 50*time.Millisecond, "the customer side quiet", func() bool {
		var busy int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE tenant_id <> '_operational' AND status IN ('pending', 'delivering')`).Scan(&busy))
		return busy == 0
	})
	settled := count()
	rows, err := db.Pool.Query(ctx, `SELECT p.payload->'data'->>'endpoint_id' FROM messages m JOIN message_payloads p ON p.message_id = m.id WHERE m.tenant_id = '_operational'`)
	require.NoError(t, err)
	var about []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		about = append(about, id)
	}
	rows.Close()
	require.NoError(t, rows.Err())
	require.Len(t, about, settled)
	for _, id := range about {
		require.True(t, customer[id], "an operational event about %s, not a customer endpoint (operational: %s, %s)", id, flagged, broken.ID)
	}
	Consistently(t, 2*time.Second, 100*time.Millisecond, "no new operational message", func() bool { return count() == settled })
	var brokenFailed int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND status = 'failed'`, broken.ID).Scan(&brokenFailed))
	require.Positive(t, brokenFailed, "the failing operational endpoint's deliveries failed")
	t.Logf("%d operational messages; %d events received; %d failed at the broken endpoint", settled, len(log.events), brokenFailed)
}
