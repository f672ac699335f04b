package delivery_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestTrialOutlivesItsConnection: a dispatcher's half-open trial to an
// endpoint with a 60 s timeout is in flight when every session of that
// dispatcher's pool is terminated. Another dispatcher asking to probe is
// refused (half_open_busy) for as long as the request runs; when the
// request ends, its success is recorded and closes the breaker.
func TestTrialOutlivesItsConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	other := store.New(db.Pool, nil) // the other dispatcher's

	// The first dispatcher's pool, its sessions named to end them.
	name := fmt.Sprintf("trial-holder-%d", rand.Int64())
	pc, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	pc.MaxConns = 4
	pc.ConnConfig.RuntimeParams["application_name"] = name
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	st := store.New(pool, nil)

	arrived, released := make(chan struct{}), make(chan struct{})
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			close(arrived)
		}
		select {
		case <-released:
			w.WriteHeader(http.StatusNoContent)
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	var once atomic.Bool
	release := func() {
		if once.CompareAndSwap(false, true) {
			close(released)
		}
	}
	t.Cleanup(release)

	cfg := breaker.DefaultConfig()
	cfg.HalfOpenTrials, cfg.HalfOpenConcurrency = 1, 1
	ep, err := other.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: srv.URL, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", Timeout: 60 * time.Second})
	require.NoError(t, err)
	past := time.Now().Add(-time.Hour)
	brk := breaker.New(cfg)
	brk.Window.Add(past, 0, 100)
	trip := brk.Evaluate(cfg, past, nil)
	require.NotNil(t, trip.Transition)
	won, err := other.CommitTransition(ctx, ep.ID, 1, brk, *trip.Transition, store.TransitionMeta{Actor: "test"})
	require.NoError(t, err)
	require.True(t, won)
	m, _, err := other.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, &countingEnqueuer{})
	require.NoError(t, err)
	d := m.Deliveries[0]

	ledger := delivery.NewLedger(st, slog.New(slog.DiscardHandler), delivery.LedgerConfig{})
	lctx, stop := context.WithCancel(ctx)
	go ledger.Run(lctx)
	t.Cleanup(func() {
		ledger.Stop()
		stop()
	})
	gate := func(s *store.Store, actor string) *delivery.BreakerGate {
		return delivery.NewBreakerGate(delivery.BreakerGateConfig{Actor: actor, RequestTimeout: time.Second},
			s, s.TrialLeases(), delivery.FixedBreakerConfig{Config: cfg}, time.Now, func() float64 { return 0 }, nil, nil)
	}
	w := delivery.NewWorker(delivery.WorkerConfig{}, delivery.WorkerDeps{
		Endpoints: delivery.NewEndpointCache(st, time.Minute, time.Now), Deliveries: st, Ledger: ledger, Now: time.Now,
		Gate:   gate(st, "dispatcher-1"),
		Sender: delivery.NewSender(delivery.SenderConfig{Timeout: time.Second}),
		Rand:   func() float64 { return 0.5 },
	})
	job := &river.Job[delivery.DeliverArgs]{JobRow: &rivertype.JobRow{ID: *d.JobID, Attempt: 1},
		Args: delivery.DeliverArgs{DeliveryID: d.ID, MessageID: m.ID, EndpointID: ep.ID, EventType: "a", Series: 1}}
	var workErr error
	worked := make(chan struct{})
	go func() {
		defer close(worked)
		// A run that ends before its request (its start budget spent on a
		// busy machine) is run again, as River would.
		for run := 1; run <= 5; run++ {
			if workErr = w.Work(ctx, job); requests.Load() > 0 {
				return
			}
			t.Logf("run %d ended before its request: %v", run, workErr)
		}
	}()
	t.Cleanup(func() {
		release()
		<-worked
	})
	select {
	case <-arrived:
	case <-worked:
		t.Fatalf("the trial ended before its request arrived: %v", workErr)
	}

	var lease time.Duration
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT expires_at - acquired_at FROM trial_leases WHERE endpoint_id = $1`, ep.ID).Scan(&lease))
	require.Equal(t, 60*time.Second+delivery.DefaultTrialLeaseMargin, lease, "the endpoint's timeout and the margin")

	var ended int
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1`, name).Scan(&ended))
	require.Positive(t, ended)
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, name).Scan(&n))
		return n == 0
	}, 10*time.Second, 5*time.Millisecond, "the first dispatcher's sessions ended")

	adm, err := gate(other, "dispatcher-2").Admit(ctx, &delivery.Target{Endpoint: ep})
	require.NoError(t, err)
	require.True(t, adm.Refused, "no second trial while the first's request runs")
	require.Equal(t, breaker.ReasonHalfOpenBusy, adm.Reason)

	release()
	<-worked
	require.Equal(t, int64(1), requests.Load(), "one probe sent")
	bs, err := other.LoadBreakers(ctx, []string{ep.ID})
	require.NoError(t, err)
	require.Equal(t, breaker.StateClosed, bs[ep.ID].State, "the first trial's success closed the breaker")
}

// leasedGate admits every delivery as a trial whose lease allows its
// request to run until endBy, and records the outcome it is told.
type leasedGate struct {
	endBy    time.Time
	finished chan delivery.Outcome
}

var _ delivery.Gate = (*leasedGate)(nil)

func (g *leasedGate) Admit(context.Context, *delivery.Target) (delivery.Admission, error) {
	return delivery.Admission{Trial: true, EndBy: g.endBy, Finish: func(_ context.Context, o delivery.Outcome) { g.finished <- o }}, nil
}

// TestTrialRequestEndsBeforeItsLease: a probe to an endpoint with a 60 s
// timeout whose lease leaves it less (its start was delayed) is cut when
// the lease allows, not at 60 s; one left with less than a second sends
// nothing and gives its slot back with an empty outcome.
func TestTrialRequestEndsBeforeItsLease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		left time.Duration
		sent bool
	}{
		{"cut at the lease", 1500 * time.Millisecond, true},
		{"too late to send", 500 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := storetest.New(t)
			st := store.New(db.Pool, nil)
			released := make(chan struct{})
			var requests atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				select {
				case <-r.Context().Done():
				case <-released:
				}
			}))
			t.Cleanup(srv.Close)
			t.Cleanup(func() { close(released) })
			ep, err := st.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: srv.URL, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", Timeout: 60 * time.Second})
			require.NoError(t, err)
			m, _, err := st.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, &countingEnqueuer{})
			require.NoError(t, err)
			d := m.Deliveries[0]
			ledger := delivery.NewLedger(st, slog.New(slog.DiscardHandler), delivery.LedgerConfig{})
			lctx, stop := context.WithCancel(ctx)
			go ledger.Run(lctx)
			t.Cleanup(func() {
				ledger.Stop()
				stop()
			})
			g := &leasedGate{endBy: time.Now().Add(tc.left), finished: make(chan delivery.Outcome, 1)}
			w := delivery.NewWorker(delivery.WorkerConfig{}, delivery.WorkerDeps{
				Endpoints: delivery.NewEndpointCache(st, time.Minute, time.Now), Deliveries: st, Ledger: ledger, Now: time.Now,
				Gate: g, Sender: delivery.NewSender(delivery.SenderConfig{Timeout: time.Second}),
				Rand: func() float64 { return 0.5 },
			})
			job := &river.Job[delivery.DeliverArgs]{JobRow: &rivertype.JobRow{ID: *d.JobID, Attempt: 1},
				Args: delivery.DeliverArgs{DeliveryID: d.ID, MessageID: m.ID, EndpointID: ep.ID, EventType: "a", Series: 1}}
			_ = w.Work(ctx, job) // a retry either way
			o := <-g.finished
			if !tc.sent {
				require.Zero(t, requests.Load(), "nothing sent")
				require.Empty(t, o.Class, "an empty outcome gives the slot back")
				return
			}
			require.Equal(t, int64(1), requests.Load())
			require.Equal(t, delivery.ErrTimeout, o.ErrorClass)
			require.False(t, o.At.After(g.endBy.Add(time.Second)), "the request ended with the lease's allowance, not its 60 s timeout (ended %s)", o.At)
			as, err := st.ListAttempts(ctx, store.AttemptFilter{DeliveryID: d.ID, Limit: 10})
			require.NoError(t, err)
			require.Len(t, as, 1)
			require.Less(t, as[0].Timeout, 2*time.Second, "the log records the timeout the request was given")
		})
	}
}
