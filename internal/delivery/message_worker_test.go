package delivery_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

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
	require.NotNil(t, retry.NotBefore)
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
