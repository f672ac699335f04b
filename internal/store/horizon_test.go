package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestHorizonSeesALongTransaction: a transaction held open on the
// database (as pg_dump holds one) shows as the oldest transaction and a
// snapshot age, and the dead rows of a hot table, its partitions summed,
// are counted while it keeps them.
func TestHorizonSeesALongTransaction(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	s := store.New(db.Pool, nil)

	h, err := s.Horizon(ctx)
	require.NoError(t, err)
	require.Len(t, h.DeadTuples, len(store.HorizonTables), "every table has its figure")

	// A repeatable-read transaction that took its snapshot, left open.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`)
	require.NoError(t, err)
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM endpoints`).Scan(&n))
	var started time.Time
	require.NoError(t, tx.QueryRow(ctx, `SELECT now()`).Scan(&started))

	// Deliveries written and deleted after it began stay dead.
	_, err = s.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	require.NoError(t, err)
	for range 50 {
		_, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, &fakeEnqueuer{})
		require.NoError(t, err)
	}
	_, err = db.Pool.Exec(ctx, `DELETE FROM deliveries`)
	require.NoError(t, err)
	// Vacuum may not remove them while the snapshot lives.
	_, err = db.Pool.Exec(ctx, `VACUUM deliveries`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		h, err = s.Horizon(ctx)
		require.NoError(t, err)
		return h.DeadTuples["deliveries"] >= 50
	}, 30*time.Second, 50*time.Millisecond, "the deleted rows are counted dead, vacuumed or not")
	var dbNow time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&dbNow))
	require.GreaterOrEqual(t, h.OldestTransaction, dbNow.Sub(started)-time.Second, "the open transaction is the oldest")
	require.Positive(t, h.SnapshotAge, "its snapshot holds back the horizon")
}
