package delivery_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestUnparkerMovesAFIFOQueueOneAtATime: a FIFO endpoint's queue is never
// released at a pace: the unparker gives its head (here parked by the
// breaker) its job, and nothing more while the head is not final; a head
// made final by something other than the ledger (retention expiring it)
// lets the next go at the unparker's next pass.
func TestUnparkerMovesAFIFOQueueOneAtATime(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	st := store.New(db.Pool, nil)
	ctx := context.Background()
	ep, err := st.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		Ordering: store.OrderingFIFO})
	require.NoError(t, err)
	enq := &countingEnqueuer{}
	var first store.Delivery
	for i := range 5 {
		m, _, err := st.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, enq)
		require.NoError(t, err)
		if i == 0 {
			first = m.Deliveries[0]
		}
	}
	until := time.Now().Add(time.Minute)
	require.NoError(t, st.RecordLedger(ctx, nil, []store.StatusUpdate{{DeliveryID: first.ID, Series: 1, Status: store.DeliveryWaiting,
		BreakerOpenUntil: &until, Park: true, JobID: *first.JobID, Ordered: true}}))
	sending := func() (ids []string) {
		rows, err := db.Pool.Query(ctx, `SELECT id FROM deliveries WHERE endpoint_id = $1 AND status = 'pending' ORDER BY created_at`, ep.ID)
		require.NoError(t, err)
		for rows.Next() {
			var id string
			require.NoError(t, rows.Scan(&id))
			ids = append(ids, id)
		}
		require.NoError(t, rows.Err())
		return ids
	}

	u := delivery.NewUnparker(st, enq, time.Minute, nil, nil)
	u.SetPace(delivery.UnparkPace{Start: 10, Max: 40, Interval: time.Second})
	u.Pass(ctx, nil)
	require.Equal(t, []string{first.ID}, sending(), "the head alone, not a window of the queue")
	require.Empty(t, u.Releasing(), "no paced release")
	u.Pass(ctx, nil)
	require.Equal(t, []string{first.ID}, sending())

	_, err = db.Pool.Exec(ctx, `UPDATE deliveries SET status = 'expired' WHERE id = $1`, first.ID)
	require.NoError(t, err)
	u.Pass(ctx, nil)
	got := sending()
	require.Len(t, got, 1, "the next one, alone")
	require.NotEqual(t, first.ID, got[0])
}
