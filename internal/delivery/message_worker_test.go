package delivery_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// queueRecorder hands out job ids without River and records what it queued.
type queueRecorder struct {
	mu     sync.Mutex
	next   int64
	queued map[string]store.QueuedDelivery
}

func (q *queueRecorder) EnqueueTx(_ context.Context, _ pgx.Tx, qs []store.QueuedDelivery) ([]int64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.queued == nil {
		q.queued = map[string]store.QueuedDelivery{}
	}
	ids := make([]int64, len(qs))
	for i, x := range qs {
		q.next++
		ids[i] = 5000 + q.next
		q.queued[x.ID] = x
	}
	return ids, nil
}

func (q *queueRecorder) get(id string) (store.QueuedDelivery, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	x, ok := q.queued[id]
	return x, ok
}

// TestMessageJobAttemptsEachDeliveryAndHandsOffTheRest: a message job
// makes the first attempt of each delivery; the one that fails gets its
// retry as a job of its own from the ledger, the one over its endpoint's
// rate limit a job of its own from the handoff, the disabled endpoint's
// is held, and the job completes. Run again (as after a crash), it sends
// nothing: each delivery is settled or another job's.
func TestMessageJobAttemptsEachDeliveryAndHandsOffTheRest(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	st := store.New(db.Pool, nil)
	var (
		mu   sync.Mutex
		hits = map[string]int{}
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.URL.Path]++
		mu.Unlock()
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	endpoint := func(path string, e store.Endpoint) store.Endpoint {
		e.TenantID, e.URL, e.Secret = "acme", srv.URL+path, secret
		got, err := st.CreateEndpoint(ctx, e)
		require.NoError(t, err)
		return got
	}
	ok := endpoint("/ok", store.Endpoint{})
	fail := endpoint("/fail", store.Endpoint{})
	limited := endpoint("/limited", store.Endpoint{RateLimit: new(5)})
	disabled := endpoint("/disabled", store.Endpoint{})
	m, _, err := st.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{"n":1}`)}, &countingEnqueuer{})
	require.NoError(t, err)
	require.Len(t, m.Deliveries, 4)
	_, err = st.SetEndpointStatus(ctx, disabled.ID, store.EndpointDisabled, nil)
	require.NoError(t, err)

	// The message job owns the four deliveries, as the api queues them.
	const jobID = 42
	args := delivery.MessageArgs{MessageID: m.ID, EventType: "a"}
	byEndpoint := map[string]string{}
	for _, d := range m.Deliveries {
		args.Endpoints = append(args.Endpoints, d.EndpointID)
		byEndpoint[d.EndpointID] = d.ID
		_, err := db.Pool.Exec(ctx, `UPDATE deliveries SET job_id = $2 WHERE id = $1`, d.ID, jobID)
		require.NoError(t, err)
	}

	queue := &queueRecorder{}
	ledger := delivery.NewLedger(st, slog.New(slog.DiscardHandler), delivery.LedgerConfig{Queue: queue})
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { ledger.Run(lctx) })
	t.Cleanup(func() {
		ledger.Stop()
		stop()
		wg.Wait()
	})
	w := delivery.NewWorker(delivery.WorkerConfig{Schedule: delivery.Schedule{0, 30 * time.Second}}, delivery.WorkerDeps{
		Endpoints: delivery.NewEndpointCache(st, time.Minute, time.Now), Deliveries: st, Ledger: ledger, Now: time.Now,
		Sender: delivery.NewSender(delivery.SenderConfig{Timeout: 5 * time.Second}), RateSlots: st,
		Rand: func() float64 { return 0.5 }, // the retry 15 s away: past the worker's wait horizon
	})
	mw := &delivery.MessageWorker{Worker: w, HandOffs: st, Queue: queue}
	job := &river.Job[delivery.MessageArgs]{JobRow: &rivertype.JobRow{ID: jobID, Attempt: 1}, Args: args}
	require.NoError(t, mw.Work(ctx, job))

	status := func(endpointID string) store.Delivery {
		d, err := st.GetDelivery(ctx, byEndpoint[endpointID])
		require.NoError(t, err)
		return d
	}
	require.Equal(t, store.DeliveryDelivered, status(ok.ID).Status)
	require.Equal(t, store.DeliveryHeld, status(disabled.ID).Status)

	failed := status(fail.ID)
	require.Equal(t, store.DeliveryPending, failed.Status)
	require.Equal(t, 1, failed.AttemptCount)
	retry, queued := queue.get(failed.ID)
	require.True(t, queued, "the ledger queued the retry")
	require.Nil(t, retry.NotBefore, "not a FIFO head: no wait in the worker")
	require.NotNil(t, retry.ScheduledAt, "the retry waits in River for its time")
	require.True(t, retry.ScheduledAt.Equal(*failed.NextAttemptAt))
	require.Equal(t, 1, retry.AttemptCount, "its job numbers the next attempt 2")
	require.NotEqual(t, int64(jobID), *failed.JobID)

	wait := status(limited.ID)
	require.Equal(t, store.DeliveryPending, wait.Status)
	require.Zero(t, wait.AttemptCount)
	handed, queued := queue.get(wait.ID)
	require.True(t, queued, "handed to a job of its own")
	require.NotNil(t, handed.ScheduledAt)
	require.False(t, handed.Shared)
	require.NotEqual(t, int64(jobID), *wait.JobID)

	mu.Lock()
	require.Equal(t, map[string]int{"/ok": 1, "/fail": 1}, hits)
	mu.Unlock()

	// Run again, as River does after a stopping dispatcher interrupted the
	// job (its attempt number given back) and after the job's process
	// died: nothing sent.
	job.AttemptedBy = []string{"dispatcher-1", "dispatcher-2"}
	require.NoError(t, mw.Work(ctx, job))
	job.Attempt, job.AttemptedBy = 2, nil
	require.NoError(t, mw.Work(ctx, job))
	mu.Lock()
	require.Equal(t, map[string]int{"/ok": 1, "/fail": 1}, hits)
	mu.Unlock()
	require.Equal(t, 5*time.Second+delivery.JobTimeoutMargin, mw.Timeout(job))
}

// messageBundle is a message job's world without River: a store on a
// fresh database, a receiver, a ledger queuing into a queueRecorder, and
// the workers.
type messageBundle struct {
	db     *storetest.DB
	st     *store.Store
	srv    *httptest.Server
	queue  *queueRecorder
	ledger *delivery.Ledger
	mw     *delivery.MessageWorker
}

// setupMessageJob starts the bundle; handler answers the receiver's
// requests, and cfg and deps adjust the worker's (the bundle fills in its
// store, ledger, clock and a 5 s sender where they are unset).
func setupMessageJob(t *testing.T, handler http.HandlerFunc, cfg delivery.WorkerConfig, deps delivery.WorkerDeps) *messageBundle {
	t.Helper()
	db := storetest.New(t)
	st := store.New(db.Pool, nil)
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	queue := &queueRecorder{}
	ledger := delivery.NewLedger(st, slog.New(slog.DiscardHandler), delivery.LedgerConfig{Queue: queue})
	lctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { ledger.Run(lctx) })
	t.Cleanup(func() {
		ledger.Stop()
		stop()
		wg.Wait()
	})
	if deps.Endpoints == nil {
		deps.Endpoints = delivery.NewEndpointCache(st, time.Minute, time.Now)
	}
	deps.Deliveries, deps.Ledger, deps.RateSlots = st, ledger, st
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Sender == nil {
		deps.Sender = delivery.NewSender(delivery.SenderConfig{Timeout: 5 * time.Second})
	}
	w := delivery.NewWorker(cfg, deps)
	return &messageBundle{db: db, st: st, srv: srv, queue: queue, ledger: ledger,
		mw: &delivery.MessageWorker{Worker: w, HandOffs: st, Queue: queue}}
}

// endpoint creates an endpoint of tenant acme at the receiver's path.
func (b *messageBundle) endpoint(t *testing.T, path string, e store.Endpoint) store.Endpoint {
	t.Helper()
	e.URL = ""
	return b.endpointAt(t, path, e)
}

// endpointAt creates an endpoint of tenant acme at e.URL, or at the
// receiver's path when e.URL is empty.
func (b *messageBundle) endpointAt(t *testing.T, path string, e store.Endpoint) store.Endpoint {
	t.Helper()
	if e.URL == "" {
		e.URL = b.srv.URL + path
	}
	e.TenantID, e.Secret = "acme", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	got, err := b.st.CreateEndpoint(context.Background(), e)
	require.NoError(t, err)
	return got
}

// message accepts a message to every endpoint and gives all of its
// deliveries to one message job, jobID, as the api queues them; it
// returns the job (at its first attempt) and each endpoint's delivery id.
func (b *messageBundle) message(t *testing.T, jobID int64) (*river.Job[delivery.MessageArgs], map[string]string) {
	t.Helper()
	ctx := context.Background()
	m, _, err := b.st.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{"n":1}`)}, &countingEnqueuer{})
	require.NoError(t, err)
	args := delivery.MessageArgs{MessageID: m.ID, EventType: "a"}
	byEndpoint := map[string]string{}
	for _, d := range m.Deliveries {
		args.Endpoints = append(args.Endpoints, d.EndpointID)
		byEndpoint[d.EndpointID] = d.ID
	}
	_, err = b.db.Pool.Exec(ctx, `UPDATE deliveries SET job_id = $2 WHERE message_id = $1`, m.ID, jobID)
	require.NoError(t, err)
	return &river.Job[delivery.MessageArgs]{JobRow: &rivertype.JobRow{ID: jobID, Attempt: 1}, Args: args}, byEndpoint
}

// delivery reads a delivery.
func (b *messageBundle) delivery(t *testing.T, id string) store.Delivery {
	t.Helper()
	d, err := b.st.GetDelivery(context.Background(), id)
	require.NoError(t, err)
	return d
}

// attempts lists a delivery's recorded attempts' numbers.
func (b *messageBundle) attempts(t *testing.T, id string) []int {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `SELECT attempt_number FROM delivery_attempts WHERE delivery_id = $1 ORDER BY attempt_number`, id)
	require.NoError(t, err)
	ns, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	return ns
}

// TestMessageJobRerunNumbersAttemptsFromTheDelivery: a message job that
// River runs for the k-th time (its earlier runs cut before any attempt
// was recorded) makes each delivery's first attempt as number 1 and plans
// its retry from schedule step 1, however large k is; a delivery whose
// earlier attempt the ledger recorded (its answer lost, so the job still
// owns it) goes on from its record.
func TestMessageJobRerunNumbersAttemptsFromTheDelivery(t *testing.T) {
	t.Parallel()
	for _, jobAttempt := range []int{2, 3, 7} {
		t.Run(fmt.Sprintf("job attempt %d", jobAttempt), func(t *testing.T) {
			t.Parallel()
			b := setupMessageJob(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusInternalServerError)
			}, delivery.WorkerConfig{Schedule: delivery.Schedule{0, 30 * time.Second, time.Minute}}, delivery.WorkerDeps{})
			fresh := b.endpoint(t, "/fresh", store.Endpoint{})
			tried := b.endpoint(t, "/tried", store.Endpoint{})
			job, ids := b.message(t, 42)
			// The tried delivery's first attempt was recorded, its answer
			// lost: still pending, still the job's.
			_, err := b.db.Pool.Exec(context.Background(), `UPDATE deliveries SET attempt_count = 1 WHERE id = $1`, ids[tried.ID])
			require.NoError(t, err)
			job.Attempt = jobAttempt
			start := time.Now()
			require.NoError(t, b.mw.Work(context.Background(), job))

			d := b.delivery(t, ids[fresh.ID])
			require.Equal(t, store.DeliveryPending, d.Status, "a first failure is never final")
			require.Equal(t, 1, d.AttemptCount)
			require.Equal(t, []int{1}, b.attempts(t, ids[fresh.ID]))
			retry, ok := b.queue.get(ids[fresh.ID])
			require.True(t, ok, "its retry queued")
			require.Equal(t, 1, retry.AttemptCount)
			require.NotNil(t, d.NextAttemptAt)
			require.WithinRange(t, *d.NextAttemptAt, start, time.Now().Add(30*time.Second), "step 1 of the schedule (30 s, jittered)")

			d = b.delivery(t, ids[tried.ID])
			require.Equal(t, store.DeliveryPending, d.Status)
			require.Equal(t, 2, d.AttemptCount)
			require.Equal(t, []int{2}, b.attempts(t, ids[tried.ID]), "numbered after the recorded one")
			require.NotNil(t, d.NextAttemptAt)
			require.WithinRange(t, *d.NextAttemptAt, start, time.Now().Add(time.Minute), "step 2 of the schedule")
		})
	}
}

// panicTracer traces every attempt and panics when the breaker's decision
// is set on the span of an attempt to endpoint: a panic in hookd's own
// code after the breaker admitted the attempt.
type panicTracer struct {
	noop.Tracer
	endpoint string
}

func (p panicTracer) Start(ctx context.Context, _ string, _ ...trace.SpanStartOption) (context.Context, trace.Span) {
	return ctx, &panicSpan{endpoint: p.endpoint}
}

type panicSpan struct {
	noop.Span
	endpoint string
	mine     bool
}

func (s *panicSpan) IsRecording() bool { return true }

func (s *panicSpan) SetAttributes(kv ...attribute.KeyValue) {
	for _, a := range kv {
		if a.Key == delivery.AttrEndpointID && a.Value.AsString() == s.endpoint {
			s.mine = true
		}
		if a.Key == delivery.AttrBreakerDecision && s.mine {
			panic("boom: a nil field")
		}
	}
}

// finishCounter admits everything and counts each endpoint's reported
// outcomes.
type finishCounter struct {
	mu       sync.Mutex
	finished map[string][]delivery.Outcome
}

func (f *finishCounter) Admit(_ context.Context, t *delivery.Target) (delivery.Admission, error) {
	return delivery.Admission{Finish: func(_ context.Context, o delivery.Outcome) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.finished == nil {
			f.finished = map[string][]delivery.Outcome{}
		}
		f.finished[t.ID] = append(f.finished[t.ID], o)
	}}, nil
}

func (f *finishCounter) outcomes(endpointID string) []delivery.Outcome {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.finished[endpointID]
}

// TestMessageJobPanicCostsOneAttempt: a panic in one delivery's attempt
// costs that attempt only. The process goes on, the message's other
// deliveries are delivered, the breaker's admission is given back once
// with nothing counted, and the delivery is recorded with an attempt of
// error class panic and retried on its schedule; once the schedule is
// exhausted the panic makes it failed, not a loop.
func TestMessageJobPanicCostsOneAttempt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		schedule delivery.Schedule
		status   string
	}{
		{"retried", delivery.Schedule{0, time.Minute}, store.DeliveryPending},
		{"schedule exhausted", delivery.Schedule{0}, store.DeliveryFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			gate := &finishCounter{}
			tracer := panicTracer{}
			deps := delivery.WorkerDeps{Gate: gate, Tracer: &tracer, Metrics: delivery.NewMetrics(nil, nil)}
			b := setupMessageJob(t, func(http.ResponseWriter, *http.Request) {}, delivery.WorkerConfig{Schedule: tc.schedule}, deps)
			ok1 := b.endpoint(t, "/ok1", store.Endpoint{})
			bad := b.endpoint(t, "/bad", store.Endpoint{})
			ok2 := b.endpoint(t, "/ok2", store.Endpoint{})
			tracer.endpoint = bad.ID
			job, ids := b.message(t, 42)
			require.NoError(t, b.mw.Work(context.Background(), job))

			for _, e := range []store.Endpoint{ok1, ok2} {
				require.Equal(t, store.DeliveryDelivered, b.delivery(t, ids[e.ID]).Status)
				require.Len(t, gate.outcomes(e.ID), 1)
			}
			outcomes := gate.outcomes(bad.ID)
			require.Len(t, outcomes, 1, "the admission given back once")
			require.Empty(t, outcomes[0].Class, "an abandoned outcome: nothing counted against the endpoint")

			d := b.delivery(t, ids[bad.ID])
			require.Equal(t, tc.status, d.Status)
			require.Equal(t, 1, d.AttemptCount)
			require.NotNil(t, d.LastError)
			require.Contains(t, *d.LastError, "boom: a nil field")
			var class, classification, excerpt string
			require.NoError(t, b.db.Pool.QueryRow(context.Background(),
				`SELECT error_class, classification, response_excerpt FROM delivery_attempts WHERE delivery_id = $1`, ids[bad.ID]).
				Scan(&class, &classification, &excerpt))
			require.Equal(t, string(delivery.ErrPanic), class)
			require.Equal(t, string(delivery.ClassIgnore), classification)
			require.Contains(t, excerpt, "boom: a nil field")
			_, queued := b.queue.get(ids[bad.ID])
			require.Equal(t, tc.status == store.DeliveryPending, queued, "retried by a job of its own while the schedule lasts")
			require.Equal(t, 1.0, testutil.ToFloat64(deps.Metrics.Panics))
		})
	}
}

// TestMessageJobHandsOffAtOnce: a delivery that must wait (here over its
// endpoint's rate limit) gets a job of its own while the message's other
// attempts are still in flight, not when the slowest of them ends.
func TestMessageJobHandsOffAtOnce(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	b := setupMessageJob(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}, delivery.WorkerConfig{}, delivery.WorkerDeps{})
	t.Cleanup(unblock) // before the receiver's Close, which waits for the hanging request
	hang := b.endpoint(t, "/hang", store.Endpoint{})
	limited := b.endpoint(t, "/limited", store.Endpoint{RateLimit: new(5)})
	job, ids := b.message(t, 42)

	done := make(chan error, 1)
	go func() { done <- b.mw.Work(context.Background(), job) }()
	require.Eventually(t, func() bool {
		_, queued := b.queue.get(ids[limited.ID])
		return queued && *b.delivery(t, ids[limited.ID]).JobID != 42
	}, 4*time.Second, 10*time.Millisecond, "handed off to a job of its own while the other attempt hangs")
	select {
	case err := <-done:
		t.Fatalf("the job ended (%v) before its hanging attempt", err)
	default:
	}
	unblock()
	require.NoError(t, <-done)
	require.Equal(t, store.DeliveryDelivered, b.delivery(t, ids[hang.ID]).Status)
}

// TestMessageJobArgsVersions: a message job's arguments as each version
// wrote them (golden JSON) deliver to the same deliveries, and a job of a
// version this dispatcher does not know, or naming no delivery, is left
// for a dispatcher that can run it: snoozed, nothing sent, nothing
// written.
func TestMessageJobArgsVersions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args string // %[1]s: message id; %[2]s, %[3]s: endpoint ids; %[4]s, %[5]s: delivery ids
		runs bool
	}{
		{"version 0: deliveries with ids", `{"message_id":%[1]q,"event_type":"a","deliveries":[{"id":%[4]q,"endpoint_id":%[2]q},{"id":%[5]q,"endpoint_id":%[3]q}]}`, true},
		{"version 1: endpoints", `{"message_id":%[1]q,"event_type":"a","endpoints":[%[2]q,%[3]q]}`, true},
		{"version 2: endpoints and v", `{"v":2,"message_id":%[1]q,"event_type":"a","endpoints":[%[2]q,%[3]q]}`, true},
		{"version 3: left", `{"v":3,"message_id":%[1]q,"event_type":"a","endpoints":[%[2]q,%[3]q],"hosts":["x"]}`, false},
		{"no delivery named: left", `{"message_id":%[1]q,"event_type":"a","receivers":[%[2]q,%[3]q]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var hits atomic.Int64
			reg := delivery.NewMetrics(nil, nil)
			b := setupMessageJob(t, func(http.ResponseWriter, *http.Request) { hits.Add(1) }, delivery.WorkerConfig{}, delivery.WorkerDeps{Metrics: reg})
			e1, e2 := b.endpoint(t, "/a", store.Endpoint{}), b.endpoint(t, "/b", store.Endpoint{})
			job, ids := b.message(t, 42)
			raw := fmt.Sprintf(tc.args, job.Args.MessageID, e1.ID, e2.ID, ids[e1.ID], ids[e2.ID])
			var args delivery.MessageArgs
			require.NoError(t, json.Unmarshal([]byte(raw), &args))
			job.Args = args
			err := b.mw.Work(context.Background(), job)
			if !tc.runs {
				var snooze *rivertype.JobSnoozeError
				require.ErrorAs(t, err, &snooze)
				require.Zero(t, hits.Load())
				for _, id := range ids {
					d := b.delivery(t, id)
					require.Equal(t, store.DeliveryPending, d.Status)
					require.Equal(t, int64(42), *d.JobID, "still the job's")
				}
				require.Equal(t, 1.0, testutil.ToFloat64(reg.JobsLeft))
				return
			}
			require.NoError(t, err)
			require.Equal(t, int64(2), hits.Load())
			for _, id := range ids {
				require.Equal(t, store.DeliveryDelivered, b.delivery(t, id).Status)
			}
		})
	}
}

// TestEnqueuedMessageArgsAreTheCurrentVersion: the api queues message jobs
// of MessageArgsVersion, in the shape its golden JSON pins.
func TestEnqueuedMessageArgsAreTheCurrentVersion(t *testing.T) {
	t.Parallel()
	raw, err := json.Marshal(delivery.MessageArgs{V: delivery.MessageArgsVersion, MessageID: "msg_1", EventType: "a", Endpoints: []string{"ep_1", "ep_2"}})
	require.NoError(t, err)
	require.JSONEq(t, `{"v":2,"message_id":"msg_1","event_type":"a","endpoints":["ep_1","ep_2"]}`, string(raw))
}

// TestReplacedMessageJobRunSendsAndWritesNothing: a message job's run
// that lost its job (River rescued the job while the run was frozen, and
// another run claimed its deliveries) sends nothing more once it goes on:
// the deliveries waiting for a place are not sent, its hand-offs and its
// in-flight attempt's record change nothing, and the claiming run
// delivers everything (the attempt in flight at the freeze arrives twice,
// as the at-least-once contract allows).
func TestReplacedMessageJobRunSendsAndWritesNothing(t *testing.T) {
	t.Parallel()
	metrics := delivery.NewMetrics(nil, nil)
	release := make(chan struct{})
	var stale atomic.Bool // the first run is done: answer at once
	var (
		once sync.Once
		mu   sync.Mutex
		hits = map[string]int{}
	)
	b := setupMessageJob(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.URL.Path]++
		n := hits[r.URL.Path]
		mu.Unlock()
		if n == 1 && !stale.Load() {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}, delivery.WorkerConfig{MaxPerHost: 1, StartBudget: 300 * time.Millisecond}, delivery.WorkerDeps{Metrics: metrics})
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	for _, path := range []string{"/a", "/b", "/c"} {
		b.endpoint(t, path, store.Endpoint{})
	}
	job, ids := b.message(t, 42)
	done := make(chan error, 1)
	go func() { done <- b.mw.Work(context.Background(), job) }()
	// Whichever delivery took the host's one place hangs; the others wait.
	var inFlight string
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for path := range hits {
			inFlight = path
		}
		return len(hits) == 1
	}, 10*time.Second, 5*time.Millisecond)

	// The rescue's run claims the job's deliveries while the first run
	// holds /a and its others wait for the host's place; the first run
	// goes on only once their start budget is past, as after a freeze.
	owned, err := b.st.ClaimDeliveries(context.Background(), store.Claim{JobID: 42, Attempt: 2}, slices.Collect(maps.Values(ids)))
	require.NoError(t, err)
	require.Len(t, owned, 3)
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(metrics.StartDeferred.WithLabelValues("host")) == 2
	}, 10*time.Second, 5*time.Millisecond, "the waiting deliveries past their budget")
	once.Do(func() { close(release) })
	require.NoError(t, <-done)
	stale.Store(true)

	mu.Lock()
	require.Equal(t, map[string]int{inFlight: 1}, hits, "only the attempt in flight was sent")
	mu.Unlock()
	for _, id := range ids {
		_, queued := b.queue.get(id)
		require.False(t, queued, "its hand-offs changed nothing")
	}
	for _, id := range ids {
		d := b.delivery(t, id)
		require.Equal(t, store.DeliveryPending, d.Status, "its record changed nothing")
		require.Equal(t, int64(42), *d.JobID)
	}

	// The claiming run sends them all.
	job.Attempt = 2
	require.NoError(t, b.mw.Work(context.Background(), job))
	for _, id := range ids {
		require.Equal(t, store.DeliveryDelivered, b.delivery(t, id).Status)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]int{"/a": 1, "/b": 1, "/c": 1}
	want[inFlight] = 2
	require.Equal(t, want, hits)
}

// panickingHandOffs panics on every hand-off.
type panickingHandOffs struct{}

func (panickingHandOffs) HandOff(context.Context, store.Claim, []store.HandOff, store.Enqueuer) (int, error) {
	panic("boom: hand-off")
}

// TestMessageJobHandOffPanicIsTheJobsError: a panic while handing a
// delivery off fails the job (River runs it again), never the process;
// the delivery stays the job's and the others are delivered.
func TestMessageJobHandOffPanicIsTheJobsError(t *testing.T) {
	t.Parallel()
	b := setupMessageJob(t, func(http.ResponseWriter, *http.Request) {}, delivery.WorkerConfig{}, delivery.WorkerDeps{})
	ok := b.endpoint(t, "/ok", store.Endpoint{})
	limited := b.endpoint(t, "/limited", store.Endpoint{RateLimit: new(5)})
	job, ids := b.message(t, 42)
	b.mw.HandOffs = panickingHandOffs{}
	err := b.mw.Work(context.Background(), job)
	require.ErrorContains(t, err, "boom: hand-off")
	require.Equal(t, store.DeliveryDelivered, b.delivery(t, ids[ok.ID]).Status)
	d := b.delivery(t, ids[limited.ID])
	require.Equal(t, store.DeliveryPending, d.Status)
	require.Equal(t, int64(42), *d.JobID, "still the job's")
}
