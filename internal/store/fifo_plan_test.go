package store_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
)

// TestFIFOHeadIsFoundWithoutReadingTheQueue: finding a FIFO queue's head
// reads a few index entries, not the queue: with 20,000 deliveries waiting
// in line and 20,000 delivered, the plan's scans of deliveries return a
// handful of rows, and a new message to the endpoint reads as few.
func TestFIFOHeadIsFoundWithoutReadingTheQueue(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	ep := b.fifoEndpoint(t, store.ExhaustedSkip)
	m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`1`)}, b.enq)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `
		INSERT INTO deliveries (id, message_id, endpoint_id, tenant_id, status, park_reason, created_at)
		SELECT $1 || lpad(g::text, 16, '0'), $2, $3, 'acme',
			CASE WHEN g % 2 = 0 THEN 'waiting' ELSE 'delivered' END,
			CASE WHEN g % 2 = 0 THEN 'fifo' END,
			now() + g * interval '1 millisecond'
		FROM generate_series(1, 40000) g`, "dlv_"+m.ID[len("msg_"):len("msg_")+10], m.ID, ep.ID)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `ANALYZE deliveries`)
	require.NoError(t, err)

	var raw string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+store.QueueHeadSQL, []string{ep.ID}).Scan(&raw))
	require.Less(t, rowsRead(t, raw, "deliveries"), 50.0, raw)

	// A message to the endpoint stamps its delivery behind the queue.
	m2, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`2`)}, b.enq)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryWaiting, m2.Deliveries[0].Status)
}

// rowsRead sums the rows an EXPLAIN ANALYZE plan's scans of the tables
// named prefix read, filtered out ones included.
func rowsRead(t *testing.T, raw, prefix string) float64 {
	t.Helper()
	var plans []map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw), &plans))
	var read float64
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if r, ok := n["Relation Name"].(string); ok && strings.HasPrefix(r, prefix) {
			rows, _ := n["Actual Rows"].(float64)
			removed, _ := n["Rows Removed by Filter"].(float64)
			loops, _ := n["Actual Loops"].(float64)
			read += (rows + removed) * max(loops, 1)
		}
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			walk(c.(map[string]any))
		}
	}
	walk(plans[0]["Plan"].(map[string]any))
	return read
}
