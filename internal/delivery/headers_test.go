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

// TestSenderSendsOnlyFixedHeaders: a delivery without endpoint headers
// carries exactly the Standard Webhooks headers, the content type and the
// user agent. No other endpoint field (metadata, description, tenant)
// reaches a header: Request has no field that could carry one but Headers,
// and the message id is one hookd made.
func TestSenderSendsOnlyFixedHeaders(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_700_000_000, 0)
	h := sentHeaders(t, start, delivery.Request{
		URL: "/hook?x=1", MessageID: "msg_01M8QG", Timestamp: start, Body: []byte(`{"a":1}`), Signature: "v1,abc",
	})

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

	// What a Request can carry: of what an endpoint's owner typed, only the
	// URL, which goes to the request line, the vetted Headers, and the
	// Timeout, a duration.
	var fields []string
	for f := range reflect.TypeFor[delivery.Request]().Fields() {
		fields = append(fields, f.Name)
	}
	require.Equal(t, []string{"URL", "MessageID", "Timestamp", "Body", "Signature", "Headers", "Timeout"}, fields)
	timeout, _ := reflect.TypeFor[delivery.Request]().FieldByName("Timeout")
	require.Equal(t, reflect.TypeFor[time.Duration](), timeout.Type)
}

// TestSenderSendsEndpointHeaders: an endpoint's headers go out with the
// request; a reserved name among them (one the API refuses, in a row
// written some other way) never replaces what hookd sends.
func TestSenderSendsEndpointHeaders(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_700_000_000, 0)
	h := sentHeaders(t, start, delivery.Request{
		MessageID: "msg_01M8QG", Timestamp: start, Body: []byte(`{}`), Signature: "v1,abc",
		Headers: map[string]string{
			"x-api-key": "k-1", "Authorization": "Bearer rcv", "User-Agent": "acme-relay",
			"Webhook-Signature": "v1,forged", "Content-Type": "text/plain", "Host": "evil.example",
		},
	})
	require.Equal(t, "k-1", h.Get("X-Api-Key"))
	require.Equal(t, "Bearer rcv", h.Get("Authorization"))
	require.Equal(t, "acme-relay", h.Get("User-Agent"), "an endpoint may name its own user agent")
	require.Equal(t, []string{"v1,abc"}, h.Values("Webhook-Signature"))
	require.Equal(t, []string{"application/json"}, h.Values("Content-Type"))
}

// sentHeaders sends req at start to a test server (its URL prefixed to
// req.URL) and returns the headers the server received.
func sentHeaders(t *testing.T, start time.Time, req delivery.Request) http.Header {
	t.Helper()
	got := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
	}))
	t.Cleanup(srv.Close)
	s := delivery.NewSender(delivery.SenderConfig{Timeout: 5 * time.Second})
	t.Cleanup(s.CloseIdle)
	req.URL = srv.URL + req.URL
	resp := s.Send(context.Background(), req, func(time.Time) time.Duration { return 0 }, start)
	require.Equal(t, http.StatusOK, resp.Status, "%v", resp.Err)
	return <-got
}

func TestReservedHeader(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"Host": true, "host": true, "Content-Length": true, "CONTENT-TYPE": true, "Transfer-Encoding": true,
		"connection": true, "Upgrade": true, "TE": true, "te": true, "Trailer": true,
		"Proxy-Authorization": true, "proxy-": true, "Webhook-Id": true, "webhook-signature": true, "Webhook-X": true,
		"Authorization": false, "X-Api-Key": false, "User-Agent": false, "Trailers": false, "Tea": false,
		"Proxy": false, "Webhook": false, "X-Webhook-Id": false, "Hosts": false,
	} {
		require.Equal(t, want, delivery.ReservedHeader(name), name)
	}
}
