package e2e

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
)

// receipts records when each webhook of each endpoint arrived.
type receipts struct {
	mu    sync.Mutex
	total int
	at    map[string][]time.Time // path + " " + webhook-id
}

func (r *receipts) respond(req *deliverytest.Request) deliverytest.Response {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total++
	k := pathKey(req.Path, req.MsgID)
	r.at[k] = append(r.at[k], time.Now())
	return deliverytest.Response{}
}

func (r *receipts) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// TestPostgresRestartsUnderLoad: PostgreSQL restarted twice (fast mode,
// as a minor upgrade does) and then stopped for 30 s, under a steady load
// of messages to healthy endpoints. The api answers 202 or 503 (never
// anything else), every message it accepted is delivered to each of its
// endpoints, the dispatchers reconnect by themselves (none restarts),
// a webhook arrives twice only when its first request was under way at a
// stop, and the deliveries' full rate returns within 10 s of the server's
// return.
func TestPostgresRestartsUnderLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := StartCluster(t)
	db := pg.NewDatabase(t, "hookd")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- postgres log (last 30 lines) ---\n%s", lastLines(pg.Log(), 30))
		}
	})
	got := &receipts{at: map[string][]time.Time{}}
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: got.respond})
	api := StartAPI(t, db.URL, map[string]string{"NO_MIGRATE": "true"})
	pathOf := map[string]string{} // endpoint id -> path
	for _, tenant := range []string{"acme", "globex"} {
		for _, name := range []string{"a", "b", "c"} {
			path := "/" + tenant + "/" + name
			pathOf[api.CreateEndpoint(t, map[string]any{"tenant_id": tenant, "url": rc.URL(path), "secret": testSecret}).ID] = path
		}
	}
	// A run's outcome River's completer gave up writing during the 30 s
	// stop stays running until River's rescuer: 10 s here, not the
	// default's minute and more, so the test can wait for every job.
	env := map[string]string{"WORKERS": "50", "REQUEST_TIMEOUT": "2s", "SHUTDOWN_GRACE": "5s", "RESCUE_STUCK_AFTER": "10s"}
	dispatchers := StartDispatchers(t, db.URL, env, "dispatcher-1", "dispatcher-2")

	load := &chaosLoad{api: api, client: &http.Client{Timeout: 30 * time.Second},
		accepted: map[string]*acceptedMessage{}, keys: map[string]string{}, answers: map[string]int{}}
	loadCtx, cancelLoad := context.WithTimeout(ctx, 5*time.Minute)
	defer cancelLoad()
	stopLoad := make(chan struct{})
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		load.run(loadCtx, stopLoad, 40)
	}()
	sleep := func(d time.Duration) { time.Sleep(d) } // a schedule, not synchronisation

	// The steady rate, before any fault.
	Eventually(t, time.Minute, 50*time.Millisecond, "deliveries under way", func() bool { return got.count() > 100 })
	n0, t0 := got.count(), time.Now()
	sleep(4 * time.Second)
	steady := float64(got.count()-n0) / time.Since(t0).Seconds()
	t.Logf("steady: %.0f deliveries/s", steady)
	require.Positive(t, steady)

	var faults []fault
	for i := range 2 {
		at := time.Now()
		pg.Restart(t)
		faults = append(faults, fault{Kind: "postgres restart (fast)", At: at, Until: time.Now()})
		t.Logf("restart %d: down for %s", i+1, time.Since(at).Round(time.Millisecond))
		sleep(5 * time.Second)
	}
	at := time.Now()
	pg.Stop(t)
	sleep(30 * time.Second)
	pg.Start(t)
	back := time.Now()
	faults = append(faults, fault{Kind: "postgres stopped 30 s", At: at, Until: back})

	// Full rate: a second with as many deliveries as the steady rate's
	// 80%, within 10 s of the server's return.
	var fullAt time.Duration
	window := []struct {
		at time.Time
		n  int
	}{{back, got.count()}}
	for time.Since(back) < 20*time.Second && fullAt == 0 {
		sleep(100 * time.Millisecond)
		now, n := time.Now(), got.count()
		window = append(window, struct {
			at time.Time
			n  int
		}{now, n})
		for len(window) > 1 && now.Sub(window[1].at) >= time.Second {
			window = window[1:]
		}
		if span := now.Sub(window[0].at); span >= time.Second && float64(n-window[0].n)/span.Seconds() >= 0.8*steady {
			fullAt = now.Sub(back)
		}
	}
	t.Logf("full rate %s after the server's return", fullAt.Round(time.Millisecond))
	require.NotZero(t, fullAt, "the deliveries' rate returns to 80%% of %.0f/s within 20 s", steady)
	require.LessOrEqual(t, fullAt, 10*time.Second, "full rate within 10 s of the server's return")

	sleep(3 * time.Second)
	close(stopLoad)
	<-loadDone
	db.Pool.Reset() // its connections died with the restarts
	settleBy := time.Now().Add(2 * time.Minute)
	for {
		var open, jobs int
		err := db.Pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM deliveries WHERE status <> 'delivered'),
			(SELECT count(*) FROM river_job WHERE queue = 'deliver' AND state NOT IN ('completed', 'discarded', 'cancelled'))`).Scan(&open, &jobs)
		if err == nil && open == 0 && jobs == 0 {
			break
		}
		if time.Now().After(settleBy) {
			logUnsettled(t, db)
			t.Fatalf("not settled 2 min after the load stopped: %d deliveries not delivered, %d jobs left (%v)", open, jobs, err)
		}
		sleep(250 * time.Millisecond)
	}
	for _, d := range dispatchers {
		require.False(t, d.Exited(), "%s reconnects by itself", d.Name)
	}

	load.mu.Lock()
	defer load.mu.Unlock()
	require.Empty(t, load.unexpected, "the api answers 202, or 503 while the server is away")
	require.Zero(t, load.unaccepted, "every message offered is accepted in the end")
	require.Positive(t, load.answers["503"], "the api said 503 while the server was away")
	got.mu.Lock()
	defer got.mu.Unlock()
	var twice int
	for _, m := range load.accepted {
		require.Len(t, m.Deliveries, 3, "message %s goes to its tenant's three endpoints", m.ID)
		for endpointID := range m.Deliveries {
			path := pathOf[endpointID]
			arrivals := got.at[pathKey(path, m.ID)]
			require.NotEmpty(t, arrivals, "message %s reached %s", m.ID, path)
			if len(arrivals) > 1 {
				twice++
				require.True(t, duringFault(arrivals[0], faults, time.Second),
					"message %s reached %s %d times, the first at %s, outside every stop", m.ID, path, len(arrivals), arrivals[0].Format(time.StampMilli))
			}
		}
	}
	t.Logf("%d messages accepted (api answers %v), %d webhooks arrived twice, each in flight at a stop", len(load.accepted), load.answers, twice)
}
