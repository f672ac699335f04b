package api_test

import (
	"bytes"
	"encoding/base64"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
)

// logSink is a log destination safe for concurrent writes.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// withDebugLog sends the server's log, at debug level, to sink.
func withDebugLog(sink *logSink) func(*api.Deps) {
	return func(d *api.Deps) {
		d.Logger = slog.New(slog.NewJSONHandler(sink, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
}

// TestInvalidSecretIsNotEchoed: a refused secret is named as the field at
// fault, and neither it nor its key appears anywhere in the answer.
func TestInvalidSecretIsNotEchoed(t *testing.T) {
	t.Parallel()
	sink := &logSink{}
	_, b := setup(t, withDebugLog(sink))
	short := base64.StdEncoding.EncodeToString([]byte("sixteen-byte-key"))
	long := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("k"), 65))
	for name, secret := range map[string]string{
		"too short":     "whsec_" + short,
		"too long":      "whsec_" + long,
		"no prefix":     "sk_live_0123456789abcdefghijklmnopqrstuv",
		"not base64":    "whsec_!!!not-base64-at-all!!!",
		"url base64":    "whsec_" + strings.ReplaceAll(strings.ReplaceAll(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xfb, 0xff}, 16)), "+", "-"), "/", "_"),
		"newline":       "whsec_" + short[:8] + "\n" + short[8:],
		"bad padding":   "whsec_" + strings.TrimRight(base64.StdEncoding.EncodeToString([]byte("a-key-of-25-bytes-exactly")), "=") + "=",
		"prefix only":   "whsec_",
		"secret-ish ws": "whsec_ MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	} {
		t.Run(name, func(t *testing.T) {
			for _, body := range []any{
				map[string]any{"tenant_id": "acme", "url": "https://acme.example/h", "secret": secret},
				// With other faults besides.
				map[string]any{"tenant_id": "", "url": "ftp://x", "secret": secret},
			} {
				r := b.do(t, "POST", "/v1/endpoints", body)
				requireFieldError(t, http.StatusBadRequest, r, "secret")
				got := string(r.Body)
				for _, part := range []string{secret, strings.TrimPrefix(secret, "whsec_"), short, long} {
					if len(part) >= 8 {
						require.NotContains(t, got, part, "the problem echoes the secret")
					}
				}
			}
		})
	}
	require.Zero(t, b.counts(t)["endpoints"])
	require.NotContains(t, sink.String(), short)
	require.NotContains(t, sink.String(), long)
}

// TestSecretNeverLoggedNorListed: creating an endpoint with a secret, and
// every read of it but GET .../secret, never shows the secret: not in list
// or detail answers, not in an error, not in any log line.
func TestSecretNeverLoggedNorListed(t *testing.T) {
	t.Parallel()
	sink := &logSink{}
	_, b := setup(t, withDebugLog(sink), func(d *api.Deps) { d.RateLimit = 1000 })
	const secret = "whsec_c2VjcmV0LXRoYXQtbXVzdC1uZXZlci1sZWFrLTQy"
	key := strings.TrimPrefix(secret, "whsec_")

	created := b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/h", "secret": secret})
	requireStatus(t, http.StatusCreated, created)
	ep := decodeJSON[endpointJSON](t, created)
	answers := []*response{created}
	answers = append(answers,
		b.do(t, "GET", "/v1/endpoints", nil),
		b.do(t, "GET", "/v1/endpoints?tenant_id=acme", nil),
		b.do(t, "GET", "/v1/endpoints/"+ep.ID, nil),
		b.do(t, "PATCH", "/v1/endpoints/"+ep.ID, map[string]any{"description": "x"}),
		b.do(t, "POST", "/v1/endpoints/"+ep.ID+"/disable", nil),
		b.do(t, "POST", "/v1/endpoints/"+ep.ID+"/enable", nil),
		b.do(t, "POST", "/v1/endpoints/"+ep.ID+"/secret/rotate", nil),
		// Refusals with the secret in the request body.
		b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/h", "secret": secret, "traffic_class": "nope"},
			docBlind("which traffic classes exist is not in the document")),
		b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/h", "secret": secret, "extra": 1}),
		b.do(t, "POST", "/v1/endpoints", `{"tenant_id":"acme","url":"https://acme.example/h","secret":"`+secret+`",}`),
		b.do(t, "POST", "/v1/endpoints", `{"tenant_id":"acme","secret":"`+secret+`"`),
		b.do(t, "PATCH", "/v1/endpoints/"+ep.ID, map[string]any{"secret": secret}),
	)
	for _, a := range []rawAnswer{
		b.raw(t, "POST", "/v1/endpoints/"+ep.ID+"/breaker/reset", "Bearer "+testToken, nil),
		b.raw(t, "GET", "/v1/breakers", "Bearer "+testToken, nil),
		b.raw(t, "GET", "/v1/endpoints/"+ep.ID+"/breaker", "Bearer "+testToken, nil),
		b.raw(t, "GET", "/v1/endpoints/"+ep.ID+"/traffic", "Bearer "+testToken, nil),
	} {
		answers = append(answers, &response{Status: a.status, Header: a.header, Body: a.body})
	}
	for _, r := range answers {
		require.NotContains(t, string(r.Body), key, "%s", r.Body)
	}
	// The secret route shows the previous secret (rotated out, still
	// signing): the one place it appears.
	s := decodeJSON[secretJSON](t, b.do(t, "GET", "/v1/endpoints/"+ep.ID+"/secret", nil))
	require.NotNil(t, s.PreviousSecret)
	require.Equal(t, secret, *s.PreviousSecret)
	require.NotEmpty(t, sink.String(), "the server logged something to look through")
	require.NotContains(t, sink.String(), key, "the secret is in a log line")
}
