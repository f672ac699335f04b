package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/secretbox"
)

// TestEndpointHeadersStoredAndReplaced: headers given on create are
// stored as given, answers show their names only, and a PATCH replaces
// them as a whole (an empty object removes them all).
func TestEndpointHeadersStoredAndReplaced(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	r := b.do(t, "POST", "/v1/endpoints", map[string]any{
		"tenant_id": "acme", "url": "https://acme.example/h",
		"headers": map[string]string{"X-Api-Key": "k-123", "authorization": "Bearer rcv", "X-Empty": ""},
	})
	requireStatus(t, http.StatusCreated, r)
	ep := decodeJSON[endpointJSON](t, r)
	require.Equal(t, []string{"X-Api-Key", "X-Empty", "authorization"}, ep.HeaderNames)
	stored, err := b.store.GetEndpoint(context.Background(), ep.ID)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"X-Api-Key": "k-123", "authorization": "Bearer rcv", "X-Empty": ""}, stored.Headers)

	r = b.do(t, "PATCH", "/v1/endpoints/"+ep.ID, map[string]any{"description": "kept headers"})
	requireStatus(t, http.StatusOK, r)
	require.Equal(t, ep.HeaderNames, decodeJSON[endpointJSON](t, r).HeaderNames)

	r = b.do(t, "PATCH", "/v1/endpoints/"+ep.ID, map[string]any{"headers": map[string]string{"X-Route": "eu"}})
	requireStatus(t, http.StatusOK, r)
	require.Equal(t, []string{"X-Route"}, decodeJSON[endpointJSON](t, r).HeaderNames)
	stored, err = b.store.GetEndpoint(context.Background(), ep.ID)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"X-Route": "eu"}, stored.Headers)

	r = b.do(t, "PATCH", "/v1/endpoints/"+ep.ID, map[string]any{"headers": map[string]string{}})
	requireStatus(t, http.StatusOK, r)
	require.Equal(t, []string{}, decodeJSON[endpointJSON](t, r).HeaderNames)
}

// TestEndpointHeadersRefused: each refused header answers 400 naming
// headers.<name>, on create and on PATCH, and nothing is stored.
func TestEndpointHeadersRefused(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	target := b.createEndpoint(t, "acme")
	const docValue = "the document's value pattern and maxLength cannot tell bytes from characters nor every field-value rule"
	for _, tc := range []struct {
		name, value string
		// blind: the document cannot see this fault.
		blind bool
	}{
		{name: "Host"}, {name: "host"}, {name: "Content-Length"}, {name: "content-type"},
		{name: "Transfer-Encoding"}, {name: "Connection"}, {name: "Upgrade"}, {name: "TE"},
		{name: "Trailer"}, {name: "Proxy-Authorization"}, {name: "proxy-connection"},
		{name: "Webhook-Signature"}, {name: "webhook-id"}, {name: "Webhook-Timestamp"}, {name: "WEBHOOK-anything"},
		{name: "Bad Name"}, {name: "X:Colon"}, {name: "X-Ü"}, {name: "X(paren)"},
		{name: "X-Newline", value: "a\r\nInjected: 1"},
		{name: "X-Nul", value: "a\x00b"},
		{name: "X-Long", value: strings.Repeat("v", 4097)},
		{name: "X-Long-Multibyte", value: strings.Repeat("é", 2049), blind: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			value := tc.value
			if value == "" {
				value = "v"
			}
			var opts []callOpt
			if tc.blind {
				opts = append(opts, docBlind(docValue))
			}
			headers := map[string]string{tc.name: value, "X-Fine": "ok"}
			r := b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/h", "headers": headers}, opts...)
			p := requireFieldError(t, http.StatusBadRequest, r, "headers."+tc.name)
			require.Len(t, p.Errors, 1, "only the bad header is named: %s", r.Body)
			r = b.do(t, "PATCH", "/v1/endpoints/"+target.ID, map[string]any{"headers": headers}, opts...)
			requireFieldError(t, http.StatusBadRequest, r, "headers."+tc.name)
		})
	}
	t.Run("same name twice", func(t *testing.T) {
		r := b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/h",
			"headers": map[string]string{"X-Key": "a", "x-key": "b"}}, docBlind("JSON Schema cannot compare names case-insensitively"))
		requireFieldError(t, http.StatusBadRequest, r, "headers.x-key")
	})
	t.Run("sealed-value prefix", func(t *testing.T) {
		headers := map[string]string{"X-Key": secretbox.Prefix + "0123456789ab.AAAA"}
		r := b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/h", "headers": headers})
		requireFieldError(t, http.StatusBadRequest, r, "headers.X-Key")
		r = b.do(t, "PATCH", "/v1/endpoints/"+target.ID, map[string]any{"headers": headers})
		requireFieldError(t, http.StatusBadRequest, r, "headers.X-Key")
	})
	t.Run("too many", func(t *testing.T) {
		headers := map[string]string{}
		for i := range 21 {
			headers[fmt.Sprintf("X-H%d", i)] = "v"
		}
		r := b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/h", "headers": headers})
		requireFieldError(t, http.StatusBadRequest, r, "headers")
	})
	t.Run("at the limits", func(t *testing.T) {
		headers := map[string]string{"X-Max": strings.Repeat("v", 4096), "X-Tab": "a\tb", "X-Obs": "café"}
		for i := range 17 {
			headers[fmt.Sprintf("X-H%d", i)] = "v"
		}
		r := b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/h", "headers": headers})
		requireStatus(t, http.StatusCreated, r)
		require.Len(t, decodeJSON[endpointJSON](t, r).HeaderNames, 20)
	})
	require.Equal(t, 2, b.counts(t)["endpoints"], "no refused endpoint was stored")
	got, err := b.store.GetEndpoint(context.Background(), target.ID)
	require.NoError(t, err)
	require.Empty(t, got.Headers, "no refused PATCH changed the endpoint")
}

// TestEndpointHeaderValuesNeverShown: a header value appears in no answer
// and no log line, refusals included.
func TestEndpointHeaderValuesNeverShown(t *testing.T) {
	t.Parallel()
	sink := &logSink{}
	_, b := setup(t, withDebugLog(sink))
	const value = "rcv-credential-7d41b09e"
	headers := map[string]string{"X-Api-Key": value}
	created := b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/h", "headers": headers})
	requireStatus(t, http.StatusCreated, created)
	ep := decodeJSON[endpointJSON](t, created)
	answers := []*response{
		created,
		b.do(t, "GET", "/v1/endpoints", nil),
		b.do(t, "GET", "/v1/endpoints/"+ep.ID, nil),
		b.do(t, "PATCH", "/v1/endpoints/"+ep.ID, map[string]any{"headers": headers}),
		b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/h",
			"headers": map[string]string{"Webhook-Id": value, "X-Bad": value + "\n"}}),
		b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/h", "headers": headers, "traffic_class": "nope"},
			docBlind("which traffic classes exist is not in the document")),
	}
	for _, r := range answers {
		require.NotContains(t, string(r.Body), value)
	}
	// An operator action the server logs, naming the endpoint.
	reset := b.raw(t, "POST", "/v1/endpoints/"+ep.ID+"/breaker/reset", "Bearer "+testToken, nil)
	require.NotContains(t, string(reset.body), value)
	require.NotEmpty(t, sink.String(), "the server logged something to look through")
	require.NotContains(t, sink.String(), value)
}
