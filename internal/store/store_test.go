package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type testBundle struct {
	db    *storetest.DB
	store *store.Store
	enq   *fakeEnqueuer
}

func setup(t *testing.T) (*store.Store, *testBundle) {
	t.Helper()
	db := storetest.New(t)
	s := store.New(db.Pool, nil)
	return s, &testBundle{db: db, store: s, enq: &fakeEnqueuer{}}
}

// fakeEnqueuer stands in for River: it hands out job ids and remembers
// which deliveries it was asked to queue.
type fakeEnqueuer struct {
	mu     sync.Mutex
	next   int64
	queued []store.Delivery
	fail   error
	calls  int
}

func (f *fakeEnqueuer) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *fakeEnqueuer) EnqueueTx(_ context.Context, _ pgx.Tx, qs []store.QueuedDelivery) ([]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fail != nil {
		return nil, f.fail
	}
	ids := make([]int64, len(qs))
	for i, q := range qs {
		f.next++
		ids[i] = f.next
		f.queued = append(f.queued, q.Delivery)
	}
	return ids, nil
}

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func (b *testBundle) endpoint(t *testing.T, tenant string, eventTypes ...string) store.Endpoint {
	t.Helper()
	e, err := b.store.CreateEndpoint(context.Background(), store.Endpoint{
		TenantID: tenant, URL: "https://example.com/hook", Secret: testSecret, EventTypes: eventTypes,
	})
	require.NoError(t, err)
	return e
}

func (b *testBundle) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

// resetTo starts db over at schema version: an upgrade test's database of
// a previous version (the template holds every migration, so its schema
// goes and the migrations up to version run again).
func resetTo(t *testing.T, db *storetest.DB, version int) {
	t.Helper()
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public;`)
	require.NoError(t, err)
	require.NoError(t, store.MigrateTo(ctx, db.Pool, version))
}

func TestMigrateIsSafeConcurrently(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	// The template already holds every migration; drop ours to start over
	// on this database only, then race four migrators.
	_, err := db.Pool.Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public;`)
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = store.Migrate(ctx, db.Pool, nil)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	all, err := store.Migrations()
	require.NoError(t, err)
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM hookd_migrations`).Scan(&n))
	require.Equal(t, len(all), n)
	ok, err := store.MigrationsCurrent(ctx, db.Pool)
	require.NoError(t, err)
	require.True(t, ok)
}

func TestEndpointLifecycle(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme", "invoice.*")
	require.Equal(t, store.EndpointEnabled, e.Status)
	require.Equal(t, "auto", e.TrafficClass)
	require.Nil(t, e.DisabledReason)

	url := "https://example.org/new"
	e2, err := s.UpdateEndpoint(ctx, e.ID, store.EndpointPatch{URL: &url})
	require.NoError(t, err)
	require.Equal(t, url, e2.URL)
	require.Equal(t, []string{"invoice.*"}, e2.EventTypes)

	reason := "manual"
	e3, err := s.SetEndpointStatus(ctx, e.ID, store.EndpointDisabled, &reason)
	require.NoError(t, err)
	require.Equal(t, "manual", *e3.DisabledReason)
	e4, err := s.SetEndpointStatus(ctx, e.ID, store.EndpointEnabled, &reason)
	require.NoError(t, err)
	require.Nil(t, e4.DisabledReason)

	e5, err := s.RotateSecret(ctx, e.ID, "whsec_c2Vjb25kc2VjcmV0c2Vjb25kc2VjcmV0", 24*time.Hour)
	require.NoError(t, err)
	require.Equal(t, testSecret, e5.PreviousSecret)
	require.WithinDuration(t, time.Now().Add(24*time.Hour), *e5.PreviousSecretExpiresAt, time.Minute)

	require.NoError(t, s.DeleteEndpoint(ctx, e.ID))
	_, err = s.GetEndpoint(ctx, e.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.ErrorIs(t, s.DeleteEndpoint(ctx, e.ID), store.ErrNotFound)
}

func TestListEndpointsPaginates(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	var want []string
	for range 7 {
		want = append(want, b.endpoint(t, "acme").ID)
	}
	b.endpoint(t, "other")
	var got []string
	page := store.Page{Limit: 3}
	for {
		list, err := s.ListEndpoints(context.Background(), store.OneTenant("acme"), page)
		require.NoError(t, err)
		for _, e := range list {
			got = append(got, e.ID)
		}
		if len(list) < page.Limit {
			break
		}
		page.After = list[len(list)-1].ID
	}
	require.Equal(t, want, got)
}

func TestCreateMessageFansOutToSubscribedEndpointsOfItsTenant(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	all := b.endpoint(t, "acme")
	invoices := b.endpoint(t, "acme", "invoice.*")
	paid := b.endpoint(t, "acme", "invoice.paid")
	b.endpoint(t, "acme", "user.created")
	disabled := b.endpoint(t, "acme")
	reason := "manual"
	_, err := s.SetEndpointStatus(context.Background(), disabled.ID, store.EndpointDisabled, &reason)
	require.NoError(t, err)
	b.endpoint(t, "globex") // another tenant never receives acme's messages

	m, created, err := s.CreateMessage(context.Background(), store.NewMessage{
		TenantID: "acme", EventType: "invoice.paid", Payload: json.RawMessage(`{"amount":10}`),
	}, b.enq)
	require.NoError(t, err)
	require.True(t, created)
	got := map[string]string{}
	for _, d := range m.Deliveries {
		got[d.EndpointID] = d.Status
	}
	require.Equal(t, map[string]string{
		all.ID: store.DeliveryPending, invoices.ID: store.DeliveryPending, paid.ID: store.DeliveryPending,
		disabled.ID: store.DeliveryHeld,
	}, got)
	require.Len(t, b.enq.queued, 3, "held deliveries get no job")

	stored, err := s.GetMessage(context.Background(), m.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"amount":10}`, string(stored.Payload))
	require.Len(t, stored.Deliveries, 4)
	for _, d := range stored.Deliveries {
		if d.Status == store.DeliveryPending {
			require.NotNil(t, d.JobID)
		}
	}
}

func TestCreateMessageIdempotency(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	b.endpoint(t, "acme")
	in := store.NewMessage{TenantID: "acme", EventType: "a.b", Payload: json.RawMessage(`1`), IdempotencyKey: "k1"}
	first, created, err := s.CreateMessage(context.Background(), in, b.enq)
	require.NoError(t, err)
	require.True(t, created)
	again, created, err := s.CreateMessage(context.Background(), in, b.enq)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, first.ID, again.ID)
	require.Len(t, again.Deliveries, 1)
	require.Equal(t, 1, b.count(t, "messages"))
	require.Equal(t, 1, b.count(t, "deliveries"))

	// Another tenant may use the same key.
	b.endpoint(t, "globex")
	_, created, err = s.CreateMessage(context.Background(), store.NewMessage{TenantID: "globex", EventType: "a.b", Payload: json.RawMessage(`1`), IdempotencyKey: "k1"}, b.enq)
	require.NoError(t, err)
	require.True(t, created)

	// After 24 hours the key is free again.
	_, err = b.db.Pool.Exec(context.Background(), `UPDATE idempotency_keys SET created_at = now() - interval '25 hours'`)
	require.NoError(t, err)
	third, created, err := s.CreateMessage(context.Background(), in, b.enq)
	require.NoError(t, err)
	require.True(t, created)
	require.NotEqual(t, first.ID, third.ID)
}

func TestCreateMessageConcurrentIdempotencyCreatesOne(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	b.endpoint(t, "acme")
	in := store.NewMessage{TenantID: "acme", EventType: "a.b", Payload: json.RawMessage(`1`), IdempotencyKey: "race"}
	ids := make([]string, 6)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, _, err := s.CreateMessage(context.Background(), in, b.enq)
			if err != nil {
				t.Errorf("create: %v", err)
				return
			}
			ids[i] = m.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		require.Equal(t, ids[0], id)
	}
	require.Equal(t, 1, b.count(t, "messages"))
}

func TestCreateMessageWritesNothingWhenEnqueueFails(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	b.endpoint(t, "acme")
	b.enq.fail = fmt.Errorf("queue down")
	_, _, err := s.CreateMessage(context.Background(), store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`), IdempotencyKey: "x"}, b.enq)
	require.Error(t, err)
	require.Equal(t, 0, b.count(t, "messages"))
	require.Equal(t, 0, b.count(t, "deliveries"))
	require.Equal(t, 0, b.count(t, "idempotency_keys"))
}

func TestRecordLedger(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, b.enq)
	require.NoError(t, err)
	d := m.Deliveries[0]
	now := time.Now().UTC().Truncate(time.Microsecond)
	code := 500
	next := now.Add(5 * time.Second)
	until := now.Add(30 * time.Second)

	// A failed attempt, then (same batch) a waiting refusal: the last wins.
	require.NoError(t, s.RecordLedger(ctx, []store.Attempt{{
		DeliveryID: d.ID, MessageID: m.ID, EndpointID: e.ID, AttemptNumber: 1, AttemptedAt: now,
		Duration: 12 * time.Millisecond, StatusCode: &code, Classification: "failure", ResponseExcerpt: "oops",
	}}, []store.StatusUpdate{
		{DeliveryID: d.ID, Series: 1, Status: store.DeliveryPending, AttemptCount: 1, LastAttemptAt: &now, NextAttemptAt: &next, LastStatusCode: &code},
		{DeliveryID: d.ID, Series: 1, Status: store.DeliveryWaiting, BreakerOpenUntil: &until},
	}))
	got, err := s.GetDelivery(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryWaiting, got.Status)
	require.Equal(t, 1, got.AttemptCount)
	require.Equal(t, 500, *got.LastStatusCode)
	require.True(t, until.Equal(*got.BreakerOpenUntil))

	// Delivered is final: a late waiting update or a stale series changes nothing.
	ok := 200
	require.NoError(t, s.RecordLedger(ctx, nil, []store.StatusUpdate{
		{DeliveryID: d.ID, Series: 1, Status: store.DeliveryDelivered, AttemptCount: 2, LastAttemptAt: &now, LastStatusCode: &ok},
	}))
	require.NoError(t, s.RecordLedger(ctx, nil, []store.StatusUpdate{
		{DeliveryID: d.ID, Series: 1, Status: store.DeliveryWaiting, BreakerOpenUntil: &until},
		{DeliveryID: d.ID, Series: 0, Status: store.DeliveryFailed},
	}))
	got, err = s.GetDelivery(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryDelivered, got.Status)
	require.Equal(t, 2, got.AttemptCount)
	require.NotNil(t, got.DeliveredAt)
	require.Nil(t, got.BreakerOpenUntil)

	attempts, err := s.ListAttempts(ctx, store.AttemptFilter{EndpointID: e.ID, Limit: 10})
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Equal(t, "oops", attempts[0].ResponseExcerpt)
	require.Equal(t, 12*time.Millisecond, attempts[0].Duration)
}

func TestRetryDeliveryStartsANewSeries(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	b.endpoint(t, "acme")
	m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, b.enq)
	require.NoError(t, err)
	d := m.Deliveries[0]
	_, err = s.RetryDelivery(ctx, d.ID, b.enq)
	require.ErrorIs(t, err, store.ErrNotRetryable)

	require.NoError(t, s.RecordLedger(ctx, nil, []store.StatusUpdate{{DeliveryID: d.ID, Series: 1, Status: store.DeliveryFailed, AttemptCount: 8}}))
	got, err := s.RetryDelivery(ctx, d.ID, b.enq)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryPending, got.Status)
	require.Equal(t, 2, got.Series)
	require.Equal(t, 8, got.AttemptCount)
	last := b.enq.queued[len(b.enq.queued)-1]
	require.Equal(t, 2, last.Series)
	require.Equal(t, 8, last.AttemptCount, "the new series numbers its attempts after the old ones")

	_, err = s.RetryDelivery(ctx, "dlv_missing", b.enq)
	require.ErrorIs(t, err, store.ErrNotFound)
}

func TestEventTypeFilters(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"a.b.c", "a.b.*", "a.*", "*"}, store.EventTypeFilters("a.b.c"))
	require.Equal(t, []string{"a", "*"}, store.EventTypeFilters("a"))
}

func TestNewIDSortsByTime(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := store.NewID("ep", base)
	b := store.NewID("ep", base.Add(time.Millisecond))
	require.Len(t, a, 3+26)
	require.Less(t, a, b)
}

// TestParkedEndpointsOfShards: the shards of n split the endpoints with
// parked deliveries among themselves, each in exactly one, so the fleet's
// unparkers list every backlog once per pass.
func TestParkedEndpointsOfShards(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	until := time.Now().Add(time.Minute)
	want := map[string]bool{}
	for i := range 12 {
		tenant := fmt.Sprintf("t%d", i)
		e := b.endpoint(t, tenant)
		want[e.ID] = true
		m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: tenant, EventType: "a", Payload: json.RawMessage(`{}`)}, b.enq)
		require.NoError(t, err)
		require.NoError(t, s.RecordLedger(ctx, nil, []store.StatusUpdate{{DeliveryID: m.Deliveries[0].ID, Series: 1,
			Status: store.DeliveryWaiting, BreakerOpenUntil: &until, Park: true}}))
	}
	all, err := s.ParkedEndpoints(ctx, nil)
	require.NoError(t, err)
	require.Len(t, all, len(want))
	for _, n := range []int{1, 2, 3, 5} {
		seen := map[string]int{}
		for shard := range n {
			list, err := s.ParkedEndpointsOfShard(ctx, shard, n)
			require.NoError(t, err)
			for _, pe := range list {
				seen[pe.EndpointID]++
				require.Equal(t, 1, pe.Parked)
			}
		}
		require.Len(t, seen, len(want), "%d shards cover every endpoint", n)
		for id, c := range seen {
			require.True(t, want[id])
			require.Equal(t, 1, c, "%s in exactly one of %d shards", id, n)
		}
	}
	for _, bad := range [][2]int{{0, 0}, {2, 2}, {-1, 3}} {
		_, err := s.ParkedEndpointsOfShard(ctx, bad[0], bad[1])
		require.Error(t, err, "shard %d of %d", bad[0], bad[1])
	}
}

// TestParkAndRelease: a delivery parked by the ledger loses its job and
// waits; ReleaseParked queues it again, oldest first, keeping its place in
// the retry schedule, and two releasers never queue it twice.
func TestParkAndRelease(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	var ids []string
	for range 3 {
		m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, b.enq)
		require.NoError(t, err)
		ids = append(ids, m.Deliveries[0].ID)
	}
	until := time.Now().Add(time.Minute)
	now := time.Now()
	code := 503
	// The first delivery made two attempts before it was refused.
	require.NoError(t, s.RecordLedger(ctx, nil, []store.StatusUpdate{
		{DeliveryID: ids[0], Series: 1, Status: store.DeliveryPending, AttemptCount: 2, LastAttemptAt: &now, LastStatusCode: &code},
	}))
	var updates []store.StatusUpdate
	for _, id := range ids {
		updates = append(updates, store.StatusUpdate{DeliveryID: id, Series: 1, Status: store.DeliveryWaiting, BreakerOpenUntil: &until, Park: true})
	}
	require.NoError(t, s.RecordLedger(ctx, nil, updates))
	d, err := s.GetDelivery(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, store.DeliveryWaiting, d.Status)
	require.Nil(t, d.JobID, "parked: no job")
	require.Equal(t, 2, d.AttemptCount)

	parked, err := s.ParkedEndpoints(ctx, nil)
	require.NoError(t, err)
	require.Len(t, parked, 1)
	require.Equal(t, e.ID, parked[0].EndpointID)
	require.Equal(t, 3, parked[0].Parked)
	require.False(t, parked[0].TrialInFlight)

	before := len(b.enq.queued)
	got, err := s.ReleaseParked(ctx, e.ID, 1, b.enq)
	require.NoError(t, err)
	require.Equal(t, []store.Released{{ID: ids[0], Attempts: 2}}, got, "with the attempts it had")
	released := b.enq.queued[before]
	require.Equal(t, ids[0], released.ID, "oldest first")
	require.Equal(t, 2, released.AttemptCount, "attempt numbering goes on")
	require.Equal(t, 0, released.SeriesBase)
	d, err = s.GetDelivery(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, store.DeliveryPending, d.Status)
	require.NotNil(t, d.JobID)
	require.Nil(t, d.BreakerOpenUntil)

	// Two releasers at once queue each remaining delivery once.
	var wg sync.WaitGroup
	counts := make([]int, 2)
	for i := range counts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := s.ReleaseParked(ctx, e.ID, 10, b.enq)
			if err != nil {
				t.Errorf("release: %v", err)
			}
			counts[i] = len(got)
		}()
	}
	wg.Wait()
	require.Equal(t, 2, counts[0]+counts[1])
	require.Len(t, b.enq.queued, before+3)
	parked, err = s.ParkedEndpoints(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, parked)
}
