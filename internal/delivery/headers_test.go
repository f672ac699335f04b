package delivery_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
)

// TestSenderSendsOnlyFixedHeaders: a delivery carries exactly the Standard
// Webhooks headers, the content type and the user agent. No endpoint field
// (metadata, description, tenant) reaches a header: Request has no field
// that could carry one, and the message id is one hookd made.
func TestSenderSendsOnlyFixedHeaders(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
	}))
	t.Cleanup(srv.Close)
	s := delivery.NewSender(delivery.SenderConfig{Timeout: 5 * time.Second})
	t.Cleanup(s.CloseIdle)

	start := time.Unix(1_700_000_000, 0)
	resp := s.Send(context.Background(), delivery.Request{
		URL: srv.URL + "/hook?x=1", MessageID: "msg_01M8QG", Timestamp: start, Body: []byte(`{"a":1}`), Signature: "v1,abc",
	}, func(time.Time) time.Duration { return 0 }, start)
	require.Equal(t, http.StatusOK, resp.Status, "%v", resp.Err)
	h := <-got

	var names []string
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	require.Equal(t, []string{"Content-Length", "Content-Type", "User-Agent", "Webhook-Id", "Webhook-Signature", "Webhook-Timestamp"}, names)
	require.Equal(t, "msg_01M8QG", h.Get("Webhook-Id"))
	require.Equal(t, "1700000000", h.Get("Webhook-Timestamp"))
	require.Equal(t, "v1,abc", h.Get("Webhook-Signature"))
	require.Equal(t, "application/json", h.Get("Content-Type"))
	require.Equal(t, delivery.UserAgent, h.Get("User-Agent"))

	// What a Request can carry: nothing an endpoint's owner typed but the
	// URL, which goes to the request line, never a header.
	var fields []string
	for f := range reflect.TypeFor[delivery.Request]().Fields() {
		fields = append(fields, f.Name)
	}
	require.Equal(t, []string{"URL", "MessageID", "Timestamp", "Body", "Signature"}, fields)
}
