package retention_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/retention"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Started by an import's init function (the Pub/Sub client's,
		// through internal/destination), not by a test.
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

type bundle struct {
	db      *storetest.DB
	store   *store.Store
	enq     *fakeEnqueuer
	m       *retention.Maintainer
	metrics *retention.Metrics
	expired *prometheus.CounterVec
}

// setup returns a maintainer with one-minute partitions and the given
// retentions, on a fresh database.
func setup(t *testing.T, keep, payloads time.Duration) *bundle {
	t.Helper()
	db := storetest.New(t)
	s := store.New(db.Pool, nil)
	// Start with no partition past the legacy ones (the migration made a
	// day's): the maintainer's own are the ones under test.
	db.DropPartitions(t, false)
	expired := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "webhook_delivery_expired_total"}, []string{"reason"})
	metrics := retention.NewMetrics(prometheus.NewRegistry(), expired)
	cfg := retention.Config{Interval: time.Minute, Retention: keep, PayloadRetention: payloads, HistoryRetention: time.Hour}
	require.NoError(t, cfg.Validate())
	m := retention.New(cfg, retention.Deps{Store: s, Now: time.Now, Metrics: metrics})
	return &bundle{db: db, store: s, enq: &fakeEnqueuer{}, m: m, metrics: metrics, expired: expired}
}

type fakeEnqueuer struct {
	mu   sync.Mutex
	next int64
}

func (f *fakeEnqueuer) EnqueueTx(_ context.Context, _ pgx.Tx, qs []store.QueuedDelivery) ([]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := make([]int64, len(qs))
	for i := range qs {
		f.next++
		ids[i] = f.next
	}
	return ids, nil
}

// dbNow is the database's clock: the maintainer's time comes from it.
func (b *bundle) dbNow(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now))
	return now.UTC()
}

func (b *bundle) run(t *testing.T, now time.Time) retention.Report {
	t.Helper()
	rep, err := b.m.RunOnce(context.Background(), now)
	require.NoError(t, err)
	require.True(t, rep.Ran)
	return rep
}

func (b *bundle) endpoint(t *testing.T, tenant string, enabled bool) store.Endpoint {
	t.Helper()
	ctx := context.Background()
	e, err := b.store.CreateEndpoint(ctx, store.Endpoint{TenantID: tenant, URL: "https://example.com/hook", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	require.NoError(t, err)
	if !enabled {
		_, err := b.db.Pool.Exec(ctx, `UPDATE endpoints SET status = 'disabled' WHERE id = $1`, e.ID)
		require.NoError(t, err)
	}
	return e
}

func (b *bundle) message(t *testing.T, tenant, key string) store.Message {
	t.Helper()
	m, created, err := b.store.CreateMessage(context.Background(), store.NewMessage{
		TenantID: tenant, EventType: "order.paid", Payload: json.RawMessage(`{"n":1}`), IdempotencyKey: key,
	}, b.enq)
	require.NoError(t, err)
	require.True(t, created)
	return m
}

// rows counts the rows of table whose column equals value.
func (b *bundle) rows(t *testing.T, table, column, value string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table+` WHERE `+column+` = $1`, value).Scan(&n))
	return n
}

// partitionOf names the partition holding the row of table with id.
func (b *bundle) partitionOf(t *testing.T, table, column, id string) string {
	t.Helper()
	var name string
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT tableoid::regclass::text FROM `+table+` WHERE `+column+` = $1`, id).Scan(&name))
	return name
}

func (b *bundle) exists(t *testing.T, table string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok))
	return ok
}

func floorMinute(t time.Time) time.Time { return t.Truncate(time.Minute) }

var tables = []string{"messages", "message_payloads", "deliveries", "delivery_attempts"}

// TestPartitionsCreatedAheadAndDroppedOnSchedule: with one-minute
// partitions and a three-minute retention, every table has its partitions
// at least two intervals past the current one, and a partition goes once
// its whole interval is older than the retention, not before.
func TestPartitionsCreatedAheadAndDroppedOnSchedule(t *testing.T) {
	t.Parallel()
	b := setup(t, 3*time.Minute, 3*time.Minute)
	ctx := context.Background()
	now := b.dbNow(t)
	rep := b.run(t, now)
	require.NotEmpty(t, rep.Created)

	covered := func(at time.Time) map[string]bool {
		parts, err := b.store.Partitions(ctx)
		require.NoError(t, err)
		out := map[string]bool{}
		for _, p := range parts {
			if !p.From.After(at) && p.To.After(at) {
				out[p.Parent] = true
			}
		}
		return out
	}
	for _, ahead := range []time.Duration{0, time.Minute, 2 * time.Minute} {
		got := covered(floorMinute(now).Add(ahead))
		for _, table := range tables {
			require.True(t, got[table], "%s has a partition %s ahead", table, ahead)
		}
	}
	first := map[string]string{}
	parts, err := b.store.Partitions(ctx)
	require.NoError(t, err)
	for _, p := range parts {
		if !p.From.After(now) && p.To.After(now) && !p.From.IsZero() {
			first[p.Parent] = p.Name
			require.True(t, b.exists(t, p.Name))
		}
	}
	require.Len(t, first, len(tables))

	// A run is idempotent: nothing new to create in the same minute.
	again := b.run(t, now)
	require.Empty(t, again.Created)
	require.Empty(t, again.Dropped)

	// The current minute's partitions stay while any of it is within the
	// retention...
	edge := floorMinute(now).Add(time.Minute + 3*time.Minute - time.Millisecond)
	if !floorMinute(now).Add(time.Minute).After(now) {
		t.Fatalf("now %v", now)
	}
	rep = b.run(t, edge)
	for _, table := range tables {
		require.True(t, b.exists(t, first[table]), "%s dropped too early", first[table])
	}
	require.True(t, covered(floorMinute(edge).Add(2 * time.Minute))["deliveries"])

	// ...and go when all of it is older.
	later := floorMinute(now).Add(time.Minute + 3*time.Minute)
	total := len(rep.Dropped)
	rep = b.run(t, later)
	total += len(rep.Dropped)
	dropped := map[string]bool{}
	for _, d := range rep.Dropped {
		dropped[d.Name] = true
	}
	for _, table := range tables {
		require.False(t, b.exists(t, first[table]), "%s kept past retention", first[table])
		require.True(t, dropped[first[table]])
	}
	var droppedTotal float64
	for _, table := range tables {
		droppedTotal += testutil.ToFloat64(b.metrics.Dropped.WithLabelValues(table))
	}
	require.Equal(t, float64(total), droppedTotal)
	for _, table := range tables {
		require.True(t, covered(floorMinute(later).Add(2 * time.Minute))[table])
	}
}

// TestRetentionExpiresThenDropsEverything: a held delivery older than the
// retention becomes expired (final, last_error saying why, counted), never
// silently gone; once its interval's partitions go, the message answers
// not found and none of its rows is left in any table.
func TestRetentionExpiresThenDropsEverything(t *testing.T) {
	t.Parallel()
	b := setup(t, 3*time.Minute, 3*time.Minute)
	ctx := context.Background()
	b.run(t, b.dbNow(t))
	on, off := b.endpoint(t, "acme", true), b.endpoint(t, "acme", false)
	msg := b.message(t, "acme", "key-1")
	require.Len(t, msg.Deliveries, 2)
	var sent, held store.Delivery
	for _, d := range msg.Deliveries {
		if d.EndpointID == on.ID {
			sent = d
		} else {
			require.Equal(t, off.ID, d.EndpointID)
			held = d
		}
	}
	require.Equal(t, store.DeliveryHeld, held.Status)
	at := b.dbNow(t)
	code := 200
	require.NoError(t, b.store.RecordLedger(ctx, []store.Attempt{{
		DeliveryID: sent.ID, MessageID: msg.ID, EndpointID: on.ID, AttemptNumber: 1, AttemptedAt: at,
		StatusCode: &code, Classification: "success",
	}}, []store.StatusUpdate{{DeliveryID: sent.ID, Series: 1, Status: store.DeliveryDelivered, AttemptCount: 1, LastAttemptAt: &at, LastStatusCode: &code}}))
	require.NotContains(t, b.partitionOf(t, "messages", "id", msg.ID), "default")
	require.NotContains(t, b.partitionOf(t, "deliveries", "id", held.ID), "default")
	require.Equal(t, b.partitionOf(t, "messages", "id", msg.ID)[len("messages"):], b.partitionOf(t, "deliveries", "id", held.ID)[len("deliveries"):],
		"a message and its deliveries share an interval")

	created, ok := store.IDTime(msg.ID)
	require.True(t, ok)
	// Just past the retention of the message, with its interval's
	// partitions still there: the held delivery is final now.
	rep := b.run(t, created.Add(3*time.Minute+time.Millisecond))
	require.Len(t, rep.Expired, 1)
	require.Equal(t, held.ID, rep.Expired[0].ID)
	require.Equal(t, store.DeliveryHeld, rep.Expired[0].Was)
	got, err := b.store.GetDelivery(ctx, held.ID)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryExpired, got.Status)
	require.NotNil(t, got.LastError)
	require.Contains(t, *got.LastError, "retention")
	require.Equal(t, 1.0, testutil.ToFloat64(b.expired.WithLabelValues("retention")))
	delivered, err := b.store.GetDelivery(ctx, sent.ID)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryDelivered, delivered.Status, "a final delivery is left alone")
	// Enabling the endpoint releases nothing: expired is final.
	_, released, err := b.store.EnableEndpoint(ctx, off.ID, "test")
	require.NoError(t, err)
	require.Zero(t, released)

	// Once the whole interval is past the retention, everything goes.
	b.run(t, floorMinute(created).Add(time.Minute+3*time.Minute))
	_, err = b.store.GetMessage(ctx, msg.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	for _, id := range []string{held.ID, sent.ID} {
		_, err = b.store.GetDelivery(ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound)
	}
	require.Zero(t, b.rows(t, "messages", "id", msg.ID))
	require.Zero(t, b.rows(t, "message_payloads", "message_id", msg.ID))
	require.Zero(t, b.rows(t, "deliveries", "message_id", msg.ID))
	require.Zero(t, b.rows(t, "delivery_attempts", "message_id", msg.ID))
	require.Zero(t, b.rows(t, "idempotency_keys", "message_id", msg.ID))
}

// TestPayloadRetention: past the payload retention a message keeps its
// metadata and deliveries but reads as payload expired, workers find no
// payload, and a retry is refused.
func TestPayloadRetention(t *testing.T) {
	t.Parallel()
	b := setup(t, 10*time.Minute, 2*time.Minute)
	ctx := context.Background()
	b.run(t, b.dbNow(t))
	b.endpoint(t, "acme", true)
	msg := b.message(t, "acme", "")
	d := msg.Deliveries[0]
	require.NoError(t, b.store.RecordLedger(ctx, nil, []store.StatusUpdate{{DeliveryID: d.ID, Series: 1, Status: store.DeliveryFailed, AttemptCount: 1}}))
	got, err := b.store.GetMessage(ctx, msg.ID)
	require.NoError(t, err)
	require.False(t, got.PayloadExpired)
	require.JSONEq(t, `{"n":1}`, string(got.Payload))

	created, _ := store.IDTime(msg.ID)
	rep := b.run(t, floorMinute(created).Add(time.Minute+2*time.Minute))
	var payloadsDropped bool
	for _, p := range rep.Dropped {
		if p.To.After(created) {
			require.Equal(t, "message_payloads", p.Parent, "only payloads are past their retention")
			payloadsDropped = true
		}
	}
	require.True(t, payloadsDropped)
	got, err = b.store.GetMessage(ctx, msg.ID)
	require.NoError(t, err)
	require.True(t, got.PayloadExpired)
	require.Nil(t, got.Payload)
	require.Len(t, got.Deliveries, 1)
	p, err := b.store.MessagePayloads(ctx, []string{msg.ID})
	require.NoError(t, err)
	require.Empty(t, p)
	_, err = b.store.RetryDelivery(ctx, d.ID, b.enq)
	require.ErrorIs(t, err, store.ErrPayloadExpired)
	still, err := b.store.GetDelivery(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryFailed, still.Status)
}

// TestDefaultPartitionDrained: a row written for an interval without a
// partition lands in the default partition (the insert does not fail);
// the maintainer moves it into a partition of its own interval, counts
// what is left (the metric reads 0) and the row reads back.
func TestDefaultPartitionDrained(t *testing.T) {
	t.Parallel()
	b := setup(t, 3*time.Hour, 3*time.Hour)
	ctx := context.Background()
	b.endpoint(t, "acme", true)
	// No maintenance has run: this minute has no partition yet.
	msg := b.message(t, "acme", "")
	require.Equal(t, "messages_default", b.partitionOf(t, "messages", "id", msg.ID))
	require.Equal(t, "deliveries_default", b.partitionOf(t, "deliveries", "id", msg.Deliveries[0].ID))
	// A message minted by a clock an hour ahead, far past any partition
	// (not by NewID: it would make every later id of this process an hour
	// ahead too).
	old := store.IDBound("msg", time.Now().Add(time.Hour))[:len("msg_")+10] + "0000000000000001"
	_, err := b.db.Pool.Exec(ctx, `INSERT INTO messages (id, tenant_id, event_type) VALUES ($1, 'acme', 'x')`, old)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `INSERT INTO message_payloads (message_id, payload) VALUES ($1, '[]')`, old)
	require.NoError(t, err)
	require.Equal(t, "messages_default", b.partitionOf(t, "messages", "id", old))

	rep := b.run(t, b.dbNow(t))
	var moved int64
	for _, c := range append(rep.Created, rep.Drained...) {
		moved += c.Moved
	}
	require.GreaterOrEqual(t, moved, int64(5), "message, payload and delivery, and the old message and payload")
	require.NotEmpty(t, rep.Drained, "the hour-old rows got a partition of their own")
	for _, table := range tables {
		require.Zero(t, rep.Defaults[table], table)
		require.Zero(t, testutil.ToFloat64(b.metrics.DefaultRows.WithLabelValues(table)), table)
	}
	require.NotContains(t, b.partitionOf(t, "messages", "id", msg.ID), "default")
	require.NotContains(t, b.partitionOf(t, "messages", "id", old), "default")
	require.NotContains(t, b.partitionOf(t, "deliveries", "id", msg.Deliveries[0].ID), "default")
	got, err := b.store.GetMessage(ctx, msg.ID)
	require.NoError(t, err)
	require.Len(t, got.Deliveries, 1)
	require.JSONEq(t, `{"n":1}`, string(got.Payload))
	oldMsg, err := b.store.GetMessage(ctx, old)
	require.NoError(t, err)
	require.JSONEq(t, `[]`, string(oldMsg.Payload))
}

// TestIdempotencyKeysExpire: keys older than 24 hours are deleted in
// batches, and a key past its window creates a new message.
func TestIdempotencyKeysExpire(t *testing.T) {
	t.Parallel()
	b := setup(t, 30*24*time.Hour, 30*24*time.Hour)
	ctx := context.Background()
	b.endpoint(t, "acme", true)
	var first []store.Message
	for _, k := range []string{"a", "b", "c"} {
		first = append(first, b.message(t, "acme", k))
	}
	_, err := b.db.Pool.Exec(ctx, `UPDATE idempotency_keys SET created_at = now() - interval '25 hours' WHERE key IN ('a', 'b')`)
	require.NoError(t, err)
	n, err := b.store.ExpireIdempotencyKeys(ctx, b.dbNow(t).Add(-retention.IdempotencyWindow), 1)
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "two batches of one")
	var keys []string
	rows, err := b.db.Pool.Query(ctx, `SELECT key FROM idempotency_keys ORDER BY key`)
	require.NoError(t, err)
	keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"c"}, keys)

	again, created, err := b.store.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "order.paid", Payload: json.RawMessage(`2`), IdempotencyKey: "a"}, b.enq)
	require.NoError(t, err)
	require.True(t, created)
	require.NotEqual(t, first[0].ID, again.ID)
	replay, created, err := b.store.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "order.paid", Payload: json.RawMessage(`2`), IdempotencyKey: "c"}, b.enq)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, first[2].ID, replay.ID)

	// The maintainer's run deletes them too.
	_, err = b.db.Pool.Exec(ctx, `UPDATE idempotency_keys SET created_at = now() - interval '25 hours'`)
	require.NoError(t, err)
	rep := b.run(t, b.dbNow(t))
	require.Equal(t, int64(2), rep.Keys)
}

// TestOneMaintainerAtATime: a run while another process holds the
// maintenance lock does nothing.
func TestOneMaintainerAtATime(t *testing.T) {
	t.Parallel()
	b := setup(t, 3*time.Minute, 3*time.Minute)
	ctx := context.Background()
	conn, err := b.db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(store.MaintenanceLockKey))
	require.NoError(t, err)
	rep, err := b.m.RunOnce(ctx, b.dbNow(t))
	require.NoError(t, err)
	require.False(t, rep.Ran)
	require.Empty(t, rep.Created)
	_, err = conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, int64(store.MaintenanceLockKey))
	require.NoError(t, err)
	require.NotEmpty(t, b.run(t, b.dbNow(t)).Created)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg   retention.Config
		field string
	}{
		{retention.Config{Interval: 30 * time.Second, Retention: time.Hour, PayloadRetention: time.Hour, HistoryRetention: time.Hour}, "PartitionInterval"},
		{retention.Config{Interval: time.Hour, Retention: time.Hour, PayloadRetention: time.Hour, HistoryRetention: time.Hour}, "Retention"},
		{retention.Config{Interval: time.Minute, Retention: time.Hour, PayloadRetention: 2 * time.Hour, HistoryRetention: time.Hour}, "PayloadRetention"},
		{retention.Config{Interval: time.Minute, Retention: time.Hour, PayloadRetention: time.Hour, HistoryRetention: 0}, "HistoryRetention"},
	} {
		err := tc.cfg.Validate()
		var ce *retention.ConfigError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, tc.field, ce.Field)
		require.True(t, strings.HasPrefix(ce.Reason, "must"))
	}
}

// TestRetentionCancelsTheJobOfAnExpiredDelivery: a pending delivery past
// the retention with a River job that has not started is made expired and
// its job cancelled, so no worker sends it after its data has gone.
func TestRetentionCancelsTheJobOfAnExpiredDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t, 3*time.Minute, 3*time.Minute)
	ctx := context.Background()
	b.run(t, b.dbNow(t))
	b.endpoint(t, "acme", true)
	inserter, err := river.NewClient(riverpgxv5.New(b.db.Pool), &river.Config{})
	require.NoError(t, err)
	msg, _, err := b.store.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "order.paid", Payload: json.RawMessage(`1`)},
		&delivery.Enqueuer{Client: inserter})
	require.NoError(t, err)
	d := msg.Deliveries[0]
	require.Equal(t, store.DeliveryPending, d.Status)
	require.NotNil(t, d.JobID)

	created, _ := store.IDTime(msg.ID)
	rep := b.run(t, created.Add(3*time.Minute+time.Millisecond))
	require.Len(t, rep.Expired, 1)
	require.Equal(t, store.DeliveryPending, rep.Expired[0].Was)
	got, err := b.store.GetDelivery(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryExpired, got.Status)
	var state string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT state::text FROM river_job WHERE id = $1`, *d.JobID).Scan(&state))
	require.Equal(t, "cancelled", state)
	// The ledger never revives it: a late outcome of the series is ignored.
	now := time.Now()
	require.NoError(t, b.store.RecordLedger(ctx, nil, []store.StatusUpdate{{DeliveryID: d.ID, Series: 1, Status: store.DeliveryDelivered, AttemptCount: 1, LastAttemptAt: &now}}))
	got, err = b.store.GetDelivery(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryExpired, got.Status)
}

// TestCreatingTheLiveIntervalLosesNoWrite: while the maintainer creates
// the partitions of the interval being written to (rows since the upgrade
// are in the default partitions), concurrent message inserts and status
// updates neither fail nor go missing.
func TestCreatingTheLiveIntervalLosesNoWrite(t *testing.T) {
	t.Parallel()
	b := setup(t, 3*time.Hour, 3*time.Hour)
	ctx := context.Background()
	b.endpoint(t, "acme", true)
	w := b.startWriters(ctx)
	// Let rows pile up in the default partitions, then create the live
	// interval's partitions under the writers.
	w.waitFor(t, 20)
	var rep retention.Report
	for {
		var err error
		rep, err = b.m.RunOnce(ctx, b.dbNow(t))
		if err == nil {
			break
		}
		// A busy machine may make a lock wait past its timeout: the next
		// run tries again, as the maintainer's loop does.
		require.ErrorIs(t, err, store.ErrLockTimeout)
	}
	w.waitFor(t, w.count()+20)
	delivered := w.finish(t)
	var moved int64
	for _, c := range rep.Created {
		moved += c.Moved
	}
	require.Positive(t, moved, "the run moved rows out of the default partitions")

	var notDelivered int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE id = ANY($1) AND status <> 'delivered'`, delivered).Scan(&notDelivered))
	require.Zero(t, notDelivered, "no status update went missing")
	var attempts int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM delivery_attempts WHERE delivery_id = ANY($1)`, delivered).Scan(&attempts))
	require.Equal(t, len(delivered), attempts)
	rows, err := b.store.DefaultRows(ctx)
	require.NoError(t, err)
	for table, n := range rows {
		require.Zero(t, n, table)
	}
}

// TestDroppingPartitionsUnderWritesFailsNone: partitions past retention are
// dropped while messages are accepted and delivered into the current ones,
// and no write fails. (With a foreign key from deliveries to endpoints this
// run took 3-5x longer, its drops waiting on the writers' endpoint reads; a
// benchmark run saw that wait end in a deadlock.)
func TestDroppingPartitionsUnderWritesFailsNone(t *testing.T) {
	t.Parallel()
	b := setup(t, 3*time.Minute, 3*time.Minute)
	ctx := context.Background()
	now := b.dbNow(t)
	// Partitions of an hour ago (the legacy ones, spanning every past
	// time, go first), one with a row, and of now.
	b.db.DropPartitions(t, true)
	old := now.Add(-time.Hour)
	_, err := b.store.EnsurePartitions(ctx, old, time.Minute, 2)
	require.NoError(t, err)
	b.endpoint(t, "acme", true)
	oldID := store.IDBound("msg", old)[:len("msg_")+10] + "0000000000000001"
	_, err = b.db.Pool.Exec(ctx, `INSERT INTO messages (id, tenant_id, event_type) VALUES ($1, 'acme', 'x')`, oldID)
	require.NoError(t, err)
	_, err = b.store.EnsurePartitions(ctx, now, time.Minute, 2)
	require.NoError(t, err)

	w := b.startWriters(ctx)
	w.waitFor(t, 20)
	var dropped []store.PartitionChange
	require.Equal(t, "messages_p"+floorMinute(old).Format("20060102t150405"), b.partitionOf(t, "messages", "id", oldID))
	for b.exists(t, "messages_p"+floorMinute(old).Format("20060102t150405")) {
		rep, err := b.m.RunOnce(ctx, b.dbNow(t))
		if err != nil {
			require.ErrorIs(t, err, store.ErrLockTimeout)
			continue
		}
		dropped = append(dropped, rep.Dropped...)
	}
	w.finish(t)
	require.NotEmpty(t, dropped)
	_, err = b.store.GetMessage(ctx, oldID)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// writers accept a message and record its delivery, in a loop on four
// goroutines, until finish; each goroutine stops at its first error.
type writers struct {
	mu        sync.Mutex
	delivered []string
	errs      []error
	stop      chan struct{}
	wg        sync.WaitGroup
}

func (b *bundle) startWriters(ctx context.Context) *writers {
	w := &writers{stop: make(chan struct{})}
	for range 4 {
		w.wg.Go(func() {
			for {
				select {
				case <-w.stop:
					return
				default:
				}
				id, err := b.deliverOne(ctx)
				w.mu.Lock()
				if err != nil {
					w.errs = append(w.errs, err)
				} else {
					w.delivered = append(w.delivered, id)
				}
				w.mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	return w
}

// deliverOne accepts a message for acme and records its delivery's
// successful first attempt, returning the delivery's id.
func (b *bundle) deliverOne(ctx context.Context) (string, error) {
	m, _, err := b.store.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "order.paid", Payload: json.RawMessage(`1`)}, b.enq)
	if err != nil {
		return "", err
	}
	at := time.Now()
	d := m.Deliveries[0]
	return d.ID, b.store.RecordLedger(ctx, []store.Attempt{{DeliveryID: d.ID, MessageID: m.ID, EndpointID: d.EndpointID,
		AttemptNumber: 1, AttemptedAt: at, Classification: "success"}},
		[]store.StatusUpdate{{DeliveryID: d.ID, Series: 1, Status: store.DeliveryDelivered, AttemptCount: 1, LastAttemptAt: &at}})
}

func (w *writers) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.delivered)
}

// waitFor waits until n deliveries are recorded, or a writer failed.
func (w *writers) waitFor(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.delivered) >= n || len(w.errs) > 0
	}, time.Minute, 5*time.Millisecond)
}

// finish stops the writers, requires that none failed, and returns the
// deliveries recorded.
func (w *writers) finish(t *testing.T) []string {
	t.Helper()
	close(w.stop)
	w.wg.Wait()
	require.Empty(t, w.errs)
	return w.delivered
}

// expiryHook is the maintainer's store with a function run once, right
// after the first expiry pass of a run returns: what another transaction
// does between the expiry pass and the drops.
type expiryHook struct {
	*store.Store
	mu    sync.Mutex
	after func()
}

func (h *expiryHook) ExpireDeliveries(ctx context.Context, cutoff time.Time, lastError string, limit int) ([]store.ExpiredDelivery, error) {
	out, err := h.Store.ExpireDeliveries(ctx, cutoff, lastError, limit)
	h.mu.Lock()
	f := h.after
	h.after = nil
	h.mu.Unlock()
	if f != nil {
		f()
	}
	return out, err
}

// TestDropExpiresADeliveryLockedThroughTheExpiryPass: a ledger
// transaction parks a delivery past retention and holds its row through
// the maintainer's expiry pass (which skips locked rows), then commits it
// as waiting before the partition's drop. The drop must not take it away
// unfinished: it ends expired, counted, logged and reported to the
// operational endpoints as delivery.failed, with its partition dropped.
func TestDropExpiresADeliveryLockedThroughTheExpiryPass(t *testing.T) {
	t.Parallel()
	b := setup(t, 3*time.Minute, 3*time.Minute)
	ctx := context.Background()
	ops := &recordingEnqueuer{}
	st := store.New(b.db.Pool, nil, store.WithOperationalEvents(store.OperationalEventsConfig{Enqueuer: ops}))
	var logs strings.Builder
	var logMu sync.Mutex
	hook := &expiryHook{Store: st}
	cfg := retention.Config{Interval: time.Minute, Retention: 3 * time.Minute, PayloadRetention: 3 * time.Minute, HistoryRetention: time.Hour}
	m := retention.New(cfg, retention.Deps{Store: hook, Now: time.Now, Metrics: b.metrics,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&logs, &logMu}, nil))})
	_, err := m.RunOnce(ctx, b.dbNow(t))
	require.NoError(t, err)
	_, err = st.CreateOperationalEndpoint(ctx, store.NewOperationalEndpoint{URL: "https://ops.example.com/hook", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	require.NoError(t, err)
	b.endpoint(t, "acme", true)
	msg := b.message(t, "acme", "")
	d := msg.Deliveries[0]
	require.Equal(t, store.DeliveryPending, d.Status)

	created, _ := store.IDTime(msg.ID)
	retire := floorMinute(created).Add(time.Minute + 3*time.Minute)
	// The partitions of the retiring run's time are there already, as the
	// maintainer keeps them ahead.
	_, err = st.EnsurePartitions(ctx, retire, time.Minute, retention.Ahead)
	require.NoError(t, err)

	// The ledger parks the delivery (its breaker opened: waiting, no job)
	// and has not committed yet.
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	parked, err := tx.Exec(ctx, `
		UPDATE deliveries SET status = 'waiting', job_id = NULL, breaker_open_until = now() + interval '1 minute', updated_at = now()
		WHERE id = $1 AND status = 'pending'`, d.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), parked.RowsAffected())
	hook.after = func() { require.NoError(t, tx.Commit(ctx)) }

	rep, err := m.RunOnce(ctx, retire)
	require.NoError(t, err)
	require.Nil(t, hook.after, "the ledger committed between the expiry pass and the drops")

	require.Len(t, rep.Expired, 1)
	require.Equal(t, d.ID, rep.Expired[0].ID)
	require.Equal(t, store.DeliveryWaiting, rep.Expired[0].Was, "committed as waiting, after the expiry pass")
	var dropped *store.PartitionChange
	for i, c := range rep.Dropped {
		if c.Parent == "deliveries" && len(c.Expired) > 0 {
			dropped = &rep.Dropped[i]
		}
	}
	require.NotNil(t, dropped, "the drop that held the partition made it expired")
	require.Equal(t, d.ID, dropped.Expired[0].ID)
	require.Zero(t, b.rows(t, "deliveries", "id", d.ID), "then dropped it with its partition")
	require.Equal(t, 1.0, testutil.ToFloat64(b.expired.WithLabelValues("retention")))
	logMu.Lock()
	require.Contains(t, logs.String(), "msg=delivery_expired delivery="+d.ID)
	logMu.Unlock()

	// Its event was queued in the drop's transaction (the event's own
	// message went with the test's interval: the maintainer's clock is
	// ahead of the database's here).
	queued := ops.queued()
	require.Len(t, queued, 1)
	require.Equal(t, store.OpDeliveryFailed, queued[0].EventType)
	payload := queued[0].Payload
	var ev struct {
		Data struct {
			DeliveryID string `json:"delivery_id"`
			Status     string `json:"status"`
			LastError  string `json:"last_error"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(payload, &ev))
	require.Equal(t, d.ID, ev.Data.DeliveryID)
	require.Equal(t, store.DeliveryExpired, ev.Data.Status)
	require.Contains(t, ev.Data.LastError, "retention")
}

// recordingEnqueuer hands out job ids and keeps what it was given.
type recordingEnqueuer struct {
	fakeEnqueuer
	all []store.QueuedDelivery
}

func (r *recordingEnqueuer) EnqueueTx(ctx context.Context, tx pgx.Tx, qs []store.QueuedDelivery) ([]int64, error) {
	r.mu.Lock()
	r.all = append(r.all, qs...)
	r.mu.Unlock()
	return r.fakeEnqueuer.EnqueueTx(ctx, tx, qs)
}

func (r *recordingEnqueuer) queued() []store.QueuedDelivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.all)
}

// lockedWriter serialises writes to a builder shared with the test.
type lockedWriter struct {
	b  *strings.Builder
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// TestNoAttemptOutlivesItsDelivery: an attempt made after its delivery's
// interval, in the attempt partition that holds the cutoff but before
// the cutoff, goes when its delivery's partition is dropped.
func TestNoAttemptOutlivesItsDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t, 3*time.Minute, 3*time.Minute)
	ctx := context.Background()
	b.run(t, b.dbNow(t))
	b.endpoint(t, "acme", true)
	msg := b.message(t, "acme", "")
	d := msg.Deliveries[0]
	created, _ := store.IDTime(msg.ID)
	base := floorMinute(created)
	// Retried a minute later, and delivered.
	at := base.Add(time.Minute + 10*time.Second)
	require.NoError(t, b.store.RecordLedger(ctx, []store.Attempt{{
		DeliveryID: d.ID, MessageID: msg.ID, EndpointID: d.EndpointID, AttemptNumber: 2, AttemptedAt: at, Classification: "success",
	}}, []store.StatusUpdate{{DeliveryID: d.ID, Series: 1, Status: store.DeliveryDelivered, AttemptCount: 2, LastAttemptAt: &at}}))

	// The cutoff falls 30 s into the attempt's minute: its partition stays.
	rep := b.run(t, base.Add(4*time.Minute+30*time.Second))
	var droppedDeliveries bool
	for _, c := range rep.Dropped {
		droppedDeliveries = droppedDeliveries || (c.Parent == "deliveries" && c.To.Equal(base.Add(time.Minute)))
		require.False(t, c.Parent == "delivery_attempts" && c.To.After(at), "the attempt's partition stays")
	}
	require.True(t, droppedDeliveries)
	require.Zero(t, b.rows(t, "deliveries", "id", d.ID))
	require.Zero(t, b.rows(t, "delivery_attempts", "delivery_id", d.ID), "no attempt outlives its delivery")
}

// seedInterval writes perInterval messages, each with a payload, ten
// delivered deliveries and their attempts, into each of the intervals
// minutes from first: what the api and the dispatchers wrote while no
// maintainer ran. It returns the messages, deliveries and attempts
// written.
func (b *bundle) seedIntervals(t *testing.T, endpointID string, first time.Time, intervals, perInterval int) (messages, deliveries, attempts int64) {
	t.Helper()
	ctx := context.Background()
	lo, hi := store.IDBound("msg", first), store.IDBound("msg", first.Add(time.Duration(intervals)*time.Minute))
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO messages (id, tenant_id, event_type, created_at)
			SELECT 'msg_' || hookd_id_time_prefix(at) || lpad(n::text, 16, '0'), 'acme', 'order.paid', at
			FROM (SELECT $1::timestamptz + i * interval '1 minute' + interval '1 second' AS at FROM generate_series(0, $2 - 1) i) s,
				generate_series(1, $3) n`, []any{first, intervals, perInterval}},
		{`INSERT INTO message_payloads (message_id, payload) SELECT id, '{"n":1}' FROM messages WHERE id >= $1 AND id < $2`, []any{lo, hi}},
		{`INSERT INTO deliveries (id, message_id, endpoint_id, tenant_id, status, attempt_count, delivered_at, created_at, updated_at)
			SELECT 'dlv_' || substr(m.id, 5, 10) || lpad((right(m.id, 16)::bigint * 100 + k)::text, 16, '0'), m.id, $3, 'acme',
				'delivered', 1, m.created_at, m.created_at, m.created_at
			FROM messages m, generate_series(1, 10) k WHERE m.id >= $1 AND m.id < $2`, []any{lo, hi, endpointID}},
		{`INSERT INTO delivery_attempts (delivery_id, message_id, endpoint_id, attempt_number, attempted_at, duration_ms, classification)
			SELECT id, message_id, endpoint_id, 1, created_at + interval '10 ms', 5, 'success'
			FROM deliveries WHERE id >= $1 AND id < $2`, []any{"dlv_" + lo[4:], "dlv_" + hi[4:]}},
	} {
		_, err := b.db.Pool.Exec(ctx, q.sql, q.args...)
		require.NoError(t, err, q.sql)
	}
	return b.seeded(t, first, intervals)
}

// seeded counts the rows of the intervals minutes from first.
func (b *bundle) seeded(t *testing.T, first time.Time, intervals int) (messages, deliveries, attempts int64) {
	t.Helper()
	end := first.Add(time.Duration(intervals) * time.Minute)
	ctx := context.Background()
	require.NoError(t, b.db.Pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM messages m JOIN message_payloads p ON p.message_id = m.id WHERE m.id >= $1 AND m.id < $2),
			(SELECT count(*) FROM deliveries WHERE id >= $3 AND id < $4),
			(SELECT count(*) FROM delivery_attempts WHERE attempted_at >= $5 AND attempted_at < $6)`,
		store.IDBound("msg", first), store.IDBound("msg", end), store.IDBound("dlv", first), store.IDBound("dlv", end), first, end).
		Scan(&messages, &deliveries, &attempts))
	return messages, deliveries, attempts
}

// TestMaintainerRestartsAfterDowntime: the maintainer ran last 200
// one-minute intervals ago, far longer than the partitions it made ahead,
// so everything written since is in the default partitions, and writers
// keep writing there while it restarts. The restart adopts each default
// partition as the partition of the downtime's range instead of moving
// its rows an interval at a time under the table's lock: it moves none,
// loses none (the downtime's rows and every writer's read back, the
// default partitions end empty), and the intervals ahead get their
// partitions again.
func TestMaintainerRestartsAfterDowntime(t *testing.T) {
	t.Parallel()
	b := setup(t, 6*time.Hour, 6*time.Hour)
	ctx := context.Background()
	// No partition at all (the legacy ones reach the template's making).
	b.db.DropPartitions(t, true)
	now := b.dbNow(t)
	last := now.Add(-200 * time.Minute)
	b.run(t, last)
	ep := b.endpoint(t, "acme", true)
	parts, err := b.store.Partitions(ctx)
	require.NoError(t, err)
	var covered time.Time
	for _, p := range parts {
		if p.Parent == "messages" && p.To.After(covered) {
			covered = p.To
		}
	}
	require.Equal(t, floorMinute(last).Add((retention.Ahead+1)*time.Minute), covered)
	downtime := int(floorMinute(now).Sub(covered) / time.Minute)
	messages, deliveries, attempts := b.seedIntervals(t, ep.ID, covered, downtime, 10)
	require.Equal(t, int64(downtime*10), messages)
	require.Equal(t, 10*messages, deliveries)
	require.Equal(t, deliveries, attempts)

	w := b.startWriters(ctx)
	w.waitFor(t, 20)
	var rep retention.Report
	var ranAt time.Time
	for {
		ranAt = b.dbNow(t)
		rep, err = b.m.RunOnce(ctx, ranAt)
		if err == nil {
			break
		}
		// A busy machine may make a lock wait past its timeout and
		// retries: the next run tries again, as the maintainer's loop does.
		require.ErrorIs(t, err, store.ErrLockTimeout)
	}
	w.waitFor(t, w.count()+20)
	delivered := w.finish(t)

	adopted := map[string]store.PartitionChange{}
	for _, c := range rep.Created {
		require.Zero(t, c.Moved, "%s: no row moved under the table's lock", c.Name)
		if c.Adopted {
			adopted[c.Parent] = c
		}
	}
	require.Len(t, adopted, len(tables), "every table's default partition became a partition")
	for _, c := range adopted {
		require.Equal(t, covered, c.From, c.Name)
		require.True(t, c.To.After(b.dbNow(t).Add(time.Minute)), c.Name)
	}
	gotM, gotD, gotA := b.seeded(t, covered, downtime)
	require.Equal(t, [3]int64{messages, deliveries, attempts}, [3]int64{gotM, gotD, gotA}, "no row of the downtime lost")
	require.Equal(t, adopted["deliveries"].Name, b.partitionOf(t, "deliveries", "id", store.IDBound("dlv", covered.Add(time.Second))[:14]+"0000000000000101"))
	var notDelivered int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE id = ANY($1) AND status <> 'delivered'`, delivered).Scan(&notDelivered))
	require.Zero(t, notDelivered, "no writer's update went missing")
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM delivery_attempts WHERE delivery_id = ANY($1)`, delivered).Scan(&attempts))
	require.Equal(t, int64(len(delivered)), attempts)
	for table, n := range rep.Defaults {
		require.Zero(t, n, table)
	}
	// Judged at the run's clock: a busy machine may pass a minute boundary
	// before this check.
	for _, ahead := range []time.Duration{0, retention.Ahead * time.Minute} {
		at := floorMinute(ranAt).Add(ahead)
		parts, err := b.store.Partitions(ctx)
		require.NoError(t, err)
		n := 0
		for _, p := range parts {
			if !p.From.After(at) && p.To.After(at) {
				n++
			}
		}
		require.Equal(t, len(tables), n, "every table has a partition %s ahead", ahead)
	}
}

// TestFailedCreationStopsNeitherExpiryNorDrops: a partition creation that
// fails at every run (a table of its name exists) is reported, and the
// run still expires the deliveries past retention and drops the
// partitions past it.
func TestFailedCreationStopsNeitherExpiryNorDrops(t *testing.T) {
	t.Parallel()
	b := setup(t, 3*time.Minute, 3*time.Minute)
	ctx := context.Background()
	b.run(t, b.dbNow(t))
	b.endpoint(t, "acme", false)
	msg := b.message(t, "acme", "")
	require.Equal(t, store.DeliveryHeld, msg.Deliveries[0].Status)
	created, _ := store.IDTime(msg.ID)
	at := floorMinute(created).Add(4 * time.Minute)
	// The next messages partition the run at makes: its name is taken.
	blocked := "messages_p" + floorMinute(at).Add((retention.Ahead)*time.Minute).UTC().Format("20060102t150405")
	_, err := b.db.Pool.Exec(ctx, `CREATE TABLE `+blocked+` (id text)`)
	require.NoError(t, err)

	rep, err := b.m.RunOnce(ctx, at)
	require.ErrorContains(t, err, blocked)
	require.True(t, rep.Ran)
	require.Len(t, rep.Expired, 1, "the expiry pass ran")
	require.Equal(t, msg.Deliveries[0].ID, rep.Expired[0].ID)
	dropped := map[string]bool{}
	for _, c := range rep.Dropped {
		if c.To.Equal(floorMinute(created).Add(time.Minute)) {
			dropped[c.Parent] = true
		}
	}
	require.Len(t, dropped, len(tables), "the message's interval was dropped")
	var createdDeliveries bool
	for _, c := range rep.Created {
		createdDeliveries = createdDeliveries || c.Parent == "deliveries"
	}
	require.True(t, createdDeliveries, "the other tables' partitions were made")
}

// TestFailedDropKeepsItsIntervalOnly: a deliveries partition whose drop
// fails (a view reads it, so DROP TABLE refuses) keeps its interval's
// messages and payloads; the interval after it is dropped.
func TestFailedDropKeepsItsIntervalOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, 3*time.Minute, 3*time.Minute)
	ctx := context.Background()
	b.db.DropPartitions(t, true)
	now := b.dbNow(t)
	b.run(t, now)
	base := floorMinute(now)
	first := "deliveries_p" + base.Add(-time.Minute).UTC().Format("20060102t150405")
	require.True(t, b.exists(t, first))
	_, err := b.db.Pool.Exec(ctx, `CREATE VIEW hookd_test_reader AS SELECT * FROM `+first)
	require.NoError(t, err)

	// Both intervals are past retention.
	rep, err := b.m.RunOnce(ctx, base.Add(4*time.Minute))
	require.ErrorContains(t, err, first)
	require.True(t, b.exists(t, first))
	require.True(t, b.exists(t, "messages_p"+base.Add(-time.Minute).UTC().Format("20060102t150405")), "its messages stay with it")
	require.True(t, b.exists(t, "message_payloads_p"+base.Add(-time.Minute).UTC().Format("20060102t150405")))
	require.False(t, b.exists(t, "delivery_attempts_p"+base.Add(-time.Minute).UTC().Format("20060102t150405")))
	for _, table := range tables {
		require.False(t, b.exists(t, table+"_p"+base.UTC().Format("20060102t150405")), "%s of the next interval dropped", table)
	}
	require.NotEmpty(t, rep.Dropped)
}

// TestDropWithManyUnfinishedWaitsForTheNextRun: when more deliveries than
// a drop may expire under its lock turned unfinished after the expiry pass
// (a bulk retry, here 101 of them), the partition and its interval's
// messages stay for the next run, whose expiry pass makes them expired
// before the drop.
func TestDropWithManyUnfinishedWaitsForTheNextRun(t *testing.T) {
	t.Parallel()
	b := setup(t, 3*time.Minute, 3*time.Minute)
	ctx := context.Background()
	hook := &expiryHook{Store: b.store}
	cfg := retention.Config{Interval: time.Minute, Retention: 3 * time.Minute, PayloadRetention: 3 * time.Minute, HistoryRetention: time.Hour}
	m := retention.New(cfg, retention.Deps{Store: hook, Now: time.Now, Metrics: b.metrics})
	b.run(t, b.dbNow(t))
	ep := b.endpoint(t, "acme", true)
	msg := b.message(t, "acme", "")
	created, _ := store.IDTime(msg.ID)
	retire := floorMinute(created).Add(4 * time.Minute)
	_, err := b.store.EnsurePartitions(ctx, retire, time.Minute, retention.Ahead)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `
		INSERT INTO deliveries (id, message_id, endpoint_id, tenant_id, status)
		SELECT 'dlv_' || substr($1, 5, 10) || lpad(g::text, 16, '0'), $1, $2, 'acme', 'failed' FROM generate_series(1, 101) g`, msg.ID, ep.ID)
	require.NoError(t, err)
	hook.after = func() {
		_, err := b.db.Pool.Exec(ctx, `UPDATE deliveries SET status = 'pending' WHERE message_id = $1 AND status = 'failed'`, msg.ID)
		require.NoError(t, err)
	}
	deliveriesPart := b.partitionOf(t, "deliveries", "id", msg.Deliveries[0].ID)
	messagesPart := b.partitionOf(t, "messages", "id", msg.ID)

	rep, err := m.RunOnce(ctx, retire)
	require.ErrorIs(t, err, store.ErrUnfinishedDeliveries)
	require.True(t, b.exists(t, deliveriesPart))
	require.True(t, b.exists(t, messagesPart), "its messages stay with it")
	require.Len(t, rep.Expired, 1, "the message's own delivery, by the expiry pass")
	var pending int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE message_id = $1 AND status = 'pending'`, msg.ID).Scan(&pending))
	require.Equal(t, 101, pending)

	rep, err = m.RunOnce(ctx, retire)
	require.NoError(t, err)
	require.Len(t, rep.Expired, 101)
	require.False(t, b.exists(t, deliveriesPart))
	require.False(t, b.exists(t, messagesPart))
	require.Equal(t, 102.0, testutil.ToFloat64(b.expired.WithLabelValues("retention")))
}
