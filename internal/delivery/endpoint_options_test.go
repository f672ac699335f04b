package delivery_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestWorkerUsesTheEndpointsScheduleAndTimeout: against a receiver that
// never answers, an endpoint's own timeout ends its attempt and its own
// schedule plans the retry, the log records the timeout used, and an
// endpoint without them gets the dispatcher's.
func TestWorkerUsesTheEndpointsScheduleAndTimeout(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	st := store.New(db.Pool, nil)
	released := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-released:
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(released) })
	ctx := context.Background()
	own, err := st.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: hang.URL, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		RetrySchedule: []time.Duration{0, 40 * time.Second, time.Hour}, Timeout: time.Second})
	require.NoError(t, err)
	dflt, err := st.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: hang.URL, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	require.NoError(t, err)
	m, _, err := st.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, &countingEnqueuer{})
	require.NoError(t, err)
	ledger := delivery.NewLedger(st, slog.New(slog.DiscardHandler), delivery.LedgerConfig{})
	lctx, stop := context.WithCancel(ctx)
	go ledger.Run(lctx)
	t.Cleanup(func() {
		ledger.Stop()
		stop()
	})
	cache := delivery.NewEndpointCache(st, time.Minute, time.Now)
	w := delivery.NewWorker(delivery.WorkerConfig{Schedule: delivery.Schedule{0, 3 * time.Second}}, delivery.WorkerDeps{
		Endpoints: cache, Deliveries: st, Ledger: ledger, Now: time.Now,
		Sender: delivery.NewSender(delivery.SenderConfig{Timeout: 300 * time.Millisecond}),
		Rand:   func() float64 { return 0.9999999999 }, // the whole step: no jitter to allow for
	})
	byEndpoint := map[string]store.Delivery{}
	for _, d := range m.Deliveries {
		byEndpoint[d.EndpointID] = d
	}
	for _, c := range []struct {
		endpoint       store.Endpoint
		timeout, retry time.Duration
	}{
		{own, time.Second, 40 * time.Second},
		{dflt, 300 * time.Millisecond, 3 * time.Second},
	} {
		d := byEndpoint[c.endpoint.ID]
		job := &river.Job[delivery.DeliverArgs]{JobRow: &rivertype.JobRow{ID: *d.JobID, Attempt: 1},
			Args: delivery.DeliverArgs{DeliveryID: d.ID, MessageID: m.ID, EndpointID: c.endpoint.ID, EventType: "a", Series: 1}}
		start := time.Now()
		err := w.Work(ctx, job)
		took := time.Since(start)
		require.Error(t, err, "a timed out attempt is retried")
		require.GreaterOrEqual(t, took, c.timeout, "the attempt lasted its timeout")
		require.Less(t, took, c.timeout+2*time.Second)
		next := w.NextRetry(job)
		require.WithinDuration(t, start.Add(c.retry), next, 500*time.Millisecond, "the retry follows the endpoint's schedule, from the attempt's start")
		require.Equal(t, c.timeout+delivery.JobTimeoutMargin, w.Timeout(job), "River's job timeout follows the endpoint's")
		as, err := st.ListAttempts(ctx, store.AttemptFilter{DeliveryID: d.ID, Limit: 10})
		require.NoError(t, err)
		require.Len(t, as, 1)
		require.Equal(t, c.timeout, as[0].Timeout, "the log records the timeout used")
		require.Equal(t, string(delivery.ErrTimeout), as[0].ErrorClass)
	}
}

// TestFIFORetryRunsAsANewJob: a FIFO head's failed attempt completes its
// job and the ledger queues the retry as a new job carrying the time it
// is due; that job waits for it, then sends.
func TestFIFORetryRunsAsANewJob(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	st := store.New(db.Pool, nil)
	var hits atomic.Int64
	var retriedAt atomic.Pointer[time.Time]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if hits.Add(1) == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		now := time.Now()
		retriedAt.Store(&now)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	ep, err := st.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: srv.URL, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		Ordering: store.OrderingFIFO, RetrySchedule: []time.Duration{0, 300 * time.Millisecond}})
	require.NoError(t, err)
	enq := &countingEnqueuer{}
	m, _, err := st.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, enq)
	require.NoError(t, err)
	d := m.Deliveries[0]
	ledger := delivery.NewLedger(st, slog.New(slog.DiscardHandler), delivery.LedgerConfig{Queue: enq})
	lctx, stop := context.WithCancel(ctx)
	go ledger.Run(lctx)
	t.Cleanup(func() {
		ledger.Stop()
		stop()
	})
	w := delivery.NewWorker(delivery.WorkerConfig{}, delivery.WorkerDeps{
		Endpoints: delivery.NewEndpointCache(st, time.Minute, time.Now), Deliveries: st, Ledger: ledger, Now: time.Now,
		Sender: delivery.NewSender(delivery.SenderConfig{Timeout: time.Second}),
		Rand:   func() float64 { return 0.9999999999 },
	})
	args := delivery.DeliverArgs{DeliveryID: d.ID, MessageID: m.ID, EndpointID: ep.ID, EventType: "a", Series: 1}
	require.NoError(t, w.Work(ctx, &river.Job[delivery.DeliverArgs]{JobRow: &rivertype.JobRow{ID: *d.JobID, Attempt: 1}, Args: args}),
		"the failed attempt's job ends: its retry is another job")
	got, err := st.GetDelivery(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryPending, got.Status)
	require.NotEqual(t, *d.JobID, *got.JobID)
	require.NotNil(t, got.NextAttemptAt)

	retry := args
	retry.AttemptOffset, retry.ScheduleOffset, retry.NotBefore = 1, 1, got.NextAttemptAt
	start := time.Now()
	require.NoError(t, w.Work(ctx, &river.Job[delivery.DeliverArgs]{JobRow: &rivertype.JobRow{ID: *got.JobID, Attempt: 1}, Args: retry}))
	require.False(t, retriedAt.Load().Before(*got.NextAttemptAt), "sent no earlier than due")
	require.Less(t, time.Since(start), 5*time.Second)
	got, err = st.GetDelivery(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryDelivered, got.Status)
	require.Equal(t, 2, got.AttemptCount)
	require.Equal(t, int64(2), hits.Load())
}
