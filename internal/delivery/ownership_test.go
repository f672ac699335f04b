package delivery_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// countingEnqueuer hands out job ids without River.
type countingEnqueuer struct {
	mu   sync.Mutex
	next int64
}

func (e *countingEnqueuer) EnqueueTx(_ context.Context, _ pgx.Tx, qs []store.QueuedDelivery) ([]int64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ids := make([]int64, len(qs))
	for i := range qs {
		e.next++
		ids[i] = 1000 + e.next
	}
	return ids, nil
}

// ackLosingLedger commits every batch and, while lose is set, reports a
// batch holding a park as failed: the answer lost after COMMIT.
type ackLosingLedger struct {
	st   *store.Store
	lose atomic.Bool
}

func (l *ackLosingLedger) RecordBatch(ctx context.Context, b store.LedgerBatch, after store.AfterDisable) (store.LedgerResult, error) {
	res, err := l.st.RecordBatch(ctx, b, after)
	if err != nil {
		return res, err
	}
	for _, u := range b.Updates {
		if u.Park && l.lose.Load() {
			return store.LedgerResult{}, errors.New("connection reset after commit")
		}
	}
	return res, nil
}

// switchGate refuses as an open breaker would while open is set.
type switchGate struct{ open atomic.Bool }

func (g *switchGate) Admit(context.Context, *delivery.Target) (delivery.Admission, error) {
	if g.open.Load() {
		return delivery.Admission{Refused: true, RetryAt: time.Now().Add(time.Minute), Reason: breaker.ReasonOpen}, nil
	}
	return delivery.Admission{Finish: func(context.Context, delivery.Outcome) {}}, nil
}

type ownershipBundle struct {
	db       *storetest.DB
	st       *store.Store
	ledger   *ackLosingLedger
	gate     *switchGate
	worker   *delivery.Worker
	enq      *countingEnqueuer
	hits     atomic.Int64
	endpoint store.Endpoint
	delivery store.Delivery
	args     delivery.DeliverArgs
}

// setupOwnership creates an endpoint, a message with one delivery and a
// worker; tune adjusts the worker's config and deps before it is made.
func setupOwnership(t *testing.T, tune ...func(*delivery.WorkerConfig, *delivery.WorkerDeps)) *ownershipBundle {
	t.Helper()
	db := storetest.New(t)
	b := &ownershipBundle{db: db, st: store.New(db.Pool, nil), gate: &switchGate{}, enq: &countingEnqueuer{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		b.hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	ep, err := b.st.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: srv.URL, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	require.NoError(t, err)
	b.endpoint = ep
	m, _, err := b.st.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{"n":1}`)}, b.enq)
	require.NoError(t, err)
	require.Len(t, m.Deliveries, 1)
	b.delivery = m.Deliveries[0]
	require.NotNil(t, b.delivery.JobID)
	b.args = delivery.DeliverArgs{DeliveryID: b.delivery.ID, MessageID: m.ID, EndpointID: ep.ID, EventType: "a", Series: 1}

	b.ledger = &ackLosingLedger{st: b.st}
	ledger := delivery.NewLedger(b.ledger, slog.New(slog.DiscardHandler), delivery.LedgerConfig{})
	lctx, stop := context.WithCancel(ctx)
	go ledger.Run(lctx)
	t.Cleanup(func() {
		ledger.Stop()
		stop()
	})
	cfg := delivery.WorkerConfig{Park: true, Schedule: delivery.Schedule{0, time.Second}}
	deps := delivery.WorkerDeps{
		Endpoints:  delivery.NewEndpointCache(b.st, time.Minute, time.Now),
		Deliveries: b.st,
		Gate:       b.gate,
		Ledger:     ledger,
		Sender:     delivery.NewSender(delivery.SenderConfig{Timeout: 5 * time.Second}),
		Now:        time.Now,
	}
	for _, f := range tune {
		f(&cfg, &deps)
	}
	b.worker = delivery.NewWorker(cfg, deps)
	return b
}

func (b *ownershipBundle) run(t *testing.T, jobID int64, attempt int) error {
	t.Helper()
	return b.worker.Work(context.Background(), &river.Job[delivery.DeliverArgs]{
		JobRow: &rivertype.JobRow{ID: jobID, Attempt: attempt},
		Args:   b.args,
	})
}

func (b *ownershipBundle) jobOf(t *testing.T) *int64 {
	t.Helper()
	d, err := b.st.GetDelivery(context.Background(), b.delivery.ID)
	require.NoError(t, err)
	return d.JobID
}

// TestUnconfirmedParkNeverSendsTwice: a park commits but its answer is
// lost, so the job falls back to a snooze although the delivery has no job
// any more; the unparker then gives it a new job. The snoozed job's next run
// must find that it no longer owns the delivery and send nothing: the
// receiver sees the delivery once, from the new job.
func TestUnconfirmedParkNeverSendsTwice(t *testing.T) {
	t.Parallel()
	b := setupOwnership(t)
	first := *b.delivery.JobID

	b.gate.open.Store(true)
	b.ledger.lose.Store(true)
	err := b.run(t, first, 1)
	var snooze *river.JobSnoozeError
	require.ErrorAs(t, err, &snooze, "an unconfirmed park snoozes its job")
	require.Nil(t, b.jobOf(t), "the park committed: no job owns the delivery")

	b.ledger.lose.Store(false)
	got, err := b.st.ReleaseParked(context.Background(), b.endpoint.ID, 10, b.enq)
	require.NoError(t, err)
	require.Len(t, got, 1)
	second := b.jobOf(t)
	require.NotNil(t, second)

	b.gate.open.Store(false)
	require.NoError(t, b.run(t, first, 1), "the snoozed job wakes (a snooze keeps its attempt number)")
	require.NoError(t, b.run(t, *second, 1))
	require.Equal(t, int64(1), b.hits.Load(), "sent once, by the job that owns the delivery")
	d, err := b.st.GetDelivery(context.Background(), b.delivery.ID)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryDelivered, d.Status)
}

// TestRescuedJobOfAParkedDeliverySendsNothing: a job River runs again (a
// retry, or one rescued as stuck) whose delivery was parked meanwhile must
// leave it to the unparker.
func TestRescuedJobOfAParkedDeliverySendsNothing(t *testing.T) {
	t.Parallel()
	b := setupOwnership(t)
	job := *b.delivery.JobID
	b.gate.open.Store(true)
	require.NoError(t, b.run(t, job, 1), "parked: the job is done")
	require.Nil(t, b.jobOf(t))

	b.gate.open.Store(false)
	require.NoError(t, b.run(t, job, 2))
	require.Zero(t, b.hits.Load(), "the parked delivery is not sent by a job that no longer owns it")
	d, err := b.st.GetDelivery(context.Background(), b.delivery.ID)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryWaiting, d.Status, "still parked, for the unparker")
}

// TestTwoRunsOfAJobInOneLedgerBatchLeaveTheDeliveryTheLaterRuns: a run's
// record can wait in the ledger while the same job runs again in the same
// process (rescued while PostgreSQL was frozen, say), the later run
// claiming the delivery and sending it again, and both records can go in
// one batch. The delivery is then the later run's: delivered, with its
// attempt logged once. Merged in one batch, the earlier run's claim went
// with the status update, which the delivery refused: it stayed pending,
// its job completed and both attempts logged.
func TestTwoRunsOfAJobInOneLedgerBatchLeaveTheDeliveryTheLaterRuns(t *testing.T) {
	t.Parallel()
	b := setupOwnership(t, func(_ *delivery.WorkerConfig, deps *delivery.WorkerDeps) {
		// A batch goes when it holds both runs' records.
		ledger := delivery.NewLedger(deps.Deliveries.(*store.Store), slog.New(slog.DiscardHandler),
			delivery.LedgerConfig{MaxBatch: 2, Linger: time.Hour})
		var wg sync.WaitGroup
		wg.Go(func() { ledger.Run(context.Background()) })
		t.Cleanup(func() {
			ledger.Stop()
			wg.Wait()
		})
		deps.Ledger = ledger
	})
	job := *b.delivery.JobID
	earlier := make(chan error, 1)
	go func() { earlier <- b.run(t, job, 1) }()
	require.Eventually(t, func() bool { return b.hits.Load() == 1 }, time.Minute, time.Millisecond,
		"the earlier run sends, its record waiting in the ledger")
	require.NoError(t, b.run(t, job, 2), "the later run claims the delivery, sends it again and records it")
	require.NoError(t, <-earlier)
	require.Equal(t, int64(2), b.hits.Load())

	d, err := b.st.GetDelivery(context.Background(), b.delivery.ID)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryDelivered, d.Status)
	attempts, err := b.st.ListAttempts(context.Background(), store.AttemptFilter{DeliveryID: b.delivery.ID, Limit: 10})
	require.NoError(t, err)
	require.Len(t, attempts, 1, "the earlier run's attempt is not logged beside the later run's")
}
