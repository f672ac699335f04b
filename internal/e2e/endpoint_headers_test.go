package e2e

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestEndpointHeadersOnEveryAttempt: an endpoint's headers reach its
// receiver on the first attempt and on every retry, and neither process
// ever logs their values, at debug level.
func TestEndpointHeadersOnEveryAttempt(t *testing.T) {
	t.Parallel()
	const credential = "rcv-credential-0b8e44f1"
	var mu sync.Mutex
	var seen []http.Header
	db := storetest.New(t)
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: func(r *deliverytest.Request) deliverytest.Response {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
		if r.Seq <= 2 {
			return deliverytest.Response{Status: http.StatusServiceUnavailable, Body: []byte("busy")}
		}
		return deliverytest.Response{}
	}})
	p := &pipeline{db: db, api: StartAPI(t, db.URL, map[string]string{"LOG_LEVEL": "debug"}), receiver: rc}
	d := StartDispatcher(t, "dispatcher", p.db.URL, map[string]string{"LOG_LEVEL": "debug", "RETRY_SCHEDULE": "0s,200ms,200ms,200ms"})
	p.api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": p.receiver.URL("/h"), "secret": testSecret,
		"headers": map[string]string{"X-Api-Key": credential, "x-route": "billing"}})
	p.api.SendMessage(t, "acme", "invoice.paid", map[string]any{"n": 1})

	Eventually(t, time.Minute, 50*time.Millisecond, "delivered on the third attempt", func() bool {
		return p.receiver.Stats("/h").Delivered == 1
	})
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 3, "two refusals, then the delivery")
	for i, h := range seen {
		require.Equal(t, credential, h.Get("X-Api-Key"), "attempt %d", i+1)
		require.Equal(t, "billing", h.Get("X-Route"), "attempt %d", i+1)
	}
	require.Zero(t, p.receiver.Stats("/h").BadSignatures)
	for _, out := range []string{p.api.Output(), d.Output()} {
		require.NotEmpty(t, out)
		require.False(t, strings.Contains(out, credential), "a header value is in a log line")
	}
}
