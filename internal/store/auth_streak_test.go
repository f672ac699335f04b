package store_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// statementRecorder keeps the text of the statements a pool sends, a
// batch's each.
type statementRecorder struct {
	mu  sync.Mutex
	sql []string
}

func (r *statementRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	r.sql = append(r.sql, d.SQL)
	r.mu.Unlock()
	return ctx
}

func (r *statementRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *statementRecorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (r *statementRecorder) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.mu.Lock()
	r.sql = append(r.sql, d.SQL)
	r.mu.Unlock()
}

func (r *statementRecorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// take returns the statements recorded since the last take.
func (r *statementRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	sql := r.sql
	r.sql = nil
	return sql
}

// recordedStore is a store on db whose statements rec records.
func recordedStore(t *testing.T, db *storetest.DB) (*store.Store, *statementRecorder) {
	t.Helper()
	rec := &statementRecorder{}
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = rec
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return store.New(pool, nil), rec
}

// TestLedgerWriteOfHealthyEndpointsIsOneStatement: a batch whose answers
// need nothing beyond its own write (no 401/403, no FIFO queue, no
// operational endpoint) is one statement in its own transaction: no
// BEGIN, no COMMIT, no statement of its own for the auth-failure streaks
// it resets. A batch with an auth failure runs in a transaction, and the
// streaks end as the answers say, in order, whichever path wrote them.
func TestLedgerWriteOfHealthyEndpointsIsOneStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	s, rec := recordedStore(t, db)
	healthy, err := s.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/healthy", Secret: testSecret})
	require.NoError(t, err)
	walled, err := s.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/walled", Secret: testSecret})
	require.NoError(t, err)
	rule := store.AuthRule{After: 10, MinDuration: time.Hour}

	// answer is one attempt of a new message's delivery to endpoint; a
	// run that lost its delivery has a later claim on it.
	type answer struct {
		endpoint       string
		classification string
		code           int
		lost           bool
	}
	// record writes the answers in one batch and returns the statements
	// it sent.
	record := func(answers ...answer) []string {
		t.Helper()
		var b store.LedgerBatch
		b.AuthRules = map[string]store.AuthRule{}
		for _, a := range answers {
			m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, &fakeEnqueuer{next: 1})
			require.NoError(t, err)
			var d store.Delivery
			for _, x := range m.Deliveries {
				if x.EndpointID == a.endpoint {
					d = x
				}
			}
			require.NotEmpty(t, d.ID)
			mine := store.Claim{JobID: 7, Attempt: 1}
			if a.lost {
				_, err := db.Pool.Exec(ctx, `UPDATE deliveries SET claim_job = 7, claim_attempt = 2 WHERE id = $1`, d.ID)
				require.NoError(t, err)
			}
			at := time.Now()
			code := a.code
			status := store.DeliveryDelivered
			if code >= 400 {
				status = store.DeliveryPending
			}
			b.Attempts = append(b.Attempts, store.Attempt{DeliveryID: d.ID, MessageID: m.ID, EndpointID: a.endpoint, AttemptNumber: 1,
				AttemptedAt: at, StatusCode: &code, Classification: a.classification})
			b.Updates = append(b.Updates, store.StatusUpdate{DeliveryID: d.ID, Series: 1, Status: status, AttemptCount: 1, LastAttemptAt: &at, Claim: mine})
			b.AuthRules[a.endpoint] = rule
		}
		rec.take()
		_, err := s.RecordBatch(ctx, b, nil)
		require.NoError(t, err)
		return rec.take()
	}
	failures := func(endpoint string) int {
		var n int
		err := db.Pool.QueryRow(ctx, `SELECT coalesce((SELECT failures FROM auth_streaks WHERE endpoint_id = $1), 0)`, endpoint).Scan(&n)
		require.NoError(t, err)
		return n
	}
	logged := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM delivery_attempts`).Scan(&n))
		return n
	}

	sent := record(answer{walled.ID, "auth_failure", 401, false}, answer{walled.ID, "auth_failure", 403, false})
	require.Equal(t, "begin", strings.ToLower(sent[0]), "a batch with auth failures runs in a transaction")
	require.Equal(t, 2, failures(walled.ID))

	sent = record(answer{healthy.ID, "success", 200, false}, answer{healthy.ID, "failure", 500, false})
	require.Len(t, sent, 1, "a batch of healthy endpoints: %q", sent)
	require.Equal(t, 2, failures(walled.ID), "another endpoint's streak is left alone")
	require.Equal(t, 4, logged())

	// A success whose run lost its delivery is not logged and does not
	// end the streak.
	sent = record(answer{walled.ID, "success", 200, true})
	require.Len(t, sent, 1)
	require.Equal(t, 2, failures(walled.ID))
	require.Equal(t, 4, logged(), "the lost run's attempt is not logged")

	sent = record(answer{walled.ID, "success", 200, false})
	require.Len(t, sent, 1)
	require.Zero(t, failures(walled.ID), "a logged success ends the streak")

	// In one batch: a success, then auth failures: the streak restarts
	// at the failures; a failure then a lost success: it goes on.
	record(answer{walled.ID, "auth_failure", 401, false})
	record(answer{walled.ID, "success", 200, false}, answer{walled.ID, "auth_failure", 401, false}, answer{walled.ID, "auth_failure", 401, false})
	require.Equal(t, 2, failures(walled.ID))
	record(answer{walled.ID, "auth_failure", 401, false}, answer{walled.ID, "success", 200, true})
	require.Equal(t, 3, failures(walled.ID))
	record(answer{walled.ID, "success", 200, false}, answer{walled.ID, "auth_failure", 401, true})
	require.Zero(t, failures(walled.ID), "the lost auth failure does not count")
}
