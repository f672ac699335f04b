package e2e

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestEndpointRateLimitIsAFleetCeiling: an endpoint limited to 20
// deliveries a second and a backlog of 300 messages queued before any
// dispatcher runs. Two dispatchers start together, a third joins after 80
// deliveries (4 s at the limit) and one of the first two is SIGKILLed after
// 160 (8 s). The
// receiver's busiest 10-second window holds at most 220 deliveries (ten
// seconds of the limit plus one second's), through every change of the
// fleet. Every message arrives, once except those the killed dispatcher
// had sent and not yet recorded (its jobs are rescued and sent again),
// each on its first attempt (waiting used none); the breaker never moved, and the waits were
// counted and shown as next_attempt_at.
func TestEndpointRateLimitIsAFleetCeiling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	var (
		mu       sync.Mutex
		arrivals []time.Time
		seen     = map[string]int{}
		firstAt  = map[string]time.Time{}
		first    = make(chan struct{})
		// The scenario's schedule, by deliveries received: a third
		// dispatcher joins after 80 (4 s at the limit), the first is
		// killed after 160 (8 s).
		joinAt, killAt = make(chan struct{}), make(chan struct{})
		marks          = map[int]chan struct{}{1: first, 80: joinAt, 160: killAt}
	)
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: func(r *deliverytest.Request) deliverytest.Response {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		if mark, ok := marks[len(arrivals)]; ok {
			close(mark)
		}
		seen[r.MsgID]++
		if _, ok := firstAt[r.MsgID]; !ok {
			firstAt[r.MsgID] = time.Now()
		}
		mu.Unlock()
		return deliverytest.Response{Status: http.StatusOK}
	}})
	api := StartAPI(t, db.URL, nil)
	const limit, messages = 20, 300
	ep := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/paced"), "secret": testSecret, "rate_limit": limit})
	for b := range messages / 100 {
		msgs := make([]map[string]any, 100)
		for i := range msgs {
			msgs[i] = map[string]any{"tenant_id": "acme", "event_type": "order.created", "payload": map[string]any{"n": b*100 + i}}
		}
		code, err := api.Do(ctx, "POST", "/v1/messages/batch", map[string]any{"messages": msgs}, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code)
	}

	env := map[string]string{"WORKERS": "50"}
	ds := StartDispatchers(t, db.URL, env, "dispatcher-1", "dispatcher-2")
	awaitMark := func(mark chan struct{}, what string) {
		t.Helper()
		select {
		case <-mark:
		case <-time.After(time.Minute):
			t.Fatalf("%s: not within a minute", what)
		}
	}
	awaitMark(first, "the first delivery")
	awaitMark(joinAt, "80 deliveries")
	ds = append(ds, StartDispatcher(t, "dispatcher-3", db.URL, env))
	awaitMark(killAt, "160 deliveries")
	ds[0].Kill()
	killedAt := time.Now()
	Eventually(t, 10*time.Second, 50*time.Millisecond, "a waiting delivery shows its next attempt", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE status = 'pending' AND next_attempt_at > now()`).Scan(&n))
		return n > 0
	})

	// The jobs the killed dispatcher had fetched stay running until River
	// rescues them, long after this test; every other delivery arrives.
	var stuck int
	Eventually(t, time.Minute, 100*time.Millisecond, "every delivery but the killed dispatcher's arrives", func() bool {
		var delivered int
		require.NoError(t, db.Pool.QueryRow(ctx, `
			SELECT count(*) FILTER (WHERE d.status = 'delivered'),
				count(*) FILTER (WHERE d.status <> 'delivered' AND j.state = 'running' AND j.attempted_at < $1)
			FROM deliveries d LEFT JOIN river_job j ON j.id = d.job_id`, killedAt).Scan(&delivered, &stuck))
		return delivered+stuck == messages
	})

	mu.Lock()
	at := slices.Clone(arrivals)
	// A message arrives twice only when its first request was answered
	// just before the kill, its record not yet written: the rescue sends
	// it again (at-least-once, the same webhook-id).
	dups := 0
	for id, n := range seen {
		if n > 1 {
			dups += n - 1
			require.WithinRange(t, firstAt[id], killedAt.Add(-2*time.Second), killedAt,
				"message %s arrived %d times, the first outside the kill's last 2 s", id, n)
		}
	}
	distinct := len(seen)
	mu.Unlock()
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	busiest, j := 0, 0
	for i := range at {
		for at[i].Sub(at[j]) >= 10*time.Second {
			j++
		}
		busiest = max(busiest, i-j+1)
	}
	t.Logf("%d deliveries in %s, %d left with the killed dispatcher; busiest 10 s window %d (ceiling %d)",
		len(at), at[len(at)-1].Sub(at[0]).Round(time.Millisecond), stuck, busiest, 11*limit)
	require.LessOrEqual(t, busiest, 11*limit, "the fleet keeps the endpoint within its limit")
	require.LessOrEqual(t, dups, 2*limit, "only requests answered in the kill's last 2 s arrive twice")
	require.GreaterOrEqual(t, distinct, messages-stuck)
	require.Less(t, stuck, messages/10, "the killed dispatcher held only what it was working on")

	var attempts, notFirst int
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE attempt_number <> 1) FROM delivery_attempts WHERE endpoint_id = $1`, ep.ID).Scan(&attempts, &notFirst))
	require.GreaterOrEqual(t, attempts, messages-stuck)
	require.Zero(t, notFirst, "waiting for the limit uses no attempt")

	var transitions int
	var state string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM breaker_transitions WHERE endpoint_id = $1`, ep.ID).Scan(&transitions))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT state FROM breaker_states WHERE endpoint_id = $1`, ep.ID).Scan(&state))
	require.Zero(t, transitions, "the breaker is untouched")
	require.Equal(t, "closed", state)

	var waited float64
	for _, d := range ds[1:] {
		waited += metricValue(t, d.MetricsURL, `webhook_delivery_rate_limited_total{endpoint="`+ep.ID+`"}`)
	}
	require.Positive(t, waited, "the waits are counted")
}
