package e2e

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store/storetest"
)

// deliveredIDs returns the message ids of endpointID's deliveries in status
// delivered.
func deliveredIDs(t *testing.T, db *storetest.DB, endpointID string) map[string]bool {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT message_id FROM deliveries WHERE endpoint_id = $1 AND status = 'delivered'`, endpointID)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		out[id] = true
	}
	require.NoError(t, rows.Err())
	return out
}

// TestGracefulShutdownFinishesInFlight sends SIGTERM to a dispatcher under
// load. Deliveries in flight that end within SHUTDOWN_GRACE finish and are
// recorded; those still hanging when it ends are cut and not marked
// delivered; the process exits 0 within the grace plus a margin. The set
// of deliveries marked delivered is exactly the set the receiver confirmed,
// and a new dispatcher then delivers the rest with no duplicate.
func TestGracefulShutdownFinishesInFlight(t *testing.T) {
	t.Parallel()
	const grace = 3 * time.Second
	db := storetest.New(t)
	var hang atomic.Bool
	hang.Store(true)
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: func(r *deliverytest.Request) deliverytest.Response {
		if r.Path == "/slow" && hang.Load() {
			return deliverytest.Response{Hang: true}
		}
		return deliverytest.Response{Status: http.StatusOK, Delay: 600 * time.Millisecond}
	}})
	api := StartAPI(t, db.URL, nil)
	env := map[string]string{
		"WORKERS": "80", "MAX_PER_ENDPOINT": "20", "SHUTDOWN_GRACE": grace.String(),
		// The hung requests must be cut by the grace, not by their timeout.
		"REQUEST_TIMEOUT": "20s", "RESCUE_STUCK_AFTER": "30s",
		"RETRY_SCHEDULE": "0s,100ms,100ms,100ms,100ms,100ms",
	}
	d := StartDispatcher(t, "dispatcher-1", db.URL, env)
	paths := []string{"/a", "/b", "/c", "/slow"}
	endpoints := map[string]string{}
	for _, p := range paths {
		endpoints[p] = api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL(p), "secret": testSecret}).ID
	}

	// Messages keep coming during the shutdown.
	var (
		sent    atomic.Int64
		stop    = make(chan struct{})
		senders sync.WaitGroup
	)
	senders.Add(1)
	go func() {
		defer senders.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(40 * time.Millisecond):
			}
			code, err := api.Do(context.Background(), "POST", "/v1/messages", map[string]any{"tenant_id": "acme", "event_type": "order.created", "payload": map[string]any{"n": i}}, nil)
			if err != nil || code != http.StatusAccepted {
				t.Errorf("send message %d: %d %v", i, code, err)
				return
			}
			sent.Add(1)
		}
	}()
	Eventually(t, 30*time.Second, 10*time.Millisecond, "deliveries in flight on every path", func() bool {
		for _, p := range paths {
			if rc.Stats(p).InFlight == 0 {
				return false
			}
		}
		return rc.Stats("/a").Delivered >= 30
	})

	sigAt := time.Now()
	err := d.Stop(grace + 5*time.Second)
	took := time.Since(sigAt)
	require.NoError(t, err, "exit status 0")
	require.Less(t, took, grace+3*time.Second, "exit within the grace plus a margin")
	require.Len(t, d.Lines("msg=dispatcher_stopped"), 1)
	close(stop)
	senders.Wait()
	Eventually(t, 10*time.Second, 20*time.Millisecond, "the receiver idle", func() bool {
		for _, p := range paths {
			if rc.Stats(p).InFlight != 0 {
				return false
			}
		}
		return true
	})

	for _, p := range paths {
		st := rc.Stats(p)
		confirmed := rc.DeliveredIDs(p)
		marked := deliveredIDs(t, db, endpoints[p])
		for id := range marked {
			require.Contains(t, confirmed, id, "%s: marked delivered but the receiver never confirmed it", p)
		}
		for id := range confirmed {
			require.Contains(t, marked, id, "%s: the receiver confirmed it but it is not marked delivered", p)
		}
		if p == "/slow" {
			require.Empty(t, marked, "a hung delivery cut by the shutdown is not delivered")
			// Each request the receiver saw cut is in its delivery's log
			// as an attempt the shutdown cut, counted against nothing.
			var cut, other int
			require.NoError(t, db.Pool.QueryRow(context.Background(), `
				SELECT count(*) FILTER (WHERE error_class = 'shutdown' AND classification = 'ignore'),
					count(*) FILTER (WHERE error_class IS DISTINCT FROM 'shutdown')
				FROM delivery_attempts WHERE endpoint_id = $1`, endpoints[p]).Scan(&cut, &other))
			require.Equal(t, st.Requests, cut, "%s: every request cut by the shutdown is recorded as such", p)
			require.Zero(t, other, p)
			continue
		}
		// Every request that reached these paths was answered: nothing in
		// flight was cut.
		require.Equal(t, st.Requests, st.Delivered, "%s: every in-flight delivery finished within the grace", p)
		require.Positive(t, st.Delivered, p)
	}
	t.Logf("stopped in %s (grace %s); delivered before the stop: %d", took.Round(time.Millisecond), grace, rc.Stats("/a").Delivered)

	// A new dispatcher delivers everything left, nothing twice.
	hang.Store(false)
	StartDispatcher(t, "dispatcher-2", db.URL, env)
	total := int(sent.Load())
	Eventually(t, 2*time.Minute, 100*time.Millisecond, "every message delivered to every endpoint", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE status = 'delivered'`).Scan(&n))
		return n == total*len(paths)
	})
	for _, p := range paths {
		st := rc.Stats(p)
		require.Equal(t, total, st.DistinctDelivered, p)
		require.Zero(t, st.Duplicates, "%s: a graceful stop sends nothing twice", p)
		require.Zero(t, st.BadSignatures, p)
	}
}
