package e2e

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestEndpointRateLimitAcrossTheFleet: an endpoint limited to 20
// deliveries a second, 1,000 messages queued, two dispatcher processes.
// The receiver's busiest 10-second window holds at most 220 of them (the
// limit, plus a tenth for the pacing's slack); every message arrives once,
// each on its first attempt (waiting used none), the breaker never moved,
// and the waits were counted.
func TestEndpointRateLimitAcrossTheFleet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	var (
		mu       sync.Mutex
		arrivals []time.Time
		seen     = map[string]int{}
	)
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: func(r *deliverytest.Request) deliverytest.Response {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		seen[r.MsgID]++
		mu.Unlock()
		return deliverytest.Response{Status: http.StatusOK}
	}})
	api := StartAPI(t, db.URL, nil)
	ep := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/paced"), "secret": testSecret, "rate_limit": 20})

	env := map[string]string{"WORKERS": "50"}
	ds := []*Dispatcher{StartDispatcher(t, "dispatcher-1", db.URL, env), StartDispatcher(t, "dispatcher-2", db.URL, env)}
	// Each takes half the limit once it has counted the other.
	Eventually(t, time.Minute, 100*time.Millisecond, "both dispatchers count a fleet of two", func() bool {
		for _, d := range ds {
			if metricValue(t, d.MetricsURL, "dispatcher_fleet_size") != 2 {
				return false
			}
		}
		return true
	})

	const messages = 1000
	var g errgroup.Group
	g.SetLimit(8)
	for i := range messages {
		g.Go(func() error {
			api.SendMessage(t, "acme", "order.created", map[string]any{"n": i})
			return nil
		})
	}
	require.NoError(t, g.Wait())
	// The backlog's waits show as next_attempt_at.
	Eventually(t, 30*time.Second, 100*time.Millisecond, "a waiting delivery shows its next attempt", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE status = 'pending' AND next_attempt_at > now()`).Scan(&n))
		return n > 0
	})
	Eventually(t, 4*time.Minute, 250*time.Millisecond, "every message arrives", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == messages
	})
	Eventually(t, 30*time.Second, 100*time.Millisecond, "every delivery recorded delivered", func() bool {
		var open int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE status <> 'delivered'`).Scan(&open))
		return open == 0
	})

	mu.Lock()
	at := slices.Clone(arrivals)
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	mu.Unlock()
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	busiest, j := 0, 0
	for i := range at {
		for at[i].Sub(at[j]) >= 10*time.Second {
			j++
		}
		busiest = max(busiest, i-j+1)
	}
	took := at[len(at)-1].Sub(at[0])
	t.Logf("1,000 deliveries in %s; busiest 10 s window %d", took.Round(time.Millisecond), busiest)
	require.LessOrEqual(t, busiest, 220, "the fleet keeps the endpoint within 20/s")
	require.Zero(t, dups, "every message arrives once")

	var attempts, notFirst, maxCount int
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE attempt_number <> 1) FROM delivery_attempts WHERE endpoint_id = $1`, ep.ID).Scan(&attempts, &notFirst))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT max(attempt_count) FROM deliveries WHERE endpoint_id = $1`, ep.ID).Scan(&maxCount))
	require.Equal(t, messages, attempts)
	require.Zero(t, notFirst, "waiting for the limit uses no attempt")
	require.Equal(t, 1, maxCount)

	var transitions int
	var state string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM breaker_transitions WHERE endpoint_id = $1`, ep.ID).Scan(&transitions))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT state FROM breaker_states WHERE endpoint_id = $1`, ep.ID).Scan(&state))
	require.Zero(t, transitions, "the breaker is untouched")
	require.Equal(t, "closed", state)

	var waited float64
	for _, d := range ds {
		waited += metricValue(t, d.MetricsURL, `webhook_delivery_rate_limited_total{endpoint="`+ep.ID+`"}`)
	}
	require.Positive(t, waited, "the waits are counted")
}
