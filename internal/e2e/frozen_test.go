package e2e

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
)

// TestFrozenDispatcherSendsNothingAfterTheRescue freezes a dispatcher
// with SIGSTOP mid fan-out (two requests of a message job in flight, its
// other eight deliveries waiting for the host's places), lets the fleet
// rescue the job to a second dispatcher (its heartbeat finds the frozen
// one silent, well before River's own rescue), which delivers
// everything, and
// then lets the frozen one go on with SIGCONT. The woken process sends
// nothing more and writes nothing: it gives no delivery a job, and
// only the two requests in flight at the freeze reach their endpoints
// twice.
func TestFrozenDispatcherSendsNothingAfterTheRescue(t *testing.T) {
	t.Parallel()
	var rescued atomic.Bool
	p := setupPipeline(t, func(r *deliverytest.Request) deliverytest.Response {
		if !rescued.Load() {
			return deliverytest.Response{Hang: true}
		}
		return deliverytest.Response{Status: http.StatusOK}
	})
	const endpoints = 10
	paths := make([]string, endpoints)
	for i := range paths {
		paths[i] = fmt.Sprintf("/e%d", i)
		p.api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": p.receiver.URL(paths[i]), "secret": testSecret})
	}
	env := map[string]string{"WORKERS": "20", "MAX_PER_HOST": "2", "REQUEST_TIMEOUT": "3s", "RESCUE_STUCK_AFTER": "9s"}
	first := StartDispatcher(t, "dispatcher-1", p.db.URL, env)
	m := p.api.SendMessage(t, "acme", "order.created", map[string]any{"n": 1})
	require.Len(t, m.Deliveries, endpoints)
	inFlight := func() int {
		n := 0
		for _, path := range paths {
			n += p.receiver.Stats(path).InFlight
		}
		return n
	}
	Eventually(t, time.Minute, 5*time.Millisecond, "two requests in flight, the host's places", func() bool { return inFlight() == 2 })
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = first.cmd.Process.Signal(syscall.SIGCONT) })
	rescued.Store(true)
	StartDispatcher(t, "dispatcher-2", p.db.URL, env)
	// Registered after the database's own cleanup, so it runs first: a
	// failure shows where each open delivery and its job stood.
	t.Cleanup(func() {
		if t.Failed() {
			logUnsettled(t, p.db)
		}
	})

	Eventually(t, 3*time.Minute, 100*time.Millisecond, "every delivery delivered by the rescue", func() bool {
		return p.count(t, `SELECT count(*) FROM deliveries WHERE message_id = $1 AND status = 'delivered'`, m.ID) == endpoints
	})
	before := map[string]int{}
	for _, path := range paths {
		before[path] = p.receiver.Stats(path).Requests
	}
	// The rescue's run may have handed deliveries that waited for the
	// host's places to jobs of their own (on a loaded machine its start
	// budget runs out); the woken process adds none.
	handedOff := p.count(t, `SELECT count(*) FROM river_job WHERE kind = 'deliver'`)

	require.NoError(t, first.cmd.Process.Signal(syscall.SIGCONT))
	// Woken, it finds its requests' timeouts and its waiting deliveries'
	// deadlines past. A graceful stop waits for its runs to end (River
	// lets running jobs finish within the shutdown grace).
	require.NoError(t, first.Stop(time.Minute))
	twice := 0
	for _, path := range paths {
		st := p.receiver.Stats(path)
		require.Equal(t, before[path], st.Requests, "%s: nothing sent after the wake", path)
		require.LessOrEqual(t, st.Requests, 2, path)
		if st.Requests == 2 {
			twice++
		}
		require.Equal(t, 1, st.DistinctDelivered, path)
	}
	require.LessOrEqual(t, twice, 2, "only the requests in flight at the freeze arrive twice")
	require.Equal(t, handedOff, p.count(t, `SELECT count(*) FROM river_job WHERE kind = 'deliver'`), "the woken process gave no delivery a job of its own")
	require.Equal(t, endpoints, p.count(t, `SELECT count(*) FROM deliveries WHERE message_id = $1 AND status = 'delivered'`, m.ID))
}
