package api_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// badCase is one bad request: the status it must get and the fields its
// problem must name.
type badCase struct {
	name   string
	body   string
	opts   []callOpt
	status int
	fields []string
}

// set returns base (a JSON object) with key set to v (deleted when v is
// the deleteKey sentinel).
func set(base map[string]any, kv ...any) string {
	m := map[string]any{}
	for k, v := range base {
		m[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		k := kv[i].(string)
		if kv[i+1] == deleteKey {
			delete(m, k)
		} else {
			m[k] = kv[i+1]
		}
	}
	raw, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(raw)
}

type deleteKeyT struct{}

var deleteKey = deleteKeyT{}

func bad(name string, status int, body string, fields ...string) badCase {
	return badCase{name: name, body: body, status: status, fields: fields}
}

func (c badCase) with(opts ...callOpt) badCase {
	c.opts = append(c.opts, opts...)
	return c
}

// secretOf returns a whsec_ secret of an n-byte key in the given encoding.
// The key's bytes make both + and / appear in standard base64.
func secretOf(n int, enc *base64.Encoding) string {
	key := make([]byte, n)
	for i := range key {
		key[i] = []byte{0xfb, 0xff, 0xbf}[i%3] ^ byte(i/3)
	}
	return "whsec_" + enc.EncodeToString(key)
}

// nonCanonical flips unused low bits of the last base64 character of a
// padded secret: it decodes to the same key but does not round-trip.
func nonCanonical(secret string) string {
	i := strings.LastIndexFunc(secret, func(r rune) bool { return r != '=' })
	c := secret[i]
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	flipped := alphabet[strings.IndexByte(alphabet, c)^1]
	return secret[:i] + string(flipped) + secret[i+1:]
}

func manyKeys(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("k%d", i)] = "v"
	}
	return m
}

func manyStrings(n int, s string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

const (
	kinFirstValue = "kin-openapi decodes only the first JSON value of a body"
	sizeLimit     = "a size limit has no schema"
	kinUTF8       = "kin-openapi, like encoding/json, replaces invalid UTF-8 rather than rejecting it"
)

// recased returns the JSON object valid with its first member (by name)
// renamed to upper case, and the new name.
func recased(valid string) (body, name string) {
	var m map[string]any
	if err := json.Unmarshal([]byte(valid), &m); err != nil || len(m) == 0 {
		panic(fmt.Sprintf("recased: %q is not a JSON object with members", valid))
	}
	first := slices.Min(slices.Collect(maps.Keys(m)))
	name = strings.ToUpper(first)
	m[name] = m[first]
	delete(m, first)
	raw, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(raw), name
}

// commonBodyCases are the faults of any JSON body.
func commonBodyCases(valid string) []badCase {
	upper, upperName := recased(valid)
	return []badCase{
		// encoding/json alone would take it as the field it names.
		bad("a known field in upper case", 400, upper, upperName),
		bad("empty body", 400, "", "body"),
		bad("not JSON", 400, "tenant_id=acme&url=x", "body"),
		bad("truncated JSON", 400, valid[:len(valid)-1], "body"),
		bad("broken JSON", 400, `{"tenant_id": }`, "body"),
		bad("an array", 400, `[`+valid+`]`, "body"),
		bad("a string", 400, `"`+strings.ReplaceAll(valid, `"`, `'`)+`"`, "body"),
		bad("a number", 400, `42`, "body"),
		bad("a field with an empty name", 400, valid[:len(valid)-1]+`,"":1}`, "body"),
		bad("an unknown field with a quote", 400, valid[:len(valid)-1]+`,"a\"b":1}`, `a"b`),
		bad("trailing garbage", 400, valid+` x`, "body").with(docBlind(kinFirstValue)),
		bad("a second object", 400, valid+valid, "body").with(docBlind(kinFirstValue)),
		bad("a trailing bracket", 400, valid+`]`, "body").with(docBlind(kinFirstValue)),
		bad("text/plain", 415, valid).with(withContentType("text/plain")),
		bad("xml", 415, valid).with(withContentType("application/xml")),
		bad("form", 415, valid).with(withContentType("application/x-www-form-urlencoded")),
		bad("multipart", 415, valid).with(withContentType("multipart/form-data; boundary=x")),
		bad("unparseable content type", 415, valid).with(withContentType("application/json; charset"),
			docBlind("kin-openapi matches the media type before the malformed parameter")),
	}
}

// requireRejected sends every case and checks it is refused with the
// named fields and writes nothing. after runs extra checks.
func (b *testBundle) requireRejected(t *testing.T, method, path string, cases []badCase, after func(t *testing.T)) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := b.counts(t)
			r := b.do(t, method, path, c.body, c.opts...)
			p := requireProblem(t, c.status, r)
			var fields []string
			for _, f := range p.Errors {
				fields = append(fields, f.Field)
				require.NotEmpty(t, f.Message)
			}
			require.ElementsMatch(t, c.fields, fields, "%s", r.Body)
			require.Equal(t, path, p.Instance)
			require.Equal(t, before, b.counts(t), "nothing written")
			if after != nil {
				after(t)
			}
		})
	}
}

func TestCreateEndpointRejectsBadInput(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b.createEndpoint(t, "acme")
	valid := map[string]any{"tenant_id": "acme", "url": "https://acme.example/hook"}
	u := func(s string) string { return set(valid, "url", s) }
	cases := []badCase{
		// The URL.
		bad("url without a scheme", 400, u("acme.example/hook"), "url"),
		bad("relative url", 400, u("/hook"), "url"),
		bad("ftp url", 400, u("ftp://acme.example/hook"), "url"),
		bad("javascript url", 400, u("javascript:alert(1)"), "url"),
		bad("url without a host", 400, u("https://"), "url"),
		bad("url with an empty host", 400, u("https:///hook"), "url"),
		bad("url with only a port", 400, u("https://:443/hook"), "url"),
		bad("url with credentials", 400, u("https://user:secret@acme.example/hook"), "url"),
		bad("url with a user", 400, u("https://user@acme.example/hook"), "url"),
		bad("url with a fragment", 400, u("https://acme.example/hook#top"), "url"),
		bad("url with a space", 400, u("https://acme.example/a hook"), "url"),
		bad("url with a bad port", 400, u("https://acme.example:44x/hook"), "url"),
		bad("url with a bad escape", 400, u("https://acme.example/%zz"), "url"),
		bad("url too long", 400, u("https://acme.example/"+strings.Repeat("x", 2048)), "url"),
		bad("empty url", 400, u(""), "url"),
		bad("no url", 400, set(valid, "url", deleteKey), "url"),
		// The tenant.
		bad("no tenant", 400, set(valid, "tenant_id", deleteKey), "tenant_id"),
		bad("empty tenant", 400, set(valid, "tenant_id", ""), "tenant_id"),
		bad("tenant starting with a dash", 400, set(valid, "tenant_id", "-acme"), "tenant_id"),
		bad("tenant with a space", 400, set(valid, "tenant_id", "acme corp"), "tenant_id"),
		bad("tenant with a non-ASCII letter", 400, set(valid, "tenant_id", "acmé"), "tenant_id"),
		bad("tenant too long", 400, set(valid, "tenant_id", strings.Repeat("a", 129)), "tenant_id"),
		// Event type filters.
		bad("filter with an empty name", 400, set(valid, "event_types", []string{"invoice..paid"}), "event_types[0]"),
		bad("filter with a partial wildcard", 400, set(valid, "event_types", []string{"invoice.paid", "inv*"}), "event_types[1]"),
		bad("filter with an inner wildcard", 400, set(valid, "event_types", []string{"a.*.b"}), "event_types[0]"),
		bad("filter with a leading wildcard", 400, set(valid, "event_types", []string{"*.paid"}), "event_types[0]"),
		bad("filter with two wildcards", 400, set(valid, "event_types", []string{"invoice.*.*"}), "event_types[0]"),
		bad("empty filter", 400, set(valid, "event_types", []string{""}), "event_types[0]"),
		bad("filter with a space", 400, set(valid, "event_types", []string{"invoice paid"}), "event_types[0]"),
		bad("filter too long", 400, set(valid, "event_types", []string{strings.Repeat("a", 129)}), "event_types[0]"),
		bad("too many filters", 400, set(valid, "event_types", manyStrings(101, "a")), "event_types"),
		bad("several bad filters", 400, set(valid, "event_types", []string{"ok", "a..b", "ok.*", "*x"}), "event_types[1]", "event_types[3]"),
		// The secret.
		bad("secret without the prefix", 400, set(valid, "secret", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), "secret"),
		bad("secret that is only the prefix", 400, set(valid, "secret", "whsec_"), "secret"),
		bad("secret with a short key", 400, set(valid, "secret", secretOf(16, base64.StdEncoding)), "secret"),
		bad("secret with a 23-byte key", 400, set(valid, "secret", secretOf(23, base64.StdEncoding)), "secret"),
		bad("secret with a long key", 400, set(valid, "secret", secretOf(65, base64.StdEncoding)), "secret"),
		bad("secret in URL-safe base64", 400, set(valid, "secret", secretOf(32, base64.URLEncoding)), "secret"),
		bad("secret without padding", 400, set(valid, "secret", secretOf(32, base64.RawStdEncoding)), "secret"),
		bad("secret with non-canonical padding bits", 400, set(valid, "secret", nonCanonical(secretOf(32, base64.StdEncoding))), "secret"),
		bad("secret with a newline", 400, set(valid, "secret", secretOf(30, base64.StdEncoding)[:20]+"\n"+secretOf(30, base64.StdEncoding)[20:]), "secret"),
		// Metadata.
		bad("metadata value with a newline", 400, set(valid, "metadata", map[string]string{"team": "a\nb"}), "metadata.team"),
		bad("metadata value with a NUL", 400, set(valid, "metadata", map[string]string{"team": "a\x00"}), "metadata.team"),
		bad("metadata value with a C1 control", 400, set(valid, "metadata", map[string]string{"team": "a\u0085"}), "metadata.team"),
		bad("metadata value too long", 400, set(valid, "metadata", map[string]string{"team": strings.Repeat("v", 1025)}), "metadata.team"),
		bad("metadata key with a space", 400, set(valid, "metadata", map[string]string{"a key": "v"}), "metadata"),
		bad("empty metadata key", 400, set(valid, "metadata", map[string]string{"": "v"}), "metadata"),
		bad("metadata key too long", 400, set(valid, "metadata", map[string]string{strings.Repeat("k", 65): "v"}), "metadata"),
		bad("too many metadata keys", 400, set(valid, "metadata", manyKeys(51)), "metadata"),
		// Other fields.
		bad("description too long", 400, set(valid, "description", strings.Repeat("d", 1025)), "description"),
		bad("bad traffic class", 400, set(valid, "traffic_class", "Fast!"), "traffic_class"),
		bad("upper-case traffic class", 400, set(valid, "traffic_class", "AUTO"), "traffic_class"),
		bad("traffic class too long", 400, set(valid, "traffic_class", strings.Repeat("c", 65)), "traffic_class"),
		// Wrong JSON types.
		bad("tenant is a number", 400, set(valid, "tenant_id", 5), "tenant_id"),
		bad("url is a boolean", 400, set(valid, "url", true), "url"),
		bad("description is an object", 400, set(valid, "description", map[string]any{}), "description"),
		bad("event types is a string", 400, set(valid, "event_types", "invoice.*"), "event_types"),
		bad("event type is a number", 400, set(valid, "event_types", []any{1}), "event_types"),
		bad("metadata is an array", 400, set(valid, "metadata", []string{"a"}), "metadata"),
		bad("metadata value is a number", 400, set(valid, "metadata", map[string]any{"a": 1}), "metadata"),
		bad("secret is a number", 400, set(valid, "secret", 1), "secret"),
		// Unknown fields.
		bad("unknown field", 400, set(valid, "colour", "red"), "colour"),
		bad("an id", 400, set(valid, "id", "ep_01KKNTQ1T8VQ9FF8Q7A3NCTRXR"), "id"),
		bad("a status", 400, set(valid, "status", "disabled"), "status"),
		bad("a field repeated in another case", 400, set(valid, "Tenant_ID", "globex"), "Tenant_ID"),
		bad("several fields in another case", 400, `{"Tenant_Id":"acme","URL":"https://acme.example/hook","colour":"red"}`, "Tenant_Id", "URL", "colour"),
		// Several faults are all named.
		bad("every fault at once", 400, `{"tenant_id":"","url":"ftp://x","event_types":["a..b"],"secret":"nope","metadata":{"k":"\n"},"description":"`+strings.Repeat("d", 1025)+`","traffic_class":"X"}`,
			"tenant_id", "url", "event_types[0]", "secret", "metadata.k", "description", "traffic_class"),
		// Size.
		bad("body over 64 KiB", 413, set(valid, "description", strings.Repeat("d", 64<<10)), "body").with(docBlind(sizeLimit)),
		bad("body far over the limit", 413, set(valid, "description", strings.Repeat("d", 8<<20)), "body").with(docBlind(sizeLimit)),
	}
	cases = append(cases, commonBodyCases(set(valid))...)
	b.requireRejected(t, "POST", "/v1/endpoints", cases, nil)
}

func TestUpdateEndpointRejectsBadInput(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	e := b.createEndpoint(t, "acme", "invoice.*")
	path := "/v1/endpoints/" + e.ID
	valid := map[string]any{"description": "new"}
	cases := []badCase{
		bad("bad url", 400, set(valid, "url", "ftp://acme.example"), "url"),
		bad("url with credentials", 400, set(valid, "url", "https://u:p@acme.example"), "url"),
		bad("empty url", 400, set(valid, "url", ""), "url"),
		bad("bad filter", 400, set(valid, "event_types", []string{"inv*"}), "event_types[0]"),
		bad("bad metadata", 400, set(valid, "metadata", map[string]string{"k": "\r"}), "metadata.k"),
		bad("bad traffic class", 400, set(valid, "traffic_class", ""), "traffic_class"),
		bad("description too long", 400, set(valid, "description", strings.Repeat("d", 1025)), "description"),
		bad("the tenant cannot change", 400, set(valid, "tenant_id", "globex"), "tenant_id"),
		bad("the secret is rotated, not set", 400, set(valid, "secret", secretOf(32, base64.StdEncoding)), "secret"),
		bad("the status has its own routes", 400, set(valid, "status", "disabled"), "status"),
		bad("a url in another case", 400, set(valid, "Url", "https://evil.example/hook"), "Url"),
		bad("url is a number", 400, set(valid, "url", 1), "url"),
		bad("event types is an object", 400, set(valid, "event_types", map[string]any{}), "event_types"),
		bad("body over 64 KiB", 413, set(valid, "description", strings.Repeat("d", 64<<10)), "body").with(docBlind(sizeLimit)),
	}
	cases = append(cases, commonBodyCases(set(valid))...)
	b.requireRejected(t, "PATCH", path, cases, func(t *testing.T) {
		got := decodeJSON[endpointJSON](t, b.do(t, "GET", path, nil))
		require.Equal(t, e, got, "the endpoint is unchanged")
	})
}

func TestCreateMessageRejectsBadInput(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	// Subscribers, so a message that got through would write deliveries and jobs.
	b.createEndpoint(t, "acme")
	b.createEndpoint(t, "acme", "invoice.*")
	valid := map[string]any{"tenant_id": "acme", "event_type": "invoice.paid", "payload": map[string]any{"a": 1}, "idempotency_key": "k1"}
	ev := func(s string) string { return set(valid, "event_type", s) }
	cases := []badCase{
		bad("no tenant", 400, set(valid, "tenant_id", deleteKey), "tenant_id"),
		bad("bad tenant", 400, set(valid, "tenant_id", "acme/eu"), "tenant_id"),
		bad("no event type", 400, set(valid, "event_type", deleteKey), "event_type"),
		bad("empty event type", 400, ev(""), "event_type"),
		bad("event type with an empty name", 400, ev("invoice..paid"), "event_type"),
		bad("event type with a leading dot", 400, ev(".invoice"), "event_type"),
		bad("event type with a trailing dot", 400, ev("invoice."), "event_type"),
		bad("event type that is a pattern", 400, ev("invoice.*"), "event_type"),
		bad("event type that is a wildcard", 400, ev("*"), "event_type"),
		bad("event type with a space", 400, ev("invoice paid"), "event_type"),
		bad("event type too long", 400, ev(strings.Repeat("e", 129)), "event_type"),
		bad("no payload", 400, set(valid, "payload", deleteKey), "payload"),
		bad("idempotency key too long", 400, set(valid, "idempotency_key", strings.Repeat("k", 257)), "idempotency_key"),
		bad("idempotency key with a tab", 400, set(valid, "idempotency_key", "a\tb"), "idempotency_key"),
		bad("idempotency key is a number", 400, set(valid, "idempotency_key", 7), "idempotency_key"),
		bad("tenant is a number", 400, set(valid, "tenant_id", 7), "tenant_id"),
		bad("event type is an array", 400, set(valid, "event_type", []string{"a"}), "event_type"),
		bad("unknown field", 400, set(valid, "endpoint_id", "ep_01KKNTQ1T8VQ9FF8Q7A3NCTRXR"), "endpoint_id"),
		bad("payload with invalid UTF-8", 400, "{\"tenant_id\":\"acme\",\"event_type\":\"a\",\"payload\":\"caf\xe9\"}", "payload").with(docBlind(kinUTF8)),
		bad("payload is not JSON", 400, `{"tenant_id":"acme","event_type":"a","payload":{a:1}}`, "body"),
		bad("every fault at once", 400, `{"tenant_id":"","event_type":"a..b","idempotency_key":"\u0007"}`, "tenant_id", "event_type", "payload", "idempotency_key"),
		bad("payload over 1 MiB", 413, set(valid, "payload", strings.Repeat("p", 1<<20)), "payload").with(docBlind(sizeLimit)),
		bad("array payload just over 1 MiB", 413, `{"tenant_id":"acme","event_type":"a","payload":[`+strings.Repeat(`1,`, 1<<19)+`1]}`, "payload").with(docBlind(sizeLimit)),
		bad("body far over the limit", 413, set(valid, "payload", strings.Repeat("p", 16<<20)), "body").with(docBlind(sizeLimit)),
	}
	cases = append(cases, commonBodyCases(set(valid))...)
	b.requireRejected(t, "POST", "/v1/messages", cases, nil)
}
