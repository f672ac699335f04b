package e2e

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store/storetest"
)

// marginalReceiver fails everything until it recovers, and after that
// answers well only up to capacity requests at once (503 past it): an
// endpoint that just came back and takes its usual load, not a flood.
type marginalReceiver struct {
	mu        sync.Mutex
	recovered bool
	inFlight  int
	capacity  int
	overload  int // 503s answered for too many requests at once
}

func (m *marginalReceiver) respond(*deliverytest.Request) deliverytest.Response {
	m.mu.Lock()
	m.inFlight++
	n, up := m.inFlight, m.recovered
	if up && n > m.capacity {
		m.overload++
	}
	m.mu.Unlock()
	// The work happens here, inside the in-flight count (a Response's
	// Delay is served after Respond returns).
	work := 30 * time.Millisecond
	if !up || n > m.capacity {
		work = 10 * time.Millisecond
	}
	time.Sleep(work)
	m.mu.Lock()
	m.inFlight--
	m.mu.Unlock()
	switch {
	case !up:
		return deliverytest.Response{Status: http.StatusInternalServerError}
	case n > m.capacity:
		return deliverytest.Response{Status: http.StatusServiceUnavailable}
	default:
		return deliverytest.Response{Status: http.StatusOK}
	}
}

// marginalClass is fastClass counting over 5 s: the release's pace probes
// the endpoint's capacity and backs off on its 503s, and on a loaded
// machine (the receiver's 30 ms of work stretched, sends bunched) a probe
// overshoots for longer; over 5 s its 503s stay a minority, while a
// backlog released all at once fails three answers in four for as long
// as it lasts and trips any window.
var marginalClass = map[string]any{
	"name": "marginal", "trip": "rate", "failure_rate_threshold": 0.5, "window": "5s", "min_throughput": 20,
	"open_duration": "2s", "half_open_trials": 3, "half_open_concurrency": 1,
}

// TestRecoveredBreakerReleasesItsBacklogWithoutReTripping: an endpoint's
// breaker opens in an outage and its backlog of 200 deliveries parks; the
// endpoint recovers, but takes at most 5 requests at once well. The
// backlog must drain without the breaker opening again after the trials
// closed it: released all at once, the per-endpoint cap's 10 concurrent
// requests fail most of their answers (the 503s come back faster than
// the successes) and trip it again.
func TestRecoveredBreakerReleasesItsBacklogWithoutReTripping(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	m := &marginalReceiver{capacity: 5}
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: m.respond})
	api := StartAPI(t, db.URL, nil)
	code, err := api.Do(context.Background(), "POST", "/v1/traffic-classes", marginalClass, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	StartDispatcher(t, "dispatcher-1", db.URL, map[string]string{"WORKERS": "30", "REQUEST_TIMEOUT": "2s",
		"RETRY_SCHEDULE": "0s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s"})
	ep := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/marginal"), "secret": testSecret, "traffic_class": "marginal"})

	const messages = 200
	for i := range messages {
		api.SendMessage(t, "acme", "order.created", map[string]any{"n": i})
	}
	Eventually(t, 60*time.Second, 50*time.Millisecond, "the backlog parked behind the open breaker", func() bool {
		var parked int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM deliveries
			WHERE endpoint_id = $1 AND status = 'waiting' AND job_id IS NULL`, ep.ID).Scan(&parked))
		return parked >= messages*3/4
	})
	m.mu.Lock()
	m.recovered = true
	m.mu.Unlock()
	recovered := time.Now()

	Eventually(t, 2*time.Minute, 100*time.Millisecond, "every message delivered", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND status = 'delivered'`, ep.ID).Scan(&n))
		return n == messages
	})
	drained := time.Since(recovered)
	require.Equal(t, messages, rc.Stats("/marginal").DistinctDelivered)
	require.Zero(t, rc.Stats("/marginal").Duplicates, "no process or database fault: no delivery reached the receiver twice")

	// After the first close that followed the recovery, no open.
	rows, err := db.Pool.Query(context.Background(), `SELECT to_state, at FROM breaker_transitions WHERE endpoint_id = $1 AND at > $2 ORDER BY id`, ep.ID, recovered)
	require.NoError(t, err)
	var closed bool
	var reopened int
	for rows.Next() {
		var to string
		var at time.Time
		require.NoError(t, rows.Scan(&to, &at))
		switch {
		case to == "closed":
			closed = true
		case to == "open" && closed:
			reopened++
		}
	}
	rows.Close()
	require.NoError(t, rows.Err())
	m.mu.Lock()
	overload := m.overload
	m.mu.Unlock()
	t.Logf("backlog drained %.1f s after recovery; %d answers 503 for more than %d at once; %d re-opens after the close", drained.Seconds(), overload, m.capacity, reopened)
	require.True(t, closed, "the trials closed the breaker")
	require.Zero(t, reopened, "the released backlog did not trip the breaker again")
}
