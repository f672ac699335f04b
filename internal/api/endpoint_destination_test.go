package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
)

// destPassword is a destination credential no answer may hold.
const destPassword = "amqp-credential-9d41c7e2"

// TestCreateDestinationEndpoint: a rabbitmq endpoint is created with its
// password; every read (its breaker's too, for the dashboard) shows its
// type and destination without the password, which the store keeps (sealed) for the dispatcher; an update
// of the destination that leaves the password out keeps it; switching to
// http needs a url and drops the destination.
func TestCreateDestinationEndpoint(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	dest := map[string]any{"url": "amqps://mq.acme.example/billing", "exchange": "webhooks", "routing_key": "invoices",
		"username": "hookd", "password": destPassword}
	r := b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "type": "rabbitmq", "destination": dest})
	requireStatus(t, http.StatusCreated, r)
	require.NotContains(t, string(r.Body), destPassword)
	e := decodeJSON[endpointJSON](t, r)
	require.Equal(t, "rabbitmq", e.Type)
	require.Empty(t, e.URL)
	require.JSONEq(t, `{"url":"amqps://mq.acme.example/billing","exchange":"webhooks","routing_key":"invoices","username":"hookd"}`, string(e.Destination))
	for _, path := range []string{"/v1/endpoints/" + e.ID, "/v1/endpoints?tenant_id=acme", "/v1/endpoints/" + e.ID + "/breaker", "/v1/breakers?tenant_id=acme"} {
		got := b.do(t, "GET", path, nil)
		requireStatus(t, http.StatusOK, got)
		require.NotContains(t, string(got.Body), destPassword, path)
		require.Contains(t, string(got.Body), `"type":"rabbitmq"`, path)
		require.Contains(t, string(got.Body), `"destination":{"url":"amqps://mq.acme.example/billing"`, path)
	}
	stored, err := b.store.GetEndpoint(t.Context(), e.ID)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"password": destPassword}, stored.DestinationCredentials)

	// A new routing key: the password left out is kept.
	r = b.do(t, "PATCH", "/v1/endpoints/"+e.ID, map[string]any{"destination": map[string]any{
		"url": "amqps://mq.acme.example/billing", "exchange": "webhooks", "routing_key": "invoices.v2", "username": "hookd"}})
	requireStatus(t, http.StatusOK, r)
	require.Contains(t, string(r.Body), `"routing_key":"invoices.v2"`)
	stored, err = b.store.GetEndpoint(t.Context(), e.ID)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"password": destPassword}, stored.DestinationCredentials)

	// Another type: its own credentials, none kept from the old one.
	r = b.do(t, "PATCH", "/v1/endpoints/"+e.ID, map[string]any{"type": "redis", "destination": map[string]any{
		"url": "redis://redis.acme.example", "stream": "hooks"}})
	requireStatus(t, http.StatusOK, r)
	stored, err = b.store.GetEndpoint(t.Context(), e.ID)
	require.NoError(t, err)
	require.Equal(t, "redis", stored.Type)
	require.Nil(t, stored.DestinationCredentials)

	requireFieldError(t, http.StatusBadRequest, b.do(t, "PATCH", "/v1/endpoints/"+e.ID, map[string]any{"type": "http"},
		docBlind("whether the stored endpoint has a url is not the document's")), "url")
	requireFieldError(t, http.StatusBadRequest, b.do(t, "PATCH", "/v1/endpoints/"+e.ID, map[string]any{"url": "https://acme.example/hook"},
		docBlind("the stored type is not the document's")), "url")
	r = b.do(t, "PATCH", "/v1/endpoints/"+e.ID, map[string]any{"type": "http", "url": "https://acme.example/hook"})
	requireStatus(t, http.StatusOK, r)
	e = decodeJSON[endpointJSON](t, r)
	require.Equal(t, "http", e.Type)
	require.Equal(t, "https://acme.example/hook", e.URL)
	require.Equal(t, "null", string(e.Destination))
}

// TestDestinationEndpointRejectsBadInput: every bad type, destination or
// combination with url is a 400 naming the field, and nothing is
// written; a destination host on a private address is refused unless
// private targets are allowed.
func TestDestinationEndpointRejectsBadInput(t *testing.T) {
	t.Parallel()
	_, b := setup(t, func(d *api.Deps) { d.Resolver = hosts{"mq.internal.example": {"10.1.2.3"}} })
	rabbit := func(kv ...any) map[string]any {
		m := map[string]any{"url": "amqp://mq.acme.example", "exchange": "x"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	schemaBlind := docBlind("the destination's rules beyond its shape are the package's")
	for _, tc := range []struct {
		name  string
		req   map[string]any
		field string
		opts  []callOpt
	}{
		{"unknown type", map[string]any{"type": "smtp", "destination": map[string]any{}}, "type", nil},
		{"no destination", map[string]any{"type": "rabbitmq"}, "destination", nil},
		{"http with a destination", map[string]any{"url": "https://acme.example/h", "destination": rabbit()}, "destination", []callOpt{docBlind("an http request's destination is not refused by the schema")}},
		{"url with a destination type", map[string]any{"type": "rabbitmq", "url": "https://acme.example/h", "destination": rabbit()}, "url", []callOpt{docBlind("url beside a destination is not refused by the schema")}},
		{"unknown destination field", map[string]any{"type": "rabbitmq", "destination": rabbit("vhost", "v")}, "destination.vhost", nil},
		{"wrong scheme", map[string]any{"type": "rabbitmq", "destination": rabbit("url", "http://mq.acme.example")}, "destination.url", []callOpt{schemaBlind}},
		{"credentials in the url", map[string]any{"type": "rabbitmq", "destination": rabbit("url", "amqp://u:p@mq.acme.example")}, "destination.url", []callOpt{schemaBlind}},
		{"default exchange without routing key", map[string]any{"type": "rabbitmq", "destination": rabbit("exchange", "")}, "destination.routing_key", []callOpt{schemaBlind}},
		{"password without username", map[string]any{"type": "rabbitmq", "destination": rabbit("password", "p")}, "destination.username", []callOpt{schemaBlind}},
		{"kafka without brokers", map[string]any{"type": "kafka", "destination": map[string]any{"brokers": []string{}, "topic": "t"}}, "destination.brokers", nil},
		{"sqs without credentials", map[string]any{"type": "sqs", "destination": map[string]any{"queue_url": "https://sqs.us-east-1.amazonaws.com/1/q", "region": "us-east-1"}}, "destination.access_key_id", []callOpt{docBlind("write-only credentials are not required by the shared schema")}},
		{"private host", map[string]any{"type": "rabbitmq", "destination": rabbit("url", "amqp://mq.internal.example")}, "destination.url", []callOpt{docBlind("resolution is not the document's")}},
		{"loopback kafka broker", map[string]any{"type": "kafka", "destination": map[string]any{"brokers": []string{"kafka.acme.example:9092", "127.0.0.1:9092"}, "topic": "t"}}, "destination.brokers[1]", []callOpt{docBlind("resolution is not the document's")}},
	} {
		tc.req["tenant_id"] = "badinput"
		p := requireFieldError(t, http.StatusBadRequest, b.do(t, "POST", "/v1/endpoints", tc.req, tc.opts...), tc.field)
		require.NotEmpty(t, p.Errors[0].Message, tc.name)
	}
	list := decodeJSON[listJSON[endpointJSON]](t, b.do(t, "GET", "/v1/endpoints?tenant_id=badinput", nil))
	require.Empty(t, list.Data, "nothing written")
}

// TestAllowPrivateTargetsLiftsTheDestinationGuard: with private targets
// allowed, a destination on a loopback broker is accepted.
func TestAllowPrivateTargetsLiftsTheDestinationGuard(t *testing.T) {
	t.Parallel()
	_, b := setup(t, func(d *api.Deps) { d.AllowPrivateTargets = true })
	r := b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "type": "nats",
		"destination": map[string]any{"url": "nats://127.0.0.1:4222", "subject": "hooks.a"}})
	requireStatus(t, http.StatusCreated, r)
	require.True(t, strings.Contains(string(r.Body), `"subject":"hooks.a"`))
	var e endpointJSON
	require.NoError(t, json.Unmarshal(r.Body, &e))
	require.Equal(t, "nats", e.Type)
}

// TestDestinationRefusesCustomHeaders: an endpoint's own headers go with
// HTTP requests only (a destination's message carries the Standard
// Webhooks names and the event type), so a destination endpoint refuses
// them, naming the field, on create and on every update that would leave
// it holding some, and nothing is written; clearing them is accepted.
func TestDestinationRefusesCustomHeaders(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	redis := map[string]any{"url": "redis://redis.acme.example", "stream": "hooks"}
	headers := map[string]string{"X-Tenant": "acme"}

	r := b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "type": "redis", "destination": redis, "headers": headers})
	requireFieldError(t, http.StatusBadRequest, r, "headers")
	var n int
	require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM endpoints`).Scan(&n))
	require.Zero(t, n, "nothing written")

	dest := decodeJSON[endpointJSON](t, b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "type": "redis", "destination": redis, "headers": map[string]string{}}))
	web := decodeJSON[endpointJSON](t, b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/hooks", "headers": headers}))
	stored, err := b.store.GetEndpoint(t.Context(), web.ID)
	require.NoError(t, err)
	require.Equal(t, headers, stored.Headers)

	// The document can tell only the second: the others depend on the
	// endpoint as stored.
	asStored := docBlind("the endpoint's stored type or headers")
	for _, tc := range []struct {
		name string
		id   string
		body map[string]any
		opts []callOpt
	}{
		{"headers on a destination", dest.ID, map[string]any{"headers": headers}, []callOpt{asStored}},
		{"headers with a change to a destination", web.ID, map[string]any{"type": "redis", "destination": redis, "headers": headers}, nil},
		{"a change to a destination keeping its headers", web.ID, map[string]any{"type": "redis", "destination": redis}, []callOpt{asStored}},
	} {
		r := b.do(t, "PATCH", "/v1/endpoints/"+tc.id, tc.body, tc.opts...)
		requireFieldError(t, http.StatusBadRequest, r, "headers")
		e, err := b.store.GetEndpoint(t.Context(), tc.id)
		require.NoError(t, err, tc.name)
		if tc.id == web.ID {
			require.Equal(t, "https://acme.example/hooks", e.URL, tc.name)
			require.Equal(t, headers, e.Headers, tc.name)
		} else {
			require.Empty(t, e.Headers, tc.name)
		}
	}

	// Cleared in the same update, the change is accepted; a destination's
	// other fields change as before.
	r = b.do(t, "PATCH", "/v1/endpoints/"+web.ID, map[string]any{"type": "redis", "destination": redis, "headers": map[string]string{}})
	requireStatus(t, http.StatusOK, r)
	stored, err = b.store.GetEndpoint(t.Context(), web.ID)
	require.NoError(t, err)
	require.Equal(t, "redis", stored.Type)
	require.Empty(t, stored.Headers)
	r = b.do(t, "PATCH", "/v1/endpoints/"+dest.ID, map[string]any{"description": "billing stream", "headers": map[string]string{}})
	requireStatus(t, http.StatusOK, r)
}
