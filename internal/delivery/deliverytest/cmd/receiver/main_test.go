package main

import (
	"bytes"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hookd/hookd/internal/delivery"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Started by an import's init function (the Pub/Sub client's,
		// through internal/destination), not by a test.
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

var now = time.Unix(1_800_000_000, 0)

func webhook(t *testing.T, secret *delivery.Secret, ts time.Time, body string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/hooks", strings.NewReader(body))
	r.Header.Set("webhook-id", "msg_1")
	r.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	if secret != nil {
		r.Header.Set("webhook-signature", delivery.Sign("msg_1", ts, []byte(body), *secret))
	}
	return r
}

func newSecret(t *testing.T) *delivery.Secret {
	t.Helper()
	text, err := delivery.GenerateSecret(rand.Reader)
	require.NoError(t, err)
	s, err := delivery.ParseSecret(text)
	require.NoError(t, err)
	return &s
}

func TestPrintsAndAcceptsWithoutSecret(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	w := httptest.NewRecorder()
	newHandler(&out, nil, func() time.Time { return now }).ServeHTTP(w, webhook(t, nil, now, `{"amount":42}`))
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, "msg_1 /hooks not verified {\"amount\":42}\n", out.String())
}

func TestVerifiesSignatures(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	h := newHandler(new(bytes.Buffer), secret, func() time.Time { return now })

	for _, tc := range []struct {
		name string
		req  *http.Request
		want int
	}{
		{"signed", webhook(t, secret, now, `{}`), http.StatusOK},
		{"other secret", webhook(t, newSecret(t), now, `{}`), http.StatusBadRequest},
		{"unsigned", webhook(t, nil, now, `{}`), http.StatusBadRequest},
		{"stale", webhook(t, secret, now.Add(-time.Hour), `{}`), http.StatusBadRequest},
		{"GET", httptest.NewRequest(http.MethodGet, "/hooks", nil), http.StatusMethodNotAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := httptest.NewRecorder()
			h.ServeHTTP(w, tc.req)
			require.Equal(t, tc.want, w.Code, w.Body.String())
		})
	}
}

func TestRefusalIsPrinted(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	newHandler(&out, newSecret(t), func() time.Time { return now }).ServeHTTP(httptest.NewRecorder(), webhook(t, newSecret(t), now, `{}`))
	require.Contains(t, out.String(), "msg_1 /hooks REFUSED")
}
