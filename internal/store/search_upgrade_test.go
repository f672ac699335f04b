package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestUpgradeAddsSearchIndexes: a database at the schema before the
// search indexes, holding messages and deliveries in their partitions, is
// migrated with every row kept, the indexes built on every partition, and
// the searches finding the rows written before.
func TestUpgradeAddsSearchIndexes(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	resetTo(t, db, 17)
	s := store.New(db.Pool, nil)
	// The endpoint and messages as that schema stored them: CreateEndpoint
	// and CreateMessage use columns later migrations add.
	e := store.Endpoint{ID: createEndpointV10(t, db, "acme", "https://example.com/a", testSecret, "")}
	var ids []string
	for range 3 {
		m, _ := createMessageV7(t, db, "acme", "invoice.paid", `{}`, e.ID)
		ids = append(ids, m)
	}
	_, err := db.Pool.Exec(ctx, `UPDATE deliveries SET status = 'failed' WHERE message_id = $1`, ids[1])
	require.NoError(t, err)

	require.NoError(t, store.Migrate(ctx, db.Pool, nil))
	for _, idx := range []string{"messages_event_type_idx", "deliveries_tenant_id_idx", "deliveries_final_idx"} {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `
			SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			WHERE i.inhparent = $1::regclass`, idx).Scan(&n))
		require.Positive(t, n, "%s has no partition index", idx)
	}
	ms, err := s.SearchMessages(ctx, store.MessageSearch{Tenants: store.AllTenants(), EventType: "invoice.paid", Limit: 10})
	require.NoError(t, err)
	require.Len(t, ms, 3)
	require.Equal(t, ids[2], ms[0].ID, "newest first")
	ds, err := s.SearchDeliveries(ctx, store.DeliverySearch{Tenants: store.OneTenant("acme"), Statuses: []string{store.DeliveryFailed}, Limit: 10})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, ids[1], ds[0].MessageID)
	require.Equal(t, e.ID, ds[0].EndpointID)
}
