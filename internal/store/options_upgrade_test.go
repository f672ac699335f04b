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

// TestUpgradeAddsEndpointDeliveryOptions: a database at the schema before
// the endpoint delivery options, holding an endpoint, a message with its
// delivery and an attempt, is migrated with everything kept: the endpoint
// reads with the default options, the old attempt with no timeout, a new
// attempt records its timeout, and the endpoint can become FIFO.
func TestUpgradeAddsEndpointDeliveryOptions(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	resetTo(t, db, 25)
	// The rows as that schema's statements wrote them.
	epID := createEndpointV10(t, db, "acme", "https://example.com/a", testSecret, "")
	msgID, dlvs := createMessageV7(t, db, "acme", "invoice.paid", `{"amount": 5}`, epID)
	dlvID := dlvs[0]
	_, err := db.Pool.Exec(ctx, `
		INSERT INTO delivery_attempts (delivery_id, message_id, endpoint_id, attempt_number, attempted_at, duration_ms, status_code, classification)
		VALUES ($1, $2, $3, 1, now(), 12.5, 503, 'failure')`, dlvID, msgID, epID)
	require.NoError(t, err)

	require.NoError(t, store.Migrate(ctx, db.Pool, nil))
	s := store.New(db.Pool, nil)
	e, err := s.GetEndpoint(ctx, epID)
	require.NoError(t, err)
	require.Equal(t, store.OrderingUnordered, e.Ordering)
	require.Equal(t, store.ExhaustedSkip, e.OnExhausted)
	require.Nil(t, e.Filter)
	require.Nil(t, e.RetrySchedule)
	require.Zero(t, e.Timeout)
	as, err := s.ListAttempts(ctx, store.AttemptFilter{DeliveryID: dlvID, Limit: 10})
	require.NoError(t, err)
	require.Len(t, as, 1)
	require.Zero(t, as[0].Timeout, "an attempt logged before has no timeout")

	at := time.Now()
	_, err = s.RecordBatch(ctx, store.LedgerBatch{
		Attempts: []store.Attempt{{DeliveryID: dlvID, MessageID: msgID, EndpointID: epID, AttemptNumber: 2, AttemptedAt: at,
			Duration: time.Millisecond, Classification: "success", Timeout: 15 * time.Second}},
		Updates: []store.StatusUpdate{{DeliveryID: dlvID, Series: 1, Status: store.DeliveryDelivered, AttemptCount: 2, LastAttemptAt: &at}},
	}, nil)
	require.NoError(t, err)
	as, err = s.ListAttempts(ctx, store.AttemptFilter{DeliveryID: dlvID, Limit: 10})
	require.NoError(t, err)
	require.Len(t, as, 2)
	require.Equal(t, 15*time.Second, as[0].Timeout)

	fifo := store.OrderingFIFO
	_, err = s.UpdateEndpoint(ctx, epID, store.EndpointPatch{Ordering: &fifo})
	require.NoError(t, err)
	m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "invoice.paid", Payload: json.RawMessage(`{}`)}, &fakeEnqueuer{})
	require.NoError(t, err)
	require.Len(t, m.Deliveries, 1)
	require.NotNil(t, m.Deliveries[0].JobID, "the queue is idle: the new delivery is its head")
}
