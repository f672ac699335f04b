package delivery_test

import (
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
)

// BenchmarkAttempt is one attempt's in-process work outside the database:
// sign a 1 KB payload, POST it over a kept-alive loopback connection to a
// receiver answering 200 with a short body, read and excerpt the answer,
// classify it. Run with -benchmem: allocations per attempt are the
// dispatcher's per-delivery garbage.
func BenchmarkAttempt(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	b.Cleanup(srv.Close)
	raw, err := delivery.GenerateSecret(rand.Reader)
	require.NoError(b, err)
	secret, err := delivery.ParseSecret(raw)
	require.NoError(b, err)
	sender := delivery.NewSender(delivery.SenderConfig{Timeout: 5 * time.Second})
	b.Cleanup(sender.CloseIdle)
	body := []byte(`{"seq":1,"pad":"` + strings.Repeat("x", 1000) + `"}`)
	const msgID = "msg_2QeVbD3u9Xw7hJkLmNpQrStUvW"
	since := func(t time.Time) time.Duration { return time.Since(t) }
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		now := time.Now()
		resp := sender.Send(ctx, delivery.Request{
			URL: srv.URL + "/hook", MessageID: msgID, Timestamp: now, Body: body,
			Signature: delivery.Sign(msgID, now, body, secret),
		}, since, now)
		if resp.Status != http.StatusOK || delivery.Classify(resp.Status, resp.ErrorClass) != delivery.ClassSuccess {
			b.Fatalf("attempt: %d %v", resp.Status, resp.Err)
		}
	}
}
