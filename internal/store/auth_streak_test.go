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

// statementRecorder keeps the text of the statements a pool sends.
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

// sent returns the statements sent since the last call that contain s.
func (r *statementRecorder) sent(s string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, q := range r.sql {
		if strings.Contains(q, s) {
			n++
		}
	}
	r.sql = nil
	return n
}

// TestLedgerResetsOnlyRunningAuthStreaks: a batch of answers other than
// 401/403 resets its endpoints' auth-failure streaks, and one whose
// endpoints have no streak running sends no reset at all (the ledger's
// read of its deliveries' claims tells which have one): the reset was a
// statement at every commit that almost never found a row.
func TestLedgerResetsOnlyRunningAuthStreaks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	rec := &statementRecorder{}
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = rec
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := store.New(pool, nil)
	healthy, err := s.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/healthy", Secret: testSecret})
	require.NoError(t, err)
	walled, err := s.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/walled", Secret: testSecret})
	require.NoError(t, err)
	rule := store.AuthRule{After: 10, MinDuration: time.Hour}

	// record logs an attempt of the message's delivery to endpoint.
	record := func(endpoint string, classification string, code int) {
		t.Helper()
		m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, &fakeEnqueuer{next: 1})
		require.NoError(t, err)
		var d store.Delivery
		for _, x := range m.Deliveries {
			if x.EndpointID == endpoint {
				d = x
			}
		}
		require.NotEmpty(t, d.ID)
		at := time.Now()
		status := store.DeliveryDelivered
		if code >= 400 {
			status = store.DeliveryPending
		}
		rec.sent("")
		_, err = s.RecordBatch(ctx, store.LedgerBatch{
			Attempts: []store.Attempt{{DeliveryID: d.ID, MessageID: m.ID, EndpointID: endpoint, AttemptNumber: 1,
				AttemptedAt: at, StatusCode: &code, Classification: classification}},
			Updates:   []store.StatusUpdate{{DeliveryID: d.ID, Series: 1, Status: status, AttemptCount: 1, LastAttemptAt: &at, Claim: store.Claim{JobID: 1, Attempt: 1}}},
			AuthRules: map[string]store.AuthRule{endpoint: rule},
		}, nil)
		require.NoError(t, err)
	}
	failures := func(endpoint string) int {
		var n int
		err := db.Pool.QueryRow(ctx, `SELECT coalesce((SELECT failures FROM auth_streaks WHERE endpoint_id = $1), 0)`, endpoint).Scan(&n)
		require.NoError(t, err)
		return n
	}

	record(walled.ID, "auth_failure", 401)
	record(walled.ID, "auth_failure", 403)
	require.Equal(t, 2, failures(walled.ID))

	record(healthy.ID, "success", 200)
	require.Zero(t, rec.sent("UPDATE auth_streaks"), "a batch of endpoints without a streak sends no reset")
	require.Equal(t, 2, failures(walled.ID), "another endpoint's streak is left alone")

	record(walled.ID, "success", 200)
	require.Equal(t, 1, rec.sent("UPDATE auth_streaks"), "the running streak is reset")
	require.Zero(t, failures(walled.ID))

	record(walled.ID, "failure", 500)
	require.Zero(t, rec.sent("UPDATE auth_streaks"), "a streak reset is not reset again")
}
