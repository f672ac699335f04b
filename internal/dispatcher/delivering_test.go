package dispatcher_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/dispatcher"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestDeliveringMeansARequestInFlight: of one message's deliveries, which
// share a message job, only the one whose request is in flight shows
// delivering while that request hangs: the others are delivered, or
// pending for a retry in a job of their own, or (rate-limited: their slot
// is booked by a job of their own) already handed off and delivered,
// not held by the hanging request's job.
func TestDeliveringMeansARequestInFlight(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	secret := newSecret(t)
	hanging := make(chan struct{}, 1)
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{secret}, Respond: func(r *deliverytest.Request) deliverytest.Response {
		switch r.Path {
		case "/hang":
			select {
			case hanging <- struct{}{}:
			default:
			}
			return deliverytest.Response{Delay: time.Hour} // ends when the dispatcher stops
		case "/fail":
			return deliverytest.Response{Status: http.StatusInternalServerError}
		}
		return deliverytest.Response{}
	}})
	st := store.New(db.Pool, nil)
	ids := map[string]string{}
	for _, p := range []string{"/hang", "/ok", "/fail", "/limited"} {
		e := store.Endpoint{TenantID: "acme", URL: rc.URL(p), Secret: secret}
		if p == "/limited" {
			e.RateLimit = new(1)
		}
		got, err := st.CreateEndpoint(t.Context(), e)
		require.NoError(t, err)
		ids[p] = got.ID
	}
	inserter, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	require.NoError(t, err)
	msg, _, err := st.CreateMessage(t.Context(), store.NewMessage{TenantID: "acme", EventType: "order.created", Payload: json.RawMessage(`{"n":1}`)}, &delivery.Enqueuer{Client: inserter})
	require.NoError(t, err)
	require.Len(t, msg.Deliveries, 4)
	delivery := map[string]string{}
	for _, d := range msg.Deliveries {
		for p, id := range ids {
			if d.EndpointID == id {
				delivery[p] = d.ID
			}
		}
	}

	cfg := dispatcher.DefaultConfig()
	cfg.MetricsAddr = "127.0.0.1:0"
	cfg.AllowPrivateTargets = true
	cfg.Breakers = false
	cfg.RetrySchedule = "0s,10m"
	cfg.ShutdownGrace = time.Second
	_, cancel, done := startRun(t, cfg, db.Pool, slog.LevelError)
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	status := func(p string) string {
		d, err := st.GetDelivery(t.Context(), delivery[p])
		require.NoError(t, err)
		return d.Status
	}
	select {
	case <-hanging:
	case <-time.After(waitFor):
		t.Fatal("the hanging endpoint's request never arrived")
	}
	require.Eventually(t, func() bool {
		d, err := st.GetDelivery(t.Context(), delivery["/fail"])
		require.NoError(t, err)
		return status("/ok") == store.DeliveryDelivered && status("/limited") == store.DeliveryDelivered && d.AttemptCount == 1
	}, waitFor, 20*time.Millisecond, "the other deliveries settle while one request of their message job hangs")
	require.Equal(t, store.DeliveryDelivering, status("/hang"), "its request is in flight")
	require.Equal(t, store.DeliveryPending, status("/fail"), "its retry waits ten minutes in a job of its own")
}
