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

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store/storetest"
	"github.com/hookd/hookd/internal/tuning"
)

// runReceiver fails requests in runs: of every 40 requests to the path, the
// first three are answered 500 (7.5% errors, three in a row), unless it is
// set healthy.
type runReceiver struct {
	n       atomic.Int64
	healthy atomic.Bool
}

func (r *runReceiver) respond(*deliverytest.Request) deliverytest.Response {
	n := r.n.Add(1)
	if !r.healthy.Load() && n%40 < 3 {
		return deliverytest.Response{Status: http.StatusInternalServerError}
	}
	return deliverytest.Response{Status: http.StatusOK}
}

// TestTuningAppliesAProposalAfterItsShadow: a dispatcher with a two-minute
// tuning window and a 30-second shadow, an endpoint that fails three
// requests in a row of every forty, under a class in apply whose breaker
// trips on three consecutive failures. A pass (by the route) proposes a
// rate config whose replayed figures beat the current one (the route
// queues it, the dispatcher runs it); the dispatcher
// shadows it, applies it once (the history holds one change), and the
// breaker runs under it afterwards: the same traffic trips it no more.
func TestTuningAppliesAProposalAfterItsShadow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	rr := &runReceiver{}
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: rr.respond})
	api := StartAPI(t, db.URL, nil)
	touchy := map[string]any{"name": "touchy", "trip": "consecutive", "consecutive_failures": 3, "open_duration": "1s",
		"max_open_duration": "1s", "half_open_trials": 1, "auto_tune": "apply"}
	code, err := api.Do(ctx, "POST", "/v1/traffic-classes", touchy, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	StartDispatcher(t, "dispatcher", db.URL, map[string]string{
		"WORKERS": "20", "REQUEST_TIMEOUT": "2s", "RETRY_SCHEDULE": "0s,1s,1s,1s,1s,1s,1s,1s,1s,1s",
		// The periodic pass is the route's to trigger here.
		"TUNE_INTERVAL": "1h", "TUNE_WINDOW": "2m", "TUNE_SHADOW": "30s",
		// A shadow is judged once the log behind its range is complete:
		// the request timeout, the ledger's write timeout and 5 s after
		// it. The default write timeout (30 s) would only lengthen the
		// wait; nothing here freezes PostgreSQL.
		"LEDGER_WRITE_TIMEOUT": "4s",
	})
	ep := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/runs"), "secret": testSecret, "traffic_class": "touchy"})

	// send posts up to 20 messages a second until stop is closed, counting
	// the ones the api did not accept (none should be).
	var wg sync.WaitGroup
	var refused atomic.Int64
	send := func(stop <-chan struct{}) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					code, err := api.Do(ctx, "POST", "/v1/messages", map[string]any{"tenant_id": "acme", "event_type": "order.created", "payload": map[string]any{}}, nil)
					if err != nil || code != http.StatusAccepted {
						refused.Add(1)
					}
				}
			}
		}()
	}
	opensFrom := func(since time.Time) int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM breaker_transitions
			WHERE endpoint_id = $1 AND from_state = 'closed' AND to_state = 'open' AND NOT shadow AND at >= $2`, ep.ID, since).Scan(&n))
		return n
	}

	var dbNow time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&dbNow))
	since := dbNow
	stop := make(chan struct{})
	send(stop)
	Eventually(t, time.Minute, 200*time.Millisecond, "the consecutive breaker trips on the runs", func() bool { return opensFrom(since) >= 5 })

	var rec tuning.Recommendation
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&dbNow))
	var queued struct {
		Status string `json:"status"`
		Error  string `json:"error"`
	}
	code, err = api.Do(ctx, "POST", "/v1/traffic-classes/touchy/tune",
		map[string]any{"since": since.UTC().Format(time.RFC3339Nano), "until": dbNow.UTC().Format(time.RFC3339Nano)}, &queued)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, code)
	require.Equal(t, "queued", queued.Status)
	// The dispatcher, the fleet's tuning leader, runs the pass.
	Eventually(t, time.Minute, 200*time.Millisecond, "the requested pass is done", func() bool {
		code, err := api.Do(ctx, "GET", "/v1/traffic-classes/touchy/tune", nil, &queued)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code)
		require.NotEqual(t, "failed", queued.Status, queued.Error)
		return queued.Status == "done"
	})
	code, err = api.Do(ctx, "GET", "/v1/traffic-classes/touchy/recommendation", nil, &rec)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	if rec.Status == tuning.StatusShadowing {
		// The leader may start its shadow before this read.
		rec.Status = tuning.StatusProposed
	}
	require.Equal(t, tuning.StatusProposed, rec.Status, rec.Reasons)
	require.Equal(t, breaker.TripRate, rec.Proposed.Trip)
	require.Positive(t, rec.Figures.Current.OpensQuiet, "the current config false-trips in the replay")
	require.Less(t, rec.Figures.Proposed.OpensQuiet, rec.Figures.Current.OpensQuiet, "the proposal's replayed figures beat it")
	proposed := breaker.Config(*rec.Proposed)

	// The dispatcher shadows it; the endpoint turns healthy once the
	// shadow's range ends, so the breaker closes and the change can apply.
	var shadowUntil time.Time
	Eventually(t, 30*time.Second, 200*time.Millisecond, "the proposal shadows", func() bool {
		code, err := api.Do(ctx, "GET", "/v1/traffic-classes/touchy/recommendation", nil, &rec)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code)
		if rec.Status == tuning.StatusShadowing && rec.Shadow != nil {
			shadowUntil = rec.Shadow.Until
			return true
		}
		return false
	})
	Eventually(t, time.Minute, 200*time.Millisecond, "the shadow's range passes", func() bool {
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&dbNow))
		return dbNow.After(shadowUntil)
	})
	rr.healthy.Store(true)
	// The shadow reads the log the request timeout, the ledger's write
	// timeout (4 s here) and 5 s behind the clock.
	Eventually(t, 2*time.Minute, 200*time.Millisecond, "the proposal applies", func() bool {
		code, err := api.Do(ctx, "GET", "/v1/traffic-classes/touchy/recommendation", nil, &rec)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code)
		require.NotEqual(t, tuning.StatusRejected, rec.Status, rec.Reasons)
		return rec.Status == tuning.StatusApplied
	})
	require.Zero(t, rec.Shadow.Proposed.OpensQuiet)
	require.Positive(t, rec.Shadow.Live.OpensQuiet)
	var class map[string]any
	code, err = api.Do(ctx, "GET", "/v1/traffic-classes/touchy", nil, &class)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "rate", class["trip"])
	require.Equal(t, proposed.FailureRateThreshold, class["failure_rate_threshold"])

	// Afterwards the same runs of failures trip the breaker no more.
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&dbNow))
	applied := dbNow
	rr.healthy.Store(false)
	before := rr.n.Load()
	Eventually(t, time.Minute, 200*time.Millisecond, "ten runs of failures reach the endpoint", func() bool { return rr.n.Load()-before >= 400 })
	close(stop)
	wg.Wait()
	require.Zero(t, refused.Load(), "every message accepted")
	require.Zero(t, opensFrom(applied), "the tuned breaker rides through the runs")

	var history struct {
		Data []struct {
			Actor     string          `json:"actor"`
			NewConfig json.RawMessage `json:"new_config"`
		} `json:"data"`
	}
	code, err = api.Do(ctx, "GET", "/v1/traffic-classes/touchy/tunings", nil, &history)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, history.Data, 1, "the class changed once")
	var next tuning.ClassConfig
	require.NoError(t, json.Unmarshal(history.Data[0].NewConfig, &next))
	require.Equal(t, proposed, breaker.Config(next))
}
