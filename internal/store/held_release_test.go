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

// heldDeliveries sends n messages to a disabled endpoint of acme and returns
// their deliveries' ids, oldest first: each is held.
func (b *testBundle) heldDeliveries(t *testing.T, endpointID string, n int) []string {
	t.Helper()
	ctx := context.Background()
	reason := "manual"
	_, err := b.store.SetEndpointStatus(ctx, endpointID, store.EndpointDisabled, &reason)
	require.NoError(t, err)
	var ids []string
	for range n {
		m, _, err := b.store.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{}`)}, b.enq)
		require.NoError(t, err)
		require.Equal(t, store.DeliveryHeld, m.Deliveries[0].Status)
		ids = append(ids, m.Deliveries[0].ID)
	}
	return ids
}

func (b *testBundle) statusCount(t *testing.T, endpointID, status string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND status = $2`, endpointID, status).Scan(&n))
	return n
}

// TestEnableLeavesHeldDeliveriesToTheUnparker: enabling an endpoint queues
// none of its held deliveries and answers with how many there are; they
// are then listed for release and released oldest first by ReleaseParked,
// only while the endpoint is enabled, each once, and the release stamp is
// cleared once nothing is left (not before its linger, unless the endpoint
// is disabled again).
func TestEnableLeavesHeldDeliveriesToTheUnparker(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	ids := b.heldDeliveries(t, e.ID, 5)

	calls := b.enq.callCount()
	got, held, err := s.EnableEndpoint(ctx, e.ID, "alice")
	require.NoError(t, err)
	require.Equal(t, store.EndpointEnabled, got.Status)
	require.Equal(t, 5, held, "the count to release")
	require.Equal(t, calls, b.enq.callCount(), "the enable queues no job")
	require.Equal(t, 5, b.statusCount(t, e.ID, store.DeliveryHeld), "the enable touches no delivery")
	var details map[string]any
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT details FROM endpoint_events WHERE endpoint_id = $1 AND kind = 'enabled'`, e.ID).Scan(&details))
	require.EqualValues(t, 5, details["released"])

	list, err := s.ParkedEndpoints(ctx, nil)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, e.ID, list[0].EndpointID)
	require.Equal(t, 5, list[0].Held)
	require.Zero(t, list[0].Parked)
	require.True(t, list[0].ReleasingHeld)
	require.Equal(t, 5, list[0].Backlog())

	before := len(b.enq.queued)
	released, err := s.ReleaseParked(ctx, e.ID, 2, b.enq)
	require.NoError(t, err)
	require.Len(t, released, 2)
	require.Equal(t, ids[0], b.enq.queued[before].ID, "oldest first")
	require.Equal(t, ids[1], b.enq.queued[before+1].ID)
	require.Equal(t, 3, b.statusCount(t, e.ID, store.DeliveryHeld))

	// Disabled again: the rest stay held, and the stamp goes.
	reason := "manual"
	_, err = s.SetEndpointStatus(ctx, e.ID, store.EndpointDisabled, &reason)
	require.NoError(t, err)
	released, err = s.ReleaseParked(ctx, e.ID, 10, b.enq)
	require.NoError(t, err)
	require.Empty(t, released, "nothing held is released while the endpoint is disabled")
	list, err = s.ParkedEndpoints(ctx, nil)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Zero(t, list[0].Backlog())
	cleared, err := s.EndHeldRelease(ctx, e.ID, time.Hour)
	require.NoError(t, err)
	require.True(t, cleared, "a disabled endpoint has nothing to release")

	_, held, err = s.EnableEndpoint(ctx, e.ID, "alice")
	require.NoError(t, err)
	require.Equal(t, 3, held)
	released, err = s.ReleaseParked(ctx, e.ID, 10, b.enq)
	require.NoError(t, err)
	require.Len(t, released, 3)
	require.Zero(t, b.statusCount(t, e.ID, store.DeliveryHeld))
	require.Len(t, b.enq.queued, before+5, "each held delivery queued once")
	seen := map[string]bool{}
	for _, d := range b.enq.queued[before:] {
		require.False(t, seen[d.ID], "queued twice: %s", d.ID)
		seen[d.ID] = true
	}

	cleared, err = s.EndHeldRelease(ctx, e.ID, time.Hour)
	require.NoError(t, err)
	require.False(t, cleared, "within its linger the stamp stays")
	cleared, err = s.EndHeldRelease(ctx, e.ID, 0)
	require.NoError(t, err)
	require.True(t, cleared)
	list, err = s.ParkedEndpoints(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, list, "nothing left to release")
}

// TestUpgradeStampsEnabledEndpointsWithHeldDeliveries: a database of the
// schema before release stamps, with held deliveries of a disabled
// endpoint and a stray held delivery of an enabled one, migrates; the
// enabled endpoint's is listed for release, and enabling the disabled one
// lists its own.
func TestUpgradeStampsEnabledEndpointsWithHeldDeliveries(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	resetTo(t, db, 25)
	_, err := db.Pool.Exec(ctx, `
		INSERT INTO endpoints (id, tenant_id, url, secret, status) VALUES
			('ep_on', 'acme', 'https://example.com/on', 'whsec_x', 'enabled'),
			('ep_off', 'acme', 'https://example.com/off', 'whsec_x', 'disabled');
		INSERT INTO breaker_states (endpoint_id) VALUES ('ep_on'), ('ep_off');
		INSERT INTO messages (id, tenant_id, event_type) VALUES ('msg_a', 'acme', 'a');
		INSERT INTO deliveries (id, message_id, endpoint_id, tenant_id, status) VALUES
			('dlv_a1', 'msg_a', 'ep_on', 'acme', 'held'),
			('dlv_a2', 'msg_a', 'ep_off', 'acme', 'held'),
			('dlv_a3', 'msg_a', 'ep_off', 'acme', 'held')`)
	require.NoError(t, err)

	require.NoError(t, store.Migrate(ctx, db.Pool, nil))
	s := store.New(db.Pool, nil)
	list, err := s.ParkedEndpoints(ctx, nil)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "ep_on", list[0].EndpointID)
	require.Equal(t, 1, list[0].Held)

	_, held, err := s.EnableEndpoint(ctx, "ep_off", "alice")
	require.NoError(t, err)
	require.Equal(t, 2, held)
	list, err = s.ParkedEndpoints(ctx, []string{"ep_off"})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, 2, list[0].Held)
}
