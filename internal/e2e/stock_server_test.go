package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store"
)

// TestFleetOnAStockServer: four dispatchers and an api with their default
// pools against a server with PostgreSQL's stock max_connections (100),
// 1,000 endpoints of 100 tenants: every delivery arrives exactly once,
// and no process met a refused connection or failed to record an
// attempt it sent.
func TestFleetOnAStockServer(t *testing.T) {
	t.Parallel()
	cluster := StartCluster(t, "max_connections = 100")
	db := cluster.NewDatabase(t, "hookd")
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}})
	const tenants, perTenant, messages = 100, 10, 600
	st := store.New(db.Pool, nil)
	var paths []string
	for i := range tenants * perTenant {
		path := fmt.Sprintf("/t%d/e%d", i%tenants, i)
		_, err := st.CreateEndpoint(context.Background(), store.Endpoint{TenantID: fmt.Sprintf("tenant-%d", i%tenants), URL: rc.URL(path), Secret: testSecret})
		require.NoError(t, err)
		paths = append(paths, path)
	}
	defaults := map[string]string{"DB_MAX_CONNS": "0"}
	api := StartAPI(t, db.URL, defaults)
	fleet := StartDispatchers(t, db.URL, defaults, "dispatcher-1", "dispatcher-2", "dispatcher-3", "dispatcher-4")

	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < messages; i += 8 {
				m := api.SendMessage(t, fmt.Sprintf("tenant-%d", i%tenants), "order.created", map[string]any{"n": i})
				if len(m.Deliveries) != perTenant {
					t.Errorf("message %d: %d deliveries", i, len(m.Deliveries))
				}
			}
		})
	}
	wg.Wait()
	Eventually(t, 3*time.Minute, 100*time.Millisecond, "every delivery delivered", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE status = 'delivered'`).Scan(&n))
		return n == messages*perTenant
	})
	delivered := 0
	for _, p := range paths {
		s := rc.Stats(p)
		require.Zero(t, s.Duplicates, p)
		require.Zero(t, s.BadSignatures, p)
		delivered += s.DistinctDelivered
	}
	require.Equal(t, messages*perTenant, delivered)
	for _, p := range append([]*Proc{api.Proc}, procsOf(fleet)...) {
		for _, bad := range []string{"too many clients", "attempt_not_recorded", "ledger_flush_retry", "level=ERROR"} {
			require.Empty(t, p.Lines(bad), "%s: %s", p.Name, bad)
		}
	}
	var attempts int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM delivery_attempts`).Scan(&attempts))
	require.Equal(t, messages*perTenant, attempts, "one attempt a delivery: none failed, none sent twice")
}

func procsOf(ds []*Dispatcher) []*Proc {
	out := make([]*Proc, len(ds))
	for i, d := range ds {
		out[i] = d.Proc
	}
	return out
}
