package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// The fuzz targets below drive the decode-and-validate path of request
// bodies: decode[T] (content type, size limit, strict JSON, one object)
// then T.validate. Seeds live in testdata/fuzz/<target>/.

func FuzzDecodeEndpoint(f *testing.F) {
	f.Add("application/json", []byte(`{"tenant_id":"acme","url":"https://acme.example/hook","event_types":["invoice.*"],"metadata":{"team":"billing"}}`))
	f.Add("", []byte(`{"url":"https://acme.example/v2","description":"é"}`))
	f.Add("application/json", []byte(`{"TENANT_ID":"acme","url":"https://acme.example/hook","Url":"https://evil.example/"}`))
	f.Add("application/json", []byte(`{"tenant_id":"acme","url":"https://acme.example/hook","headers":{"X-Key":"v","x-key":"w","Webhook-Id":"x","X-Bad":"a\r\nb"},"signing":"ed25519"}`))
	f.Add("application/json", []byte(`{"tenant_id":"acme","url":"https://acme.example/hook","ordering":"fifo","on_exhausted":"block","filter":{ "$or" : [{"a": 1}, {"b.0": {"$in": [null, "x"]}}]},"retry_schedule":["0s", " 1.5s"],"timeout":"5s"}`))
	f.Add("", []byte(`{"ordering":"unordered","filter":null,"retry_schedule":null,"timeout":null,"on_exhausted":"skip"}`))
	f.Add("application/json", []byte(`{"tenant_id":"acme","type":"rabbitmq","destination":{"url":"amqp://mq.acme.example","exchange":"x","username":"u","password":"p"}}`))
	f.Add("", []byte(`{"type":"kafka","destination":{"brokers":["k:9092"],"topic":"t","Password":"p"},"url":""}`))
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		checkDecode[createEndpointRequest](t, contentType, body, maxRequestBytes, nil)
		checkDecode[updateEndpointRequest](t, contentType, body, maxRequestBytes, nil)
	})
}

// FuzzDecodeEventType feeds event type bodies, schemas included, to the
// decoder and the schema compiler: no input may panic either, and an
// accepted schema compiles again.
func FuzzDecodeEventType(f *testing.F) {
	f.Add("application/json", []byte(`{"name":"invoice.paid","schema":{"type":"object","required":["amount"],"properties":{"amount":{"type":"integer","minimum":0}}}}`))
	f.Add("application/json", []byte(`{"name":"a","schema":{"$ref":"#/$defs/x","$defs":{"x":{"$ref":"#/$defs/x"}}}}`))
	f.Add("application/json", []byte(`{"schema":{"pattern":"(","$ref":"file:///etc/passwd"},"archived":true}`))
	f.Add("application/json", []byte(`{"schema":null,"description":"x"}`))
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		checkDecode(t, contentType, body, maxRequestBytes, func(t *testing.T, v createEventTypeRequest) {
			if !isNull(v.Schema) {
				_, err := compileSchema(v.Name, v.Schema)
				require.NoError(t, err)
			}
		})
		checkDecode[updateEventTypeRequest](t, contentType, body, maxRequestBytes, nil)
	})
}

func FuzzDecodeMessage(f *testing.F) {
	f.Add("application/json", []byte(`{"tenant_id":"acme","event_type":"invoice.paid","payload":{"a":[1,2]},"idempotency_key":"k"}`))
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		checkDecode(t, contentType, body, DefaultMaxPayloadBytes+messageEnvelopeBytes, func(t *testing.T, v createMessageRequest) {
			// What the handler does next must work on anything accepted:
			// compacting the payload, and storing it in a json column.
			var buf bytes.Buffer
			require.NoError(t, json.Compact(&buf, v.Payload))
			require.True(t, utf8.Valid(buf.Bytes()))
		})
	})
}

// checkDecode decodes body as a T and checks that decoding never panics,
// that a refusal is a 4xx problem naming what is wrong, and that an
// accepted value re-encodes to JSON that decodes and validates again to
// the same value.
func checkDecode[T validator](t *testing.T, contentType string, body []byte, limit int64, more func(*testing.T, T)) {
	t.Helper()
	v, err := decode[T](request(contentType, body), limit)
	if err != nil {
		rec := httptest.NewRecorder()
		writeProblem(rec, httptest.NewRequest("POST", "/fuzz", nil), slog.New(slog.DiscardHandler), err)
		require.Contains(t, []int{400, 413, 415}, rec.Code, "%v", err)
		require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
		var p Problem
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
		require.Equal(t, rec.Code, p.Status)
		if rec.Code != http.StatusUnsupportedMediaType {
			require.NotEmpty(t, p.Errors, "a refusal names the field at fault")
			for _, fe := range p.Errors {
				require.NotEmpty(t, fe.Field)
				require.NotEmpty(t, fe.Message)
			}
		}
		var ve *ValidationError
		if rec.Code == http.StatusBadRequest {
			require.True(t, errors.As(err, &ve))
		}
		return
	}
	// Accepted: every member was named exactly as a field of T.
	var members map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &members))
	names := jsonNames(reflect.TypeFor[T]())
	for name := range members {
		require.Contains(t, names, name, "accepted a member that is not exactly a field name")
	}
	// Accepted: it must survive a round trip. The re-encoding may be longer
	// than the original (escapes), so the size limit is not what is tested.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(v))
	again, err := decode[T](request("application/json", buf.Bytes()), int64(buf.Len())+1)
	require.NoError(t, err, "re-encoded: %s", buf.Bytes())
	require.True(t, sameRequest(v, again), "%#v\n%#v", v, again)
	if more != nil {
		more(t, v)
	}
}

func request(contentType string, body []byte) *http.Request {
	r := httptest.NewRequest("POST", "/fuzz", bytes.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	return r
}

// sameRequest compares two decoded requests, raw JSON payloads by their
// compacted form (re-encoding compacts them).
func sameRequest[T any](a, b T) bool {
	if am, ok := any(a).(createMessageRequest); ok {
		bm := any(b).(createMessageRequest)
		var ac, bc bytes.Buffer
		if json.Compact(&ac, am.Payload) != nil || json.Compact(&bc, bm.Payload) != nil {
			return false
		}
		if !bytes.Equal(ac.Bytes(), bc.Bytes()) {
			return false
		}
		am.Payload, bm.Payload = nil, nil
		return reflect.DeepEqual(am, bm)
	}
	switch av := any(a).(type) {
	case createEventTypeRequest:
		bv := any(b).(createEventTypeRequest)
		if !sameSchema(av.Schema, bv.Schema) {
			return false
		}
		av.Schema, bv.Schema = nil, nil
		return reflect.DeepEqual(av, bv)
	case updateEventTypeRequest:
		bv := any(b).(updateEventTypeRequest)
		if !sameSchema(av.Schema, bv.Schema) {
			return false
		}
		av.Schema, bv.Schema = nil, nil
		return reflect.DeepEqual(av, bv)
	}
	return reflect.DeepEqual(a, b)
}

// FuzzClientIP: whatever a client writes in X-Forwarded-For, clientIP
// returns a valid address, and the header changes nothing unless the peer
// is a trusted proxy.
func FuzzClientIP(f *testing.F) {
	f.Add("10.1.2.3:4000", "203.0.113.1")
	f.Add("10.1.2.3:4000", "1.1.1.1, 203.0.113.1:80, 10.9.9.9")
	f.Add("[fd00::1]:4000", "[2001:db8::1]:5555, bogus")
	f.Add("198.51.100.7:4000", "203.0.113.1")
	f.Add("not an address", ",,,")
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	f.Fuzz(func(t *testing.T, peer, xff string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = peer
		r.Header.Set("X-Forwarded-For", xff)
		got := clientIP(r, trusted)
		require.True(t, got.IsValid())
		if p := peerAddr(peer); !isTrusted(p, trusted) {
			require.Equal(t, p, got)
		}
		require.NotEmpty(t, clientKey(r, trusted))
	})
}

// FuzzDecodeBatch drives a batch of messages: the batch is decoded as
// one body, then each message alone as POST /v1/messages decodes it. A
// refused batch is a 4xx; a refused message is a 4xx problem whose every
// field is named under its index, messages[i].
func FuzzDecodeBatch(f *testing.F) {
	f.Add("application/json", []byte(`{"messages":[{"tenant_id":"acme","event_type":"invoice.paid","payload":{"a":1}},5,null,{"TENANT_ID":"x"},{"tenant_id":"acme","event_type":"a..b","payload":"\u00e9"}]}`))
	f.Add("", []byte(`{"messages":[]}`))
	f.Add("application/json", []byte(`{"messages":[{"payload":}]}`))
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		req, err := decode[batchRequest](request(contentType, body), minBatchBytes)
		if err != nil {
			require.Contains(t, []int{400, 413, 415}, problemOf(err).Status, "%v", err)
			return
		}
		require.NotEmpty(t, req.Messages)
		require.LessOrEqual(t, len(req.Messages), maxBatchMessages)
		for i, raw := range req.Messages {
			m, err := decodeBytes[createMessageRequest](raw, minBatchBytes)
			if err == nil {
				_, err = m.newMessage(DefaultMaxPayloadBytes)
			}
			if err == nil {
				continue
			}
			p := problemOf(inBatch(i, err))
			require.Contains(t, []int{400, 413}, p.Status, "%v", err)
			require.NotEmpty(t, p.Errors)
			prefix := fmt.Sprintf("messages[%d]", i)
			for _, fe := range p.Errors {
				require.True(t, fe.Field == prefix || strings.HasPrefix(fe.Field, prefix+"."), "%q is not under %s", fe.Field, prefix)
			}
		}
	})
}

// sameSchema compares raw schemas as JSON text without insignificant
// whitespace; absent and null are the same (no schema).
func sameSchema(a, b json.RawMessage) bool {
	if isNull(a) || isNull(b) {
		return isNull(a) == isNull(b)
	}
	return bytes.Equal(compactSchema(a), compactSchema(b))
}
