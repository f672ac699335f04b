package dispatcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/destination"
	"github.com/hookd/hookd/internal/dispatcher"
	"github.com/hookd/hookd/internal/netcut"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
	"github.com/hookd/hookd/internal/trafficclass"
	"github.com/hookd/hookd/sdk/go/webhook"
)

// The acceptance tests of destinations beyond HTTP: a real dispatcher on
// a fresh database delivers to the machine's brokers (each test in a
// namespace of its own, removed at its end; a test never changes a
// server it did not start) or to servers the test starts (kfake,
// pstest). A broker's outage is a TCP proxy the test cuts and restores.

// destClass is the traffic class of the tests' endpoints: a breaker
// that opens on 5 failures in a 2 s window and tries again after 1 s,
// and an auth wall after 3 refusals.
const destClass = "destfast"

// destRetrySchedule keeps a delivery retrying through an outage of
// several seconds (the breaker parks it meanwhile).
const destRetrySchedule = "0s,200ms,500ms,1s,1s,1s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s"

// destHarness is a dispatcher delivering one test's endpoints.
type destHarness struct {
	t        *testing.T
	db       *storetest.DB
	st       *store.Store
	enq      *delivery.Enqueuer
	secret   string
	verifier *webhook.Verifier
}

// startDest runs a dispatcher with breakers on against a fresh database
// holding destClass; deps may carry the Pub/Sub test server's options, and
// each of tune changes the dispatcher's configuration.
func startDest(t *testing.T, deps dispatcher.Deps, tune ...func(*dispatcher.Config)) *destHarness {
	t.Helper()
	h := prepareDest(t)
	cfg := dispatcher.DefaultConfig()
	cfg.MetricsAddr = "127.0.0.1:0"
	cfg.AllowPrivateTargets = true
	cfg.RetrySchedule = destRetrySchedule
	cfg.RequestTimeout = 2 * time.Second
	cfg.ShutdownGrace = time.Second
	for _, f := range tune {
		f(&cfg)
	}
	deps.Pool = h.db.Pool
	_, cancel, done := startRunWith(t, cfg, deps, slog.LevelError)
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return h
}

// prepareDest is startDest without its dispatcher: a fresh database
// holding destClass, for dispatchers the test runs itself.
func prepareDest(t *testing.T) *destHarness {
	t.Helper()
	db := storetest.New(t)
	st := store.New(db.Pool, nil)
	c, ok := trafficclass.Builtin(trafficclass.High)
	require.True(t, ok)
	c.Name, c.Builtin = destClass, false
	c.Breaker.Window, c.Breaker.MinThroughput, c.Breaker.FailureRateThreshold = 2*time.Second, 5, 0.5
	c.Breaker.OpenDuration, c.Breaker.MaxOpenDuration = time.Second, 2*time.Second
	c.AuthDisableAfter, c.AuthDisableMinDuration = 3, 0
	require.NoError(t, st.EnsureBuiltinClasses(t.Context(), trafficclass.Builtins()))
	_, err := st.CreateClass(t.Context(), c)
	require.NoError(t, err)
	inserter, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	require.NoError(t, err)
	secret := newSecret(t)
	v, err := webhook.NewVerifier([]string{secret})
	require.NoError(t, err)
	return &destHarness{t: t, db: db, st: st, enq: &delivery.Enqueuer{Client: inserter}, secret: secret, verifier: v}
}

// endpoint creates an endpoint of type typ publishing to cfg (its
// credentials split off as the API stores them).
func (h *destHarness) endpoint(typ destination.Type, cfg destination.Config, fifo bool) store.Endpoint {
	h.t.Helper()
	redacted, err := json.Marshal(cfg.Redacted())
	require.NoError(h.t, err)
	e := store.Endpoint{TenantID: "acme", Secret: h.secret, Type: string(typ), Destination: redacted,
		DestinationCredentials: cfg.Credentials(), TrafficClass: destClass}
	if fifo {
		e.Ordering = store.OrderingFIFO
	}
	got, err := h.st.CreateEndpoint(h.t.Context(), e)
	require.NoError(h.t, err)
	return got
}

// send accepts n messages for the tenant, in order, and returns their
// ids in that order.
func (h *destHarness) send(n int) []string {
	h.t.Helper()
	ids := make([]string, 0, n)
	for i := 0; i < n; i += 100 {
		var batch []store.NewMessage
		for j := i; j < min(i+100, n); j++ {
			batch = append(batch, store.NewMessage{TenantID: "acme", EventType: "invoice.paid",
				Payload: json.RawMessage(fmt.Sprintf(`{"n":%d,"customer":{"id":"cus_%d"}}`, j, j%7))})
		}
		got, err := h.st.CreateMessages(h.t.Context(), batch, h.enq)
		require.NoError(h.t, err)
		for _, m := range got {
			ids = append(ids, m.Message.ID)
		}
	}
	return ids
}

// statuses counts the endpoint's deliveries by status.
func (h *destHarness) statuses(endpointID string) map[string]int {
	h.t.Helper()
	rows, err := h.db.Pool.Query(h.t.Context(), `SELECT status, count(*) FROM deliveries WHERE endpoint_id = $1 GROUP BY status`, endpointID)
	require.NoError(h.t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		require.NoError(h.t, rows.Scan(&s, &n))
		out[s] = n
	}
	require.NoError(h.t, rows.Err())
	return out
}

// waitDelivered waits until all n deliveries of the endpoint are
// delivered, and returns how long that took.
func (h *destHarness) waitDelivered(endpointID string, n int, within time.Duration) time.Duration {
	h.t.Helper()
	start := time.Now()
	var last map[string]int
	for deadline := start.Add(within); time.Now().Before(deadline); {
		if last = h.statuses(endpointID); last[store.DeliveryDelivered] == n {
			return time.Since(start)
		}
		select {
		case <-h.t.Context().Done():
			require.FailNow(h.t, "test ended")
		case <-time.After(50 * time.Millisecond):
		}
	}
	require.Equal(h.t, map[string]int{store.DeliveryDelivered: n}, last, "deliveries of %s after %s", endpointID, within)
	return time.Since(start)
}

// breakerState is the endpoint's shared breaker state.
func (h *destHarness) breakerState(endpointID string) string {
	h.t.Helper()
	var s string
	require.NoError(h.t, h.db.Pool.QueryRow(h.t.Context(), `SELECT state FROM breaker_states WHERE endpoint_id = $1`, endpointID).Scan(&s))
	return s
}

// consumedOnce checks what a consumer received: every one of ids with a
// valid signature, the event type and the payload the dispatcher sent,
// and returns how many came more than once.
func (h *destHarness) consumedOnce(ids []string, got []consumedMessage) (duplicates int) {
	h.t.Helper()
	seen := map[string]int{}
	for _, m := range got {
		hdr := http.Header{}
		for k, v := range m.headers {
			hdr.Set(k, v)
		}
		require.NoError(h.t, h.verifier.Verify(hdr, m.body), "signature of %s", m.headers[destination.HeaderID])
		require.Equal(h.t, "invoice.paid", m.headers[destination.HeaderEventType])
		seen[m.headers[destination.HeaderID]]++
	}
	for _, id := range ids {
		require.Positive(h.t, seen[id], "%s never consumed", id)
		duplicates += seen[id] - 1
	}
	require.Len(h.t, seen, len(ids), "only the test's messages")
	return duplicates
}

// consumedMessage is one message as a consumer read it.
type consumedMessage struct {
	headers map[string]string
	body    []byte
}

// newTCPProxy forwards a loopback port to a broker (netcut): cutting it
// makes the broker unreachable without touching it. Closed at the test's
// end.
func newTCPProxy(t *testing.T, target string) *netcut.Proxy {
	t.Helper()
	p, err := netcut.Start(target)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// outage runs the outage scenario on an endpoint publishing through
// proxy: n messages are sent; once a third are delivered the proxy is
// cut; the breaker must open; after it has been open a while the proxy
// is restored, and every delivery must end delivered. It returns what
// it measured.
type outageFigures struct {
	deliveredAtCut int
	openAfter      time.Duration
	drainAfter     time.Duration
}

func (h *destHarness) outage(e store.Endpoint, proxy *netcut.Proxy, ids []string) outageFigures {
	h.t.Helper()
	n := len(ids)
	var f outageFigures
	require.Eventually(h.t, func() bool { return h.statuses(e.ID)[store.DeliveryDelivered] >= n/3 }, waitFor, 10*time.Millisecond)
	proxy.Cut()
	cutAt := time.Now()
	f.deliveredAtCut = h.statuses(e.ID)[store.DeliveryDelivered]
	require.Eventually(h.t, func() bool { return h.breakerState(e.ID) == "open" }, 20*time.Second, 20*time.Millisecond,
		"the breaker opens while the broker is unreachable")
	f.openAfter = time.Since(cutAt)
	// Trials fail while it stays cut: the breaker stays away from closed.
	restoreCtx, cancel := context.WithTimeout(h.t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(h.t, proxy.Restore(restoreCtx))
	restoredAt := time.Now()
	h.waitDelivered(e.ID, n, waitFor)
	f.drainAfter = time.Since(restoredAt)
	require.Equal(h.t, map[string]int{store.DeliveryDelivered: n}, h.statuses(e.ID), "nothing lost")
	return f
}

// dispatcherDeps are the Deps of a test without a Pub/Sub server.
func dispatcherDeps() dispatcher.Deps { return dispatcher.Deps{} }

// dispatcherWorkers bounds the attempts in flight at once: the most
// that an outage can leave unconfirmed yet stored.
func dispatcherWorkers() int { return dispatcher.DefaultConfig().Workers }

// requireListening fails the test, clearly, when the machine's broker
// is not running on addr.
func requireListening(t *testing.T, name, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	require.NoError(t, err, "%s is not running on %s", name, addr)
	_ = c.Close()
}
