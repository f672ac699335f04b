package delivery_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestClosedBreakerBacklogIsReleasedAtAPace: a closed breaker's parked
// backlog is not queued all at once: at most a window of the endpoint's
// deliveries has a job at a time; the window doubles while the endpoint
// drains what it was given, halves when the breaker counts new failures
// and then grows by its start size only, never passes its maximum, and in
// the end everything is released.
func TestClosedBreakerBacklogIsReleasedAtAPace(t *testing.T) {
	t.Parallel()
	const backlog = 150
	db, st, ep, enq := parkedBacklog(t, backlog)
	ctx := context.Background()

	u := delivery.NewUnparker(st, enq, time.Minute, nil, nil)
	u.SetPace(delivery.UnparkPace{Start: 10, Max: 40, Interval: time.Second})
	queued := func() (n int) {
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND status = 'pending'`, ep.ID).Scan(&n))
		return n
	}
	drain := func() { // the endpoint answers everything it was given
		_, err := db.Pool.Exec(ctx, `UPDATE deliveries SET status = 'delivered' WHERE endpoint_id = $1 AND status = 'pending'`, ep.ID)
		require.NoError(t, err)
	}
	fail := func() { // the breaker counts a failure in its closed generation
		_, err := st.FlushOutcomes(ctx, []store.OutcomeCount{{EndpointID: ep.ID, Generation: 1, BucketStart: time.Now().UTC().Truncate(time.Second), Window: 20 * time.Second, Failures: 1}}, nil, nil)
		require.NoError(t, err)
	}

	u.Pass(ctx, nil)
	require.Equal(t, 10, queued(), "the first release is the start window, not the whole backlog")
	u.Pass(ctx, nil)
	require.Equal(t, 10, queued(), "nothing drained: nothing more")
	drain()
	u.Pass(ctx, nil)
	require.Equal(t, 20, queued(), "drained: the window doubles")
	drain()
	fail()
	u.Pass(ctx, nil)
	require.Equal(t, 10, queued(), "a new failure: the window halves")
	drain()
	u.Pass(ctx, nil)
	require.Equal(t, 20, queued(), "after a failure the window grows by its start size")
	drain()
	u.Pass(ctx, nil)
	require.Equal(t, 30, queued())
	released := 10 + 20 + 10 + 20 + 30
	for passes := 0; released < backlog; passes++ {
		require.Less(t, passes, 20, "the backlog is released in the end")
		drain()
		u.Pass(ctx, nil)
		q := queued()
		require.LessOrEqual(t, q, 40, "never more than the maximum window")
		released += q
	}
	require.Equal(t, backlog, released)
	require.Empty(t, u.Releasing(), "done: the endpoint's window is forgotten")
}

// TestEnabledEndpointReleasesHeldAtAPaceAcrossARestart: enabling an
// endpoint that holds a backlog queues nothing itself and answers with the
// count; the unparker then releases the held deliveries in paced passes (a
// window that starts small and doubles while the endpoint drains it), and
// an unparker that stops mid-release (a dispatcher killed) and another
// started afresh take it up from the database alone: in the end nothing
// is held and every delivery got exactly one job.
func TestEnabledEndpointReleasesHeldAtAPaceAcrossARestart(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	st := store.New(db.Pool, nil)
	ctx := context.Background()
	ep, err := st.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	require.NoError(t, err)
	reason := "manual"
	_, err = st.SetEndpointStatus(ctx, ep.ID, store.EndpointDisabled, &reason)
	require.NoError(t, err)
	enq := &recordingEnqueuer{}
	const backlog = 200
	for range backlog {
		_, _, err := st.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, enq)
		require.NoError(t, err)
	}
	require.Empty(t, enq.deliveries(), "held deliveries have no job")

	_, held, err := st.EnableEndpoint(ctx, ep.ID, "alice")
	require.NoError(t, err)
	require.Equal(t, backlog, held, "the enable answers with the count to release")
	require.Empty(t, enq.deliveries(), "the enable itself queues nothing")

	count := func(status string) (n int) {
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND status = $2`, ep.ID, status).Scan(&n))
		return n
	}
	drain := func() { // the endpoint answers everything it was given
		_, err := db.Pool.Exec(ctx, `UPDATE deliveries SET status = 'delivered' WHERE endpoint_id = $1 AND status = 'pending'`, ep.ID)
		require.NoError(t, err)
	}
	pace := delivery.UnparkPace{Start: 10, Max: 40, Interval: time.Second}
	u := delivery.NewUnparker(st, enq, time.Minute, nil, nil)
	u.SetPace(pace)
	u.Pass(ctx, nil)
	require.Equal(t, 10, count(store.DeliveryPending), "the first pass releases the start window")
	drain()
	u.Pass(ctx, nil)
	require.Equal(t, 20, count(store.DeliveryPending), "drained: the window doubles")

	// The dispatcher dies here; a new one knows nothing but the database.
	u = delivery.NewUnparker(st, enq, time.Minute, nil, nil)
	u.SetPace(pace)
	u.Pass(ctx, nil)
	require.Equal(t, 20, count(store.DeliveryPending), "the queued ones fill the new start window: nothing more")
	released := 30
	for passes := 0; count(store.DeliveryHeld) > 0; passes++ {
		require.Less(t, passes, 30, "the backlog is released in the end")
		drain()
		u.Pass(ctx, nil)
		q := count(store.DeliveryPending)
		require.LessOrEqual(t, q, pace.Max, "never more than the largest window at once")
		released += q
	}
	require.Equal(t, backlog, released)
	require.Zero(t, count(store.DeliveryHeld))
	jobs := map[string]int{}
	for _, id := range enq.deliveries() {
		jobs[id]++
	}
	require.Len(t, jobs, backlog, "every held delivery got a job")
	for id, n := range jobs {
		require.Equal(t, 1, n, "delivery %s queued more than once", id)
	}
	require.Empty(t, u.Releasing(), "done: the endpoint's window is forgotten")
}

// parkedBacklog makes a fresh database with one endpoint of acme whose n
// deliveries (a message each) are parked behind its breaker, as the
// ledger parks them.
func parkedBacklog(t *testing.T, n int) (*storetest.DB, *store.Store, store.Endpoint, *countingEnqueuer) {
	t.Helper()
	db := storetest.New(t)
	st := store.New(db.Pool, nil)
	ctx := context.Background()
	ep, err := st.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	require.NoError(t, err)
	enq := &countingEnqueuer{}
	until := time.Now().Add(time.Minute)
	var parks []store.StatusUpdate
	for range n {
		m, _, err := st.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, enq)
		require.NoError(t, err)
		d := m.Deliveries[0]
		parks = append(parks, store.StatusUpdate{DeliveryID: d.ID, Series: 1, Status: store.DeliveryWaiting, BreakerOpenUntil: &until, Park: true, JobID: *d.JobID})
	}
	require.NoError(t, st.RecordLedger(ctx, nil, parks))
	return db, st, ep, enq
}

// recordingEnqueuer hands out job ids and remembers which deliveries it
// queued.
type recordingEnqueuer struct {
	mu   sync.Mutex
	next int64
	ids  []string
}

func (e *recordingEnqueuer) EnqueueTx(_ context.Context, _ pgx.Tx, qs []store.QueuedDelivery) ([]int64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]int64, len(qs))
	for i, q := range qs {
		e.next++
		out[i] = e.next
		e.ids = append(e.ids, q.ID)
	}
	return out, nil
}

func (e *recordingEnqueuer) deliveries() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.ids)
}

// TestUnparkersSplitTheFleetsBacklogs: two dispatchers' unparkers, each
// with its share of the fleet, pace disjoint sets of endpoints that
// together are every endpoint with a backlog: no backlog is paced by two
// windows at once, and none is left out.
func TestUnparkersSplitTheFleetsBacklogs(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	st := store.New(db.Pool, nil)
	ctx := context.Background()
	enq := &countingEnqueuer{}
	until := time.Now().Add(time.Minute)
	endpoints := map[string]bool{}
	for i := range 8 {
		ep, err := st.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/" + string(rune('a'+i)), Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
		require.NoError(t, err)
		endpoints[ep.ID] = true
		var parks []store.StatusUpdate
		for range 30 {
			m, _, err := st.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, enq)
			require.NoError(t, err)
			for _, d := range m.Deliveries {
				if d.EndpointID == ep.ID {
					parks = append(parks, store.StatusUpdate{DeliveryID: d.ID, Series: 1, Status: store.DeliveryWaiting, BreakerOpenUntil: &until, Park: true, JobID: *d.JobID})
				}
			}
		}
		require.NoError(t, st.RecordLedger(ctx, nil, parks))
	}
	// Every message went to every endpoint made so far: park the rest too.
	_, err := db.Pool.Exec(ctx, `UPDATE deliveries SET status = 'waiting', job_id = NULL WHERE status = 'pending'`)
	require.NoError(t, err)

	paced := map[string]int{}
	for shard := range 2 {
		u := delivery.NewUnparker(st, enq, time.Minute, nil, nil)
		u.SetPace(delivery.UnparkPace{Start: 4, Max: 40, Interval: time.Second})
		u.SetShare(func() (int, int) { return shard, 2 })
		u.Pass(ctx, nil)
		for _, id := range u.Releasing() {
			paced[id]++
		}
	}
	require.Len(t, paced, len(endpoints), "every backlog is paced")
	for id, n := range paced {
		require.True(t, endpoints[id])
		require.Equal(t, 1, n, "%s is paced by one unparker", id)
	}
}

// TestReleasedDeliveriesFailingHalveTheWindowBeforeTheBreakerCounts: the
// outcomes of a release step steer the next one as soon as the ledger has
// them. A step whose deliveries the endpoint partly refused (their retries
// scheduled: no longer queued, so the step looks drained) halves the
// window at the next pass, before the breaker's counts of those failures
// are flushed; doubling on it would hand a barely recovered endpoint twice
// what it just refused part of, and trip its breaker again.
func TestReleasedDeliveriesFailingHalveTheWindowBeforeTheBreakerCounts(t *testing.T) {
	t.Parallel()
	db, st, ep, enq := parkedBacklog(t, 100)
	ctx := context.Background()
	u := delivery.NewUnparker(st, enq, time.Minute, nil, nil)
	u.SetPace(delivery.UnparkPace{Start: 8, Max: 64, Interval: time.Second})
	due := func() []string { // the endpoint's deliveries with a job due now
		rows, err := db.Pool.Query(ctx, `SELECT id FROM deliveries WHERE endpoint_id = $1 AND status = 'pending'
			AND (next_attempt_at IS NULL OR next_attempt_at <= now()) ORDER BY id`, ep.ID)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return ids
	}
	// answer records, as the ledger does, the endpoint's answers to the
	// deliveries due: the first ok ones delivered, the rest refused with
	// their retry two seconds away.
	answer := func(ok int) {
		now := time.Now()
		retry := now.Add(2 * time.Second)
		var updates []store.StatusUpdate
		for i, id := range due() {
			up := store.StatusUpdate{DeliveryID: id, Series: 1, Status: store.DeliveryDelivered, AttemptCount: 1, LastAttemptAt: &now}
			if i >= ok {
				refused := "http_503"
				up.Status, up.NextAttemptAt, up.LastError = store.DeliveryPending, &retry, &refused
			}
			updates = append(updates, up)
		}
		require.NoError(t, st.RecordLedger(ctx, nil, updates))
	}

	u.Pass(ctx, nil)
	require.Len(t, due(), 8, "the first release is the start window")
	answer(8)
	u.Pass(ctx, nil)
	require.Len(t, due(), 16, "all of it delivered: the window doubles")
	require.Equal(t, 16, u.Window(ep.ID))
	answer(10) // 6 of the 16 refused; the breaker has counted none of it yet
	require.Empty(t, due(), "the refused ones wait for their retry: the step looks drained")
	u.Pass(ctx, nil)
	require.Equal(t, 8, u.Window(ep.ID), "the step's refusals halve the window, not double it")
	require.Len(t, due(), 8)
}
