package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHostileInputIsAFourHundred: text Postgres cannot store (a NUL byte)
// in a body field, a path parameter or a query parameter is a 4xx naming
// what is wrong, never a 500, and nothing is written.
func TestHostileInputIsAFourHundred(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ep := b.createEndpoint(t, "acme")
	before := b.counts(t)

	t.Run("body fields", func(t *testing.T) {
		for _, c := range []struct {
			method, path string
			body         map[string]any
			field        string
		}{
			{"POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/h", "description": "a\x00b"}, "description"},
			{"PATCH", "/v1/endpoints/" + ep.ID, map[string]any{"description": "\x00"}, "description"},
			{"POST", "/v1/endpoints", map[string]any{"tenant_id": "acme\x00", "url": "https://acme.example/h"}, "tenant_id"},
			{"POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/h\x00"}, "url"},
			{"POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/h", "event_types": []string{"a\x00"}}, "event_types[0]"},
			{"POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/h", "metadata": map[string]string{"k\x00": "v"}}, "metadata"},
			{"POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/h", "metadata": map[string]string{"k": "v\r\nX-Injected: 1"}}, "metadata.k"},
			{"POST", "/v1/messages", map[string]any{"tenant_id": "acme", "event_type": "a", "payload": 1, "idempotency_key": "k\x00"}, "idempotency_key"},
			{"POST", "/v1/messages", map[string]any{"tenant_id": "acme", "event_type": "a\x00", "payload": 1}, "event_type"},
		} {
			requireFieldError(t, http.StatusBadRequest, b.do(t, c.method, c.path, c.body), c.field)
		}
	})

	t.Run("path and query parameters", func(t *testing.T) {
		for _, path := range []string{
			"/v1/endpoints/%00", "/v1/endpoints/ep_%00x", "/v1/endpoints/%ff%fe", "/v1/messages/%00",
			"/v1/deliveries/%00", "/v1/deliveries/%00/attempts", "/v1/endpoints/%00/attempts",
			"/v1/endpoints/%00/secret", "/v1/endpoints/" + strings.Repeat("x", 5000),
		} {
			r := b.do(t, "GET", path, nil)
			require.Equal(t, http.StatusNotFound, r.Status, "%s: %s", path, r.Body)
		}
		for _, path := range []string{"/v1/endpoints/%00/breaker", "/v1/traffic-classes/%00", "/v1/endpoints/%00/traffic", "/v1/traffic-classes/%ff"} {
			a := b.raw(t, "GET", path, "Bearer "+testToken, nil)
			require.Equal(t, http.StatusNotFound, a.status, "%s: %s", path, a.body)
		}
		for _, q := range []string{"after=%00", "after=%ff", "tenant_id=a%00", "state=%00"} {
			a := b.raw(t, "GET", "/v1/breakers?"+q, "Bearer "+testToken, nil)
			require.Equal(t, http.StatusBadRequest, a.status, "%s: %s", q, a.body)
		}
		// Unknown parameters are ignored, whatever they hold.
		requireStatus(t, http.StatusOK, b.do(t, "GET", "/v1/endpoints?x%00=%00", nil))
		for q, field := range map[string]string{"after=%00": "after", "after=%ff": "after", "tenant_id=a%00": "tenant_id",
			"limit=1%00": "limit", "after=" + strings.Repeat("x", 5000): "after", "after=ep_nope": "after"} {
			requireFieldError(t, http.StatusBadRequest, b.do(t, "GET", "/v1/endpoints?"+q, nil), field)
		}
		for _, q := range []string{"after", "since", "outcome"} {
			requireFieldError(t, http.StatusBadRequest, b.do(t, "GET", "/v1/endpoints/"+ep.ID+"/attempts?"+q+"=%00", nil), q)
		}
	})
	require.Equal(t, before, b.counts(t), "nothing written")
}
