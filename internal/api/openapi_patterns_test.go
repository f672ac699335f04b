package api

import (
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/hookd/hookd/internal/api/openapitest"
	"github.com/hookd/hookd/internal/delivery"
)

// TestOpenAPIPatternsMatchValidation checks the document's field schemas
// against the Go validators on generated values: for ids, event types,
// filters, traffic classes, secrets, metadata, descriptions and
// idempotency keys the two agree exactly; for URLs, whatever the document
// accepts the server accepts (the server also runs url.Parse, whose
// grammar no pattern spells out in full).
func TestOpenAPIPatternsMatchValidation(t *testing.T) {
	t.Parallel()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openAPIDocument)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(loader.Context))
	schemas := doc.Components.Schemas
	compiled, err := openapitest.New(openAPIDocument, doc)
	require.NoError(t, err)
	docAccepts := func(schema *openapi3.Schema, v any) bool {
		return compiled.Validate(schema, v) == nil
	}
	goAccepts := func(check func(*fieldErrors)) bool {
		var fe fieldErrors
		check(&fe)
		return fe.err() == nil
	}

	// near draws strings of the characters of alpha, of a short length or
	// one around a limit, now and then with one odd character in.
	odd := []rune(" \té/*.:@=+\n\x00\u0085\u2028A")
	clean := func(alpha string, limits ...int) *rapid.Generator[string] {
		lengths := []int{1, 2, 3}
		for _, l := range limits {
			lengths = append(lengths, l-1, l)
		}
		return rapid.Custom(func(t *rapid.T) string {
			n := rapid.SampledFrom(lengths).Draw(t, "len")
			return rapid.StringOfN(rapid.RuneFrom([]rune(alpha)), n, n, -1).Draw(t, "s")
		})
	}
	near := func(alpha string, limits ...int) *rapid.Generator[string] {
		lengths := []int{0, 1, 2, 3}
		for _, l := range limits {
			lengths = append(lengths, l-1, l, l+1)
		}
		return rapid.Custom(func(t *rapid.T) string {
			n := rapid.SampledFrom(lengths).Draw(t, "len")
			rs := []rune(rapid.StringOfN(rapid.RuneFrom([]rune(alpha)), n, n, -1).Draw(t, "s"))
			if n > 0 && rapid.IntRange(0, 3).Draw(t, "spoil") == 0 {
				rs[rapid.IntRange(0, n-1).Draw(t, "at")] = rapid.SampledFrom(odd).Draw(t, "odd")
			}
			return string(rs)
		})
	}
	// agreeAs checks that schema accepts as(v) exactly when check finds no
	// fault with v.
	agreeAs := func(name string, schema *openapi3.Schema, gen *rapid.Generator[string], as func(string) any, check func(*fieldErrors, string)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rapid.Check(t, func(rt *rapid.T) {
				v := gen.Draw(rt, "value")
				doc, server := docAccepts(schema, as(v)), goAccepts(func(fe *fieldErrors) { check(fe, v) })
				if doc != server {
					rt.Fatalf("%q: the document says %v, the server %v", v, doc, server)
				}
			})
		})
	}
	agree := func(name string, schema *openapi3.Schema, gen *rapid.Generator[string], check func(*fieldErrors, string)) {
		agreeAs(name, schema, gen, func(v string) any { return v }, check)
	}

	agree("tenant_id", schemas["TenantID"].Value, near("aZ09._:@-", 128), func(fe *fieldErrors, v string) { validateTenantID(fe, "f", v) })
	// Every name of one to four dotted segments, the shape event types take.
	segments := []string{"a", "b_c", "X-9", "*", "", "é", "a*"}
	dotted := []string{""}
	for range 4 {
		for _, prefix := range dotted {
			for _, seg := range segments {
				if prefix == "" {
					dotted = append(dotted, seg)
				} else if strings.Count(prefix, ".") < 3 {
					dotted = append(dotted, prefix+"."+seg)
				}
			}
		}
		dotted = slices.Compact(slices.Sorted(slices.Values(dotted)))
	}
	exhaustive := func(name string, schema *openapi3.Schema, values []string, check func(*fieldErrors, string)) {
		t.Run(name+" (every dotted name)", func(t *testing.T) {
			t.Parallel()
			for _, v := range values {
				doc, server := docAccepts(schema, v), goAccepts(func(fe *fieldErrors) { check(fe, v) })
				require.Equal(t, server, doc, "%q: does the document accept it?", v)
			}
		})
	}
	exhaustive("event_type", schemas["EventType"].Value, dotted, func(fe *fieldErrors, v string) { validateEventType(fe, "f", v) })
	exhaustive("event type filter", schemas["EventTypeFilter"].Value, dotted, func(fe *fieldErrors, v string) {
		validateEventFilters(fe, "f", []string{v})
	})
	agree("event_type", schemas["EventType"].Value, near("ab_-.", 128), func(fe *fieldErrors, v string) { validateEventType(fe, "f", v) })
	agree("event type filter", schemas["EventTypeFilter"].Value, near("ab_-..*", 128), func(fe *fieldErrors, v string) {
		validateEventFilters(fe, "f", []string{v})
	})
	agree("token name", schemas["TokenName"].Value, near("aZ09._@-", 64), func(fe *fieldErrors, v string) {
		if err := ValidateTokenName(v); err != nil {
			fe.add("name", err.Error())
		}
	})
	for _, v := range []string{"bootstrap", "BootStrap", "bootstrap2", "xbootstrap"} {
		require.Equal(t, ValidateTokenName(v) == nil, docAccepts(schemas["TokenName"].Value, v), "token name %q", v)
	}
	agree("token id", schemas["TokenID"].Value, near("tok_01KKNTQ9B6S4W7ZQ3GJ8XKQF2HIiLlOoUu", 30), func(fe *fieldErrors, v string) {
		if !tokenIDPattern.MatchString(v) {
			fe.add("id", "not a token id")
		}
	})
	// Whatever expiry the server takes the document takes (the bounds
	// have no schema).
	expiry := schemas["CreateTokenRequest"].Value.Properties["expires_in"].Value
	t.Run("expires_in", func(t *testing.T) {
		t.Parallel()
		for _, v := range []string{"1m", "720h", "1.5h", "1h30m", "90m0s", "87600h", "3600000ms", "60000000000ns", "60s", "2h45m30.5s"} {
			_, err := ParseTokenExpiry(v)
			require.NoError(t, err, v)
			require.True(t, docAccepts(expiry, v), "%q: the server takes it, the document does not", v)
		}
		rapid.Check(t, func(rt *rapid.T) {
			v := near("0123456789.hmsnuµ", 8).Draw(rt, "value")
			if _, err := ParseTokenExpiry(v); err == nil && !docAccepts(expiry, v) {
				rt.Fatalf("%q: the server takes it, the document does not", v)
			}
		})
	})
	agree("traffic_class", schemas["TrafficClass"].Value, near("az09_-", 64), func(fe *fieldErrors, v string) { validateTrafficClass(fe, "f", v) })
	agree("description", schemas["Description"].Value, near("aé😀\n", 1024), func(fe *fieldErrors, v string) { validateDescription(fe, "f", v) })
	key := schemas["CreateMessageRequest"].Value.Properties["idempotency_key"].Value
	agree("idempotency_key", key, near("a-é😀", 256), func(fe *fieldErrors, v string) {
		if err := (createMessageRequest{TenantID: "t", EventType: "e", Payload: []byte("1"), IdempotencyKey: v}).validate(); err != nil {
			fe.add("idempotency_key", err.Error())
		}
	})

	t.Run("secret", func(t *testing.T) {
		t.Parallel()
		// Exhaustively over key lengths, encodings and the last data
		// character (which holds the padding bits), then with random damage.
		schema := schemas["Secret"].Value
		const std = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
		encodings := []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding}
		check := func(t require.TestingT, s string) {
			_, err := delivery.ParseSecret(s)
			require.Equal(t, err == nil, docAccepts(schema, s), "%q: the server says %v", s, err)
		}
		key := make([]byte, 80)
		for i := range key {
			key[i] = byte(i*151 + 7)
		}
		for n := 0; n <= len(key); n++ {
			for _, enc := range encodings {
				s := "whsec_" + enc.EncodeToString(key[:n])
				check(t, s)
				if i := strings.LastIndexAny(s, std); i >= len("whsec_") {
					for _, c := range std {
						check(t, s[:i]+string(c)+s[i+1:])
					}
				}
			}
		}
		rapid.Check(t, func(rt *rapid.T) {
			key := rapid.SliceOfN(rapid.Byte(), 20, 70).Draw(rt, "key")
			s := "whsec_" + rapid.SampledFrom(encodings).Draw(rt, "encoding").EncodeToString(key)
			i := rapid.IntRange(0, len(s)-1).Draw(rt, "at")
			s = s[:i] + rapid.SampledFrom([]string{"A", "/", "-", "=", "==", "\n", " ", ""}).Draw(rt, "with") + s[i+1:]
			check(rt, s)
		})
	})

	metadataSchema := schemas["Metadata"].Value
	agreeAs("metadata key", metadataSchema, near("aZ09_.-", 64), func(k string) any { return map[string]any{k: "v"} }, func(fe *fieldErrors, k string) {
		validateMetadata(fe, "f", map[string]string{k: "v"})
	})
	agreeAs("metadata value", metadataSchema, near("aé", 1024), func(v string) any { return map[string]any{"k": v} }, func(fe *fieldErrors, v string) {
		validateMetadata(fe, "f", map[string]string{"k": v})
	})

	t.Run("metadata", func(t *testing.T) {
		t.Parallel()
		schema := schemas["Metadata"].Value
		rapid.Check(t, func(rt *rapid.T) {
			n := rapid.SampledFrom([]int{0, 1, 2, 49, 50, 51}).Draw(rt, "keys")
			m := rapid.MapOfN(clean("aZ09_.-", 64), clean("aé", 1024), n, n).Draw(rt, "metadata")
			if n > 0 && rapid.Bool().Draw(rt, "spoil") {
				// One bad key or value, or one at its limit.
				k := rapid.SampledFrom(slices.Sorted(maps.Keys(m))).Draw(rt, "entry")
				if rapid.Bool().Draw(rt, "key") {
					v := m[k]
					delete(m, k)
					m[near("aZ09_.-", 64).Draw(rt, "new key")] = v
				} else {
					m[k] = near("aé", 1024).Draw(rt, "new value")
				}
			}
			obj := map[string]any{}
			for k, v := range m {
				obj[k] = v
			}
			doc, server := docAccepts(schema, obj), goAccepts(func(fe *fieldErrors) { validateMetadata(fe, "f", m) })
			if doc != server {
				rt.Fatalf("%q: the document says %v, the server %v", m, doc, server)
			}
		})
	})

	t.Run("url", func(t *testing.T) {
		t.Parallel()
		schema := schemas["EndpointURL"].Value
		// Each part of a URL: its first options are good, the rest not.
		parts := [][]string{
			{"https", "http", "HTTPS", "ftp", "", "javascript"},
			{"://", ":/", ":", ""},
			{"", "user@", "u:p@", "@"},
			{"acme.example", "10.0.0.1", "[::1]", "a_b-c~d", "", "[]", "ex%41mple", "é.example", "a b", ":"},
			{"", ":443", ":8080", ":", ":99999", ":4x", ":-1"},
			{"", "/", "/hook", "/%41", "/é", "?q=1&r", "/a/b?c=d", "/a b", "/%zz", "/a#b", "/p?q#", "\x7f", "/\t", "#"},
		}
		check := func(t require.TestingT, u string) {
			if docAccepts(schema, u) {
				require.True(t, goAccepts(func(fe *fieldErrors) { validateEndpointURL(fe, "url", u) }),
					"%q: the document accepts it, the server does not", u)
			}
		}
		// Every option of one part with the others good, at every length
		// around the limit.
		for i := range parts {
			for _, option := range parts[i] {
				var b strings.Builder
				for j, p := range parts {
					if j == i {
						b.WriteString(option)
					} else {
						b.WriteString(p[0])
					}
				}
				u := b.String()
				check(t, u)
				if n := utf8.RuneCountInString(u); n < 2048 {
					check(t, u+strings.Repeat("x", 2047-n))
					check(t, u+strings.Repeat("x", 2048-n))
					check(t, u+strings.Repeat("é", 2049-n))
				}
			}
		}
		// And random mixes.
		rapid.Check(t, func(rt *rapid.T) {
			var b strings.Builder
			for i, p := range parts {
				b.WriteString(rapid.SampledFrom(p).Draw(rt, fmt.Sprint("part", i)))
			}
			check(rt, b.String())
		})
	})
}
