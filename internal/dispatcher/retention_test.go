package dispatcher_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/dispatcher"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestDeliveryWhosePayloadIsMissingIsRetried: a queued delivery of a
// message younger than payload retention whose payload does not read (no
// retention can have dropped it: a bug) is never sent and never expired:
// the worker logs and counts it and River retries it, so once the payload
// reads again it is delivered. (A missing payload of a message older than
// payload retention expires: internal/delivery's worker tests.) The
// dispatcher's maintainer has made the partitions ahead at start.
func TestDeliveryWhosePayloadIsMissingIsRetried(t *testing.T) {
	db := storetest.New(t)
	secret := newSecret(t)
	arrived := make(chan string, 1)
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{secret}, Respond: func(r *deliverytest.Request) deliverytest.Response {
		select {
		case arrived <- r.MsgID:
		default:
		}
		return deliverytest.Response{Status: http.StatusOK}
	}})
	st := store.New(db.Pool, nil)
	_, err := st.CreateEndpoint(t.Context(), store.Endpoint{TenantID: "acme", URL: rc.URL("/hook"), Secret: secret})
	require.NoError(t, err)
	inserter, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	require.NoError(t, err)
	msg, _, err := st.CreateMessage(t.Context(), store.NewMessage{TenantID: "acme", EventType: "order.created", Payload: json.RawMessage(`{"n":1}`)}, &delivery.Enqueuer{Client: inserter})
	require.NoError(t, err)
	_, err = db.Pool.Exec(t.Context(), `DELETE FROM message_payloads WHERE message_id = $1`, msg.ID)
	require.NoError(t, err)
	before := goleak.IgnoreCurrent()
	// The run and the checks below share a pool closed before the
	// goroutine check: a connection opened meanwhile would outlive it.
	pool, err := pgxpool.New(t.Context(), db.URL)
	require.NoError(t, err)
	st = store.New(pool, nil)

	cfg := dispatcher.DefaultConfig()
	cfg.MetricsAddr = "127.0.0.1:0"
	cfg.AllowPrivateTargets = true
	cfg.Breakers = false
	// River retries the missing payload every half second or so.
	cfg.RetrySchedule = "0s,500ms"
	base, cancel, done := startRun(t, cfg, pool, slog.LevelError)
	defer cancel()

	metric := func(want string) func() bool { return metricLine(t, base, want) }
	require.Eventually(t, metric(`webhook_delivery_payload_missing_total `), waitFor, 20*time.Millisecond)
	require.Eventually(t, func() bool { return !metric(`webhook_delivery_payload_missing_total 0`)() }, waitFor, 20*time.Millisecond)
	got, err := st.GetDelivery(context.Background(), msg.Deliveries[0].ID)
	require.NoError(t, err)
	// Pending, or delivering while River runs its retry: not expired.
	require.Contains(t, []string{store.DeliveryPending, store.DeliveryDelivering}, got.Status, "a young message's missing payload is not an expiry")
	require.Zero(t, got.AttemptCount, "nothing was sent")
	select {
	case id := <-arrived:
		t.Fatalf("message %s was sent without its payload", id)
	default:
	}

	_, err = pool.Exec(t.Context(), `INSERT INTO message_payloads (message_id, payload) VALUES ($1, '{"n":1}')`, msg.ID)
	require.NoError(t, err)
	select {
	case id := <-arrived:
		require.Equal(t, msg.ID, id)
	case <-time.After(waitFor):
		t.Fatal("the retry did not deliver the message once its payload read again")
	}
	require.Eventually(t, func() bool {
		got, err := st.GetDelivery(context.Background(), msg.Deliveries[0].ID)
		require.NoError(t, err)
		return got.Status == store.DeliveryDelivered
	}, waitFor, 20*time.Millisecond)
	// The maintainer's first run, at start, made the current interval's
	// partitions and two more.
	require.Eventually(t, func() bool {
		parts, err := st.Partitions(context.Background())
		require.NoError(t, err)
		ahead := 0
		for _, p := range parts {
			if p.Parent == "deliveries" && !strings.HasSuffix(p.Name, "_legacy") {
				ahead++
			}
		}
		return ahead >= 3
	}, waitFor, 20*time.Millisecond)
	require.Eventually(t, metric(`hookd_partition_default_rows{table="messages"} 0`), waitFor, 20*time.Millisecond)
	require.True(t, metric(`webhook_delivery_expired_total{reason="payload"} 0`)(), "nothing expired")
	http.DefaultClient.CloseIdleConnections()

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(cfg.ShutdownGrace + waitFor):
		t.Fatal("Run did not return after ctx was cancelled")
	}
	pool.Close()
	goleak.VerifyNone(t, before)
}
