package delivery_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
)

// concurrency counts a receiver's requests in flight and the most seen.
type concurrency struct {
	now, peak atomic.Int64
}

func (c *concurrency) enter() {
	n := c.now.Add(1)
	for {
		p := c.peak.Load()
		if n <= p || c.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func (c *concurrency) leave() { c.now.Add(-1) }

// TestMessageJobBoundsRequestsInFlight: a message job's requests never
// exceed the job's bound, the process's (WORKERS) or one host's
// (MAX_PER_HOST), and every delivery is still made once. Half the
// endpoints name the receiver as localhost, so the process bound is seen
// across two hosts.
func TestMessageJobBoundsRequestsInFlight(t *testing.T) {
	t.Parallel()
	const endpoints = 40
	for _, tc := range []struct {
		name  string
		cfg   delivery.WorkerConfig
		bound int64
	}{
		{"per host", delivery.WorkerConfig{MaxInFlight: 100, MaxPerHost: 6, MaxPerJob: 100}, 12},
		{"per process", delivery.WorkerConfig{MaxInFlight: 5, MaxPerHost: 100, MaxPerJob: 100}, 5},
		{"per job", delivery.WorkerConfig{MaxInFlight: 100, MaxPerHost: 100, MaxPerJob: 4}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var (
				total concurrency
				mu    sync.Mutex
				hosts = map[string]*concurrency{}
				hits  = map[string]int{}
			)
			// The bounds are under test, not the start budget.
			tc.cfg.StartBudget = time.Minute
			b := setupMessageJob(t, func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				h := hosts[r.Host]
				if h == nil {
					h = &concurrency{}
					hosts[r.Host] = h
				}
				hits[r.URL.Path]++
				mu.Unlock()
				total.enter()
				h.enter()
				time.Sleep(20 * time.Millisecond)
				h.leave()
				total.leave()
			}, tc.cfg, delivery.WorkerDeps{})
			for i := range endpoints {
				e := store.Endpoint{}
				path := "/e" + string(rune('a'+i%26)) + string(rune('a'+i/26))
				if i%2 == 1 {
					e.URL = strings.Replace(b.srv.URL, "127.0.0.1", "localhost", 1) + path
				}
				b.endpointAt(t, path, e)
			}
			job, ids := b.message(t, 42)
			require.Len(t, ids, endpoints)
			require.NoError(t, b.mw.Work(context.Background(), job))
			for _, id := range ids {
				require.Equal(t, store.DeliveryDelivered, b.delivery(t, id).Status)
			}
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, hits, endpoints)
			for path, n := range hits {
				require.Equal(t, 1, n, path)
			}
			require.LessOrEqual(t, total.peak.Load(), tc.bound, "requests in flight at once")
			if tc.cfg.MaxPerHost < 100 {
				for host, c := range hosts {
					require.LessOrEqual(t, c.peak.Load(), int64(tc.cfg.MaxPerHost), host)
				}
			}
		})
	}
}

// TestMessageJobHandsOffPastItsStartBudget: deliveries that find no
// place within a bound by the start budget (here their host's places are
// held by hanging requests) wait in jobs of their own, at once, while the
// hanging attempts are still in flight; nothing is sent for them.
func TestMessageJobHandsOffPastItsStartBudget(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var (
		once sync.Once
		sent atomic.Int64
	)
	b := setupMessageJob(t, func(w http.ResponseWriter, r *http.Request) {
		sent.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}, delivery.WorkerConfig{MaxPerHost: 2, StartBudget: 300 * time.Millisecond}, delivery.WorkerDeps{})
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	for _, path := range []string{"/a", "/b", "/c", "/d", "/e", "/f"} {
		b.endpoint(t, path, store.Endpoint{})
	}
	job, ids := b.message(t, 42)
	done := make(chan error, 1)
	go func() { done <- b.mw.Work(context.Background(), job) }()
	require.Eventually(t, func() bool {
		n := 0
		for _, id := range ids {
			if _, ok := b.queue.get(id); ok {
				n++
			}
		}
		return n == 4
	}, 10*time.Second, 10*time.Millisecond, "four handed off while two hang")
	require.Equal(t, int64(2), sent.Load(), "nothing sent past the bound")
	once.Do(func() { close(release) })
	require.NoError(t, <-done)
}

// TestAttemptOutlivesItsJobsDeadline: an attempt has its own timeout from
// its own start; the job's deadline (River's job timeout, counted from the
// job's start) does not cut it, so it is recorded and not sent again.
func TestAttemptOutlivesItsJobsDeadline(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	passed := make(chan struct{})
	b := setupMessageJob(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		<-passed
	}, delivery.WorkerConfig{}, delivery.WorkerDeps{})
	e := b.endpoint(t, "/slow", store.Endpoint{})
	b.endpoint(t, "/slow2", store.Endpoint{})
	job, ids := b.message(t, 42)
	// The job's deadline leaves room for what comes before a request on
	// a busy machine; each request is answered only once it has passed.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	context.AfterFunc(ctx, func() { close(passed) })
	require.NoError(t, b.mw.Work(ctx, job))
	d := b.delivery(t, ids[e.ID])
	require.Equal(t, store.DeliveryDelivered, d.Status)
	require.Equal(t, 1, d.AttemptCount)
	require.Equal(t, int64(2), hits.Load())
}

// TestEnqueueSplitsWideFanOut: a message's deliveries share message jobs
// of at most MessageJobMaxEndpoints each.
func TestEnqueueSplitsWideFanOut(t *testing.T) {
	t.Parallel()
	b := setupMessageJob(t, func(http.ResponseWriter, *http.Request) {}, delivery.WorkerConfig{}, delivery.WorkerDeps{})
	rc, err := river.NewClient(riverpgxv5.New(b.db.Pool), &river.Config{})
	require.NoError(t, err)
	const n = 2*delivery.MessageJobMaxEndpoints + 7
	qs := make([]store.QueuedDelivery, n)
	for i := range qs {
		ep := "ep_" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		qs[i] = store.QueuedDelivery{Delivery: store.Delivery{ID: store.DeliveryID("msg_1", ep), MessageID: "msg_1", EndpointID: ep, Series: 1},
			EventType: "a", Shared: true}
	}
	ctx := context.Background()
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	jobIDs, err := (&delivery.Enqueuer{Client: rc}).EnqueueTx(ctx, tx, qs)
	require.NoError(t, err)
	require.Len(t, jobIDs, n)
	sizes := map[int64]int{}
	for _, id := range jobIDs {
		sizes[id]++
	}
	require.Len(t, sizes, 3)
	rows, err := tx.Query(ctx, `SELECT args FROM river_job WHERE kind = 'deliver_message' ORDER BY id`)
	require.NoError(t, err)
	var got []int
	for rows.Next() {
		var args delivery.MessageArgs
		var raw []byte
		require.NoError(t, rows.Scan(&raw))
		require.NoError(t, json.Unmarshal(raw, &args))
		got = append(got, len(args.Endpoints))
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []int{delivery.MessageJobMaxEndpoints, delivery.MessageJobMaxEndpoints, 7}, got)
}

// TestAttemptCutByShutdownIsRecorded: a request cut by the dispatcher's
// shutdown is recorded as an attempt of its own (error class shutdown,
// counted against nothing), its delivery is due again at once, and the
// cut takes no step of the delivery's schedule, even its last one.
func TestAttemptCutByShutdownIsRecorded(t *testing.T) {
	t.Parallel()
	arrived, done := make(chan struct{}, 1), make(chan struct{})
	b := setupMessageJob(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}, delivery.WorkerConfig{Schedule: delivery.Schedule{0}}, delivery.WorkerDeps{})
	t.Cleanup(func() { close(done) }) // before the server's Close
	e := b.endpoint(t, "/hangs", store.Endpoint{})
	job, ids := b.message(t, 42)
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() {
		<-arrived
		cancel(errors.New("dispatcher stopping"))
	}()
	require.NoError(t, b.mw.Work(ctx, job))

	d := b.delivery(t, ids[e.ID])
	require.Equal(t, store.DeliveryPending, d.Status, "a one-step schedule: a counted failure would be final")
	require.Equal(t, 1, d.AttemptCount)
	require.Equal(t, 1, d.SeriesBase, "the cut takes no step of the schedule")
	require.NotNil(t, d.NextAttemptAt)
	var class, classification string
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT error_class, classification FROM delivery_attempts WHERE delivery_id = $1`, ids[e.ID]).
		Scan(&class, &classification))
	require.Equal(t, string(delivery.ErrShutdown), class)
	require.Equal(t, string(delivery.ClassIgnore), classification)
	_, queued := b.queue.get(ids[e.ID])
	require.True(t, queued, "due again in a job of its own")
}

// lapsed is a lease that does not hold.
type lapsed struct{}

func (lapsed) HoldsSince(time.Time) bool { return false }

// TestRunWithoutItsLeaseSendsNothing: a process whose fleet lease lapsed
// (its heartbeats failing, or it was frozen past them) starts no request:
// the fleet may have made its jobs another's. The delivery waits in a job
// of its own, no attempt used.
func TestRunWithoutItsLeaseSendsNothing(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	metrics := delivery.NewMetrics(nil, nil)
	b := setupMessageJob(t, func(http.ResponseWriter, *http.Request) { hits.Add(1) },
		delivery.WorkerConfig{}, delivery.WorkerDeps{Lease: lapsed{}, Metrics: metrics})
	e1, e2 := b.endpoint(t, "/a", store.Endpoint{}), b.endpoint(t, "/b", store.Endpoint{})
	job, ids := b.message(t, 42)
	require.NoError(t, b.mw.Work(context.Background(), job))
	require.Zero(t, hits.Load(), "nothing sent")
	for _, e := range []store.Endpoint{e1, e2} {
		d := b.delivery(t, ids[e.ID])
		require.Zero(t, d.AttemptCount)
		_, queued := b.queue.get(ids[e.ID])
		require.True(t, queued, "waits in a job of its own")
	}
	require.Equal(t, 2.0, testutil.ToFloat64(metrics.StartDeferred.WithLabelValues("lease")))
}

// loadCounter counts the endpoint loads a worker makes, and their ids.
type loadCounter struct {
	delivery.EndpointLoader
	mu    sync.Mutex
	loads [][]string
}

func (l *loadCounter) GetEndpoints(ctx context.Context, ids []string) (map[string]store.Endpoint, error) {
	l.mu.Lock()
	l.loads = append(l.loads, append([]string(nil), ids...))
	l.mu.Unlock()
	return l.EndpointLoader.GetEndpoints(ctx, ids)
}

// TestMessageJobLoadsItsEndpointsAtOnce: a message job's cold endpoints
// are loaded in one statement, not one per attempt; a deleted one among
// them fails its delivery as before.
func TestMessageJobLoadsItsEndpointsAtOnce(t *testing.T) {
	t.Parallel()
	loads := &loadCounter{}
	var hits atomic.Int64
	b := setupMessageJob(t, func(http.ResponseWriter, *http.Request) { hits.Add(1) }, delivery.WorkerConfig{},
		delivery.WorkerDeps{Endpoints: delivery.NewEndpointCache(loads, time.Minute, time.Now)})
	loads.EndpointLoader = b.st
	var eps []store.Endpoint
	for i := range 6 {
		eps = append(eps, b.endpoint(t, "/e"+string(rune('a'+i)), store.Endpoint{}))
	}
	job, ids := b.message(t, 42)
	require.NoError(t, b.st.DeleteEndpoint(context.Background(), eps[5].ID))
	require.NoError(t, b.mw.Work(context.Background(), job))
	require.Len(t, loads.loads, 1, "one load for the message's endpoints")
	require.Len(t, loads.loads[0], 6)
	require.Equal(t, int64(5), hits.Load())
	for _, e := range eps[:5] {
		require.Equal(t, store.DeliveryDelivered, b.delivery(t, ids[e.ID]).Status)
	}
	require.Equal(t, store.DeliveryFailed, b.delivery(t, ids[eps[5].ID]).Status, "its endpoint is gone")
}
