package store_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// opsTypes returns the event types of the operational tenant's messages,
// oldest first.
func opsTypes(t *testing.T, db *storetest.DB) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT event_type FROM messages WHERE tenant_id = $1 ORDER BY created_at, id`, store.OperationalTenant)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// attempted is a status update after an attempt.
func attempted(id string, series int, status string, attempts int) store.StatusUpdate {
	now := time.Now()
	msg := "HTTP 500"
	return store.StatusUpdate{DeliveryID: id, Series: series, Status: status, AttemptCount: attempts, LastAttemptAt: &now, LastError: &msg}
}

// TestUpgradeAddsDeliveryFailureTimes: a database at the schema before
// migration 0023, holding a delivery that had already failed and one still
// pending, is migrated with its rows kept; the delivery that failed before
// the upgrade emits nothing when a retry delivers it (the upgrade cannot
// know it failed), while the pending one, failing and then delivered after
// the upgrade, emits delivery.failed and then delivery.recovered, once each.
func TestUpgradeAddsDeliveryFailureTimes(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	resetTo(t, db, 22)
	enq := &fakeEnqueuer{next: 1}
	ep := createEndpointV10(t, db, "acme", "https://example.com/a", testSecret, "")
	var dlvs []string
	for range 2 {
		_, d := createMessageV7(t, db, "acme", "invoice.paid", `{}`, ep)
		dlvs = append(dlvs, d[0])
	}
	_, err := db.Pool.Exec(ctx, `UPDATE deliveries SET status = 'failed', attempt_count = 3 WHERE id = $1`, dlvs[0])
	require.NoError(t, err)

	require.NoError(t, store.Migrate(ctx, db.Pool, nil))
	s := store.New(db.Pool, nil, store.WithOperationalEvents(store.OperationalEventsConfig{Enqueuer: enq}))
	_, err = s.CreateOperationalEndpoint(ctx, store.NewOperationalEndpoint{URL: "https://ops.example/", Secret: testSecret, EventTypes: []string{"delivery.*"}})
	require.NoError(t, err)
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND failed_at IS NULL AND recovered_at IS NULL`, ep).Scan(&n))
	require.Equal(t, 2, n, "every delivery kept, with no failure time")

	// The delivery that failed before the upgrade: retried and delivered.
	_, err = s.RetryDelivery(ctx, dlvs[0], enq)
	require.NoError(t, err)
	require.NoError(t, s.RecordLedger(ctx, nil, []store.StatusUpdate{attempted(dlvs[0], 2, store.DeliveryDelivered, 4)}))
	require.Empty(t, opsTypes(t, db))

	// The pending one fails after the upgrade, then a retry delivers it.
	require.NoError(t, s.RecordLedger(ctx, nil, []store.StatusUpdate{attempted(dlvs[1], 1, store.DeliveryFailed, 3)}))
	// The same failure written again is not a new one.
	require.NoError(t, s.RecordLedger(ctx, nil, []store.StatusUpdate{attempted(dlvs[1], 1, store.DeliveryFailed, 3)}))
	require.Equal(t, []string{store.OpDeliveryFailed}, opsTypes(t, db))
	_, err = s.RetryDelivery(ctx, dlvs[1], enq)
	require.NoError(t, err)
	require.NoError(t, s.RecordLedger(ctx, nil, []store.StatusUpdate{attempted(dlvs[1], 2, store.DeliveryDelivered, 4)}))
	require.Equal(t, []string{store.OpDeliveryFailed, store.OpDeliveryRecovered}, opsTypes(t, db))
}

// TestOperationalEventsFollowTheCache: with a cache of the operational
// endpoints, a process emits nothing while it knows of none, and once told
// (InvalidateOperational, on an endpoint notification) emits to the new
// one; an event nobody subscribes to stores no message.
func TestOperationalEventsFollowTheCache(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	enq := &fakeEnqueuer{next: 1}
	s := store.New(db.Pool, nil, store.WithOperationalEvents(store.OperationalEventsConfig{Enqueuer: enq, CacheTTL: time.Hour}))
	other := store.New(db.Pool, nil, store.WithOperationalEvents(store.OperationalEventsConfig{Enqueuer: enq}))
	e, err := s.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/a", Secret: testSecret})
	require.NoError(t, err)
	send := func() string {
		m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "invoice.paid", Payload: json.RawMessage(`{}`)}, enq)
		require.NoError(t, err)
		return m.Deliveries[0].ID
	}
	fail := func(id string) {
		require.NoError(t, s.RecordLedger(ctx, nil, []store.StatusUpdate{attempted(id, 1, store.DeliveryFailed, 3)}))
	}
	fail(send())
	require.Empty(t, opsTypes(t, db), "no operational endpoint")

	// Another process registers one: this one's cache does not know yet.
	_, err = other.CreateOperationalEndpoint(ctx, store.NewOperationalEndpoint{URL: "https://ops.example/", Secret: testSecret, EventTypes: []string{"breaker.*"}})
	require.NoError(t, err)
	s.InvalidateOperational()
	fail(send())
	require.Empty(t, opsTypes(t, db), "delivery.failed has no subscriber")

	_, err = other.CreateOperationalEndpoint(ctx, store.NewOperationalEndpoint{URL: "https://ops.example/all", Secret: testSecret})
	require.NoError(t, err)
	fail(send())
	require.Empty(t, opsTypes(t, db), "the cache is kept until invalidated")
	s.InvalidateOperational()
	fail(send())
	require.Equal(t, []string{store.OpDeliveryFailed}, opsTypes(t, db))

	// A tenant's change is reported; nothing about operational endpoints.
	_, err = s.UpdateEndpoint(ctx, e.ID, store.EndpointPatch{Description: ptr("billing")})
	require.NoError(t, err)
	require.Equal(t, []string{store.OpDeliveryFailed, store.OpEndpointUpdated}, opsTypes(t, db))
}

func ptr[T any](v T) *T { return &v }

// recordLedgerBefore0023 writes attempts and status updates as the ledger
// did before migration 0023 (whose UPDATE sets failed_at and
// recovered_at): upgrade tests from an older schema populate it with this.
func recordLedgerBefore0023(t *testing.T, db *storetest.DB, attempts []store.Attempt, updates []store.StatusUpdate) {
	t.Helper()
	ctx := context.Background()
	for _, a := range attempts {
		var ec *string
		if a.ErrorClass != "" {
			ec = &a.ErrorClass
		}
		_, err := db.Pool.Exec(ctx, `
			INSERT INTO delivery_attempts (delivery_id, message_id, endpoint_id, attempt_number, attempted_at, duration_ms,
				status_code, error_class, classification, response_excerpt, trial)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
			a.DeliveryID, a.MessageID, a.EndpointID, a.AttemptNumber, a.AttemptedAt, float64(a.Duration)/float64(time.Millisecond),
			a.StatusCode, ec, a.Classification, a.ResponseExcerpt, a.Trial)
		require.NoError(t, err)
	}
	for _, u := range updates {
		_, err := db.Pool.Exec(ctx, `
			UPDATE deliveries SET status = $2, attempt_count = $3, last_attempt_at = coalesce($4, last_attempt_at),
				last_status_code = $5, last_error = $6,
				delivered_at = CASE WHEN $2 = 'delivered' THEN coalesce($4, now()) ELSE delivered_at END,
				job_id = CASE WHEN $7 THEN NULL ELSE job_id END, updated_at = now()
			WHERE id = $1 AND series = $8`,
			u.DeliveryID, u.Status, u.AttemptCount, u.LastAttemptAt, u.LastStatusCode, u.LastError, u.Park && u.Status == store.DeliveryWaiting, u.Series)
		require.NoError(t, err)
	}
}

// statementCounter counts the statements a pool sends.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestLedgerFlushAddsNoStatementWithoutOperationalEndpoints: once a
// dispatcher's store knows no operational endpoint exists, a ledger flush
// that fails deliveries (an event each, were anyone listening) sends
// exactly the statements it sends with operational events off.
func TestLedgerFlushAddsNoStatementWithoutOperationalEndpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	statements := func(ops bool) int64 {
		db := storetest.New(t)
		counter := &statementCounter{}
		cfg, err := pgxpool.ParseConfig(db.URL)
		require.NoError(t, err)
		cfg.ConnConfig.Tracer = counter
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		enq := &fakeEnqueuer{next: 1}
		var opts []store.Option
		if ops {
			opts = append(opts, store.WithOperationalEvents(store.OperationalEventsConfig{Enqueuer: enq, CacheTTL: time.Hour}))
		}
		s := store.New(pool, nil, opts...)
		_, err = s.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/a", Secret: testSecret})
		require.NoError(t, err)
		var ids []string
		for range 6 {
			m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "invoice.paid", Payload: json.RawMessage(`{}`)}, enq)
			require.NoError(t, err)
			ids = append(ids, m.Deliveries[0].ID)
		}
		// The first flush with an event loads the (empty) list.
		require.NoError(t, s.RecordLedger(ctx, nil, []store.StatusUpdate{attempted(ids[0], 1, store.DeliveryFailed, 3)}))
		before := counter.n.Load()
		for _, id := range ids[1:] {
			require.NoError(t, s.RecordLedger(ctx, nil, []store.StatusUpdate{attempted(id, 1, store.DeliveryFailed, 3)}))
		}
		require.Empty(t, opsTypes(t, db))
		return counter.n.Load() - before
	}
	off, on := statements(false), statements(true)
	require.Positive(t, off)
	require.Equal(t, off, on)
}
