package filter_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hookd/hookd/internal/filter"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// matches parses f and evaluates it against the payload.
func matches(t *testing.T, f, eventType, payload string) bool {
	t.Helper()
	flt, err := filter.Parse([]byte(f))
	require.NoError(t, err, f)
	p, err := filter.DecodePayload([]byte(payload))
	require.NoError(t, err, payload)
	return flt.Match(eventType, p)
}

// TestMatch replays a table of payloads and filters: every operator on
// each JSON type, missing paths, nulls, arrays and nested arrays.
func TestMatch(t *testing.T) {
	t.Parallel()
	const order = `{"amount": 120, "currency": "EUR", "paid": true, "note": null,
		"customer": {"tier": "gold", "tags": ["vip", "eu"], "0": "zero"},
		"items": [{"sku": "A-1", "qty": 2}, {"sku": "B-2", "qty": 1}],
		"matrix": [[1, 2], [3, [4, 5]]], "big": 1e400, "empty": [], "obj": {}}`
	for _, c := range []struct {
		name, filter string
		want         bool
	}{
		// Equality, implicit and explicit, on every type.
		{"number eq", `{"amount": 120}`, true},
		{"number eq other spelling", `{"amount": {"$eq": 1.2e2}}`, true},
		{"number eq string", `{"amount": "120"}`, false},
		{"string eq", `{"currency": "EUR"}`, true},
		{"string eq is case-sensitive", `{"currency": "eur"}`, false},
		{"bool eq", `{"paid": true}`, true},
		{"bool eq number", `{"paid": 1}`, false},
		{"null eq", `{"note": null}`, true},
		{"null eq missing", `{"absent": null}`, false},
		{"null neq missing", `{"absent": {"$neq": null}}`, true},
		{"array eq", `{"customer.tags": ["vip", "eu"]}`, true},
		{"array eq other order", `{"customer.tags": ["eu", "vip"]}`, false},
		{"object eq any member order", `{"items.0": {"$eq": {"qty": 2, "sku": "A-1"}}}`, true},
		{"object eq fewer members", `{"items.0": {"$eq": {"sku": "A-1"}}}`, false},
		{"empty array eq", `{"empty": []}`, true},
		{"empty object eq", `{"obj": {"$eq": {}}}`, true},
		{"neq present", `{"currency": {"$neq": "USD"}}`, true},
		{"neq equal", `{"currency": {"$neq": "EUR"}}`, false},
		{"neq missing", `{"absent": {"$neq": 1}}`, true},
		// Ordering: numbers with numbers, strings with strings.
		{"gt", `{"amount": {"$gt": 100}}`, true},
		{"gt equal", `{"amount": {"$gt": 120}}`, false},
		{"gte equal", `{"amount": {"$gte": 120}}`, true},
		{"lt", `{"amount": {"$lt": 120.5}}`, true},
		{"lte", `{"amount": {"$lte": 119}}`, false},
		{"range", `{"amount": {"$gt": 100, "$lt": 200}}`, true},
		{"range missed", `{"amount": {"$gt": 100, "$lt": 110}}`, false},
		{"gt string against number", `{"amount": {"$gt": "100"}}`, false},
		{"gt strings", `{"currency": {"$gt": "AUD"}}`, true},
		{"lt strings byte order", `{"currency": {"$lt": "Eur"}}`, true},
		{"gt on null", `{"note": {"$gt": 0}}`, false},
		{"gt on bool", `{"paid": {"$gte": 0}}`, false},
		{"gt on array", `{"customer.tags": {"$gt": "a"}}`, false},
		{"gt missing", `{"absent": {"$gt": 0}}`, false},
		{"lte missing", `{"absent": {"$lte": 0}}`, false},
		{"out of range payload number is infinite", `{"big": {"$gt": 1e300}}`, true},
		// Lists.
		{"in", `{"customer.tier": {"$in": ["gold", "platinum"]}}`, true},
		{"in number spelling", `{"amount": {"$in": [1, 120.0]}}`, true},
		{"in missed", `{"customer.tier": {"$in": ["silver"]}}`, false},
		{"in with null", `{"note": {"$in": [null]}}`, true},
		{"in missing", `{"absent": {"$in": [null]}}`, false},
		{"in does not look inside arrays", `{"customer.tags": {"$in": ["vip"]}}`, false},
		{"in array value", `{"customer.tags": {"$in": [["vip", "eu"]]}}`, true},
		{"nin", `{"customer.tier": {"$nin": ["silver"]}}`, true},
		{"nin hit", `{"customer.tier": {"$nin": ["gold"]}}`, false},
		{"nin missing", `{"absent": {"$nin": ["gold"]}}`, true},
		// Existence: a null is there, a missing path is not.
		{"exists", `{"amount": {"$exists": true}}`, true},
		{"exists null", `{"note": {"$exists": true}}`, true},
		{"exists missing", `{"absent": {"$exists": true}}`, false},
		{"not exists missing", `{"absent": {"$exists": false}}`, true},
		{"not exists present", `{"note": {"$exists": false}}`, false},
		// Prefixes, on strings only.
		{"startsWith", `{"items.1.sku": {"$startsWith": "B-"}}`, true},
		{"startsWith empty", `{"currency": {"$startsWith": ""}}`, true},
		{"startsWith missed", `{"currency": {"$startsWith": "US"}}`, false},
		{"startsWith number", `{"amount": {"$startsWith": "12"}}`, false},
		{"startsWith missing", `{"absent": {"$startsWith": ""}}`, false},
		// Paths: objects by name, arrays by index, nested arrays.
		{"nested object", `{"customer.tier": "gold"}`, true},
		{"array index", `{"items.1.qty": 1}`, true},
		{"array index out of range", `{"items.2.qty": {"$exists": true}}`, false},
		{"array index not canonical", `{"items.01.qty": {"$exists": true}}`, false},
		{"array by name", `{"items.sku": {"$exists": true}}`, false},
		{"object member named 0", `{"customer.0": "zero"}`, true},
		{"nested arrays", `{"matrix.1.1.0": 4}`, true},
		{"nested array value", `{"matrix.1.1": [4, 5]}`, true},
		{"through a scalar", `{"amount.value": {"$exists": true}}`, false},
		{"through null", `{"note.x": {"$exists": false}}`, true},
		// Combinators and the event type.
		{"implicit and", `{"currency": "EUR", "paid": false}`, false},
		{"and", `{"$and": [{"currency": "EUR"}, {"paid": true}]}`, true},
		{"or", `{"$or": [{"currency": "USD"}, {"amount": {"$gte": 100}}]}`, true},
		{"or none", `{"$or": [{"currency": "USD"}, {"amount": {"$gte": 1000}}]}`, false},
		{"not", `{"$not": {"currency": "USD"}}`, true},
		{"not not", `{"$not": {"$not": {"currency": "USD"}}}`, false},
		{"event type", `{"$event_type": "invoice.paid"}`, true},
		{"event type prefix", `{"$event_type": {"$startsWith": "invoice."}}`, true},
		{"event type in", `{"$event_type": {"$in": ["order.created", "invoice.paid"]}}`, true},
		{"event type and payload", `{"$event_type": {"$startsWith": "order."}, "amount": 120}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, matches(t, c.filter, "invoice.paid", order), c.filter)
		})
	}
}

// TestMatchScalarPayloads: a payload need not be an object; paths then
// lead nowhere, and the event type still works.
func TestMatchScalarPayloads(t *testing.T) {
	t.Parallel()
	for _, payload := range []string{`null`, `7`, `"text"`, `[1, 2]`, `true`} {
		require.False(t, matches(t, `{"a": {"$exists": true}}`, "a.b", payload), payload)
		require.True(t, matches(t, `{"a": {"$neq": 1}}`, "a.b", payload), payload)
		require.True(t, matches(t, `{"$event_type": "a.b"}`, "a.b", payload), payload)
	}
	require.True(t, matches(t, `{"0": 1}`, "x", `[1, 2]`), "an array payload is indexed")
}

// TestParseNamesThePathOfEachFault: a bad filter is refused with the path
// of its first fault inside it.
func TestParseNamesThePathOfEachFault(t *testing.T) {
	t.Parallel()
	deep := `{"a": 1}`
	for range filter.MaxDepth {
		deep = `{"$not": ` + deep + `}`
	}
	var many strings.Builder
	many.WriteString("{")
	for i := range filter.MaxConditions + 1 {
		if i > 0 {
			many.WriteString(",")
		}
		fmt.Fprintf(&many, `"f%d": %d`, i, i)
	}
	many.WriteString("}")
	longList := `{"a": {"$in": [` + strings.Repeat(`1,`, filter.MaxList) + `1]}}`
	for _, c := range []struct {
		filter, path string
	}{
		{`{"$or": [{"a": 1}, {"amount": {"$gt": true}}]}`, "$or[1].amount.$gt"},
		{`{}`, ""},
		{`[]`, ""},
		{`null`, ""},
		{`{"a": 1} {"b": 2}`, ""},
		{`{"a": `, ""},
		{`{"a": {}}`, "a"},
		{`{"a": {"b": 1}}`, "a.b"},
		{`{"a": {"$eq": 1, "$like": "x"}}`, "a.$like"},
		{`{"$foo": 1}`, "$foo"},
		{`{"$and": {"a": 1}}`, "$and"},
		{`{"$or": []}`, "$or"},
		{`{"$and": [{"a": 1}, 2]}`, "$and[1]"},
		{`{"$and": [{"a": 1}, {}]}`, "$and[1]"},
		{`{"$not": [{"a": 1}]}`, "$not"},
		{`{"a..b": 1}`, "a..b"},
		{`{".a": 1}`, ".a"},
		{`{"a.$b": 1}`, "a.$b"},
		{`{"` + strings.Repeat("a.", filter.MaxPathSegments) + `a": 1}`, strings.Repeat("a.", filter.MaxPathSegments) + "a"},
		{`{"` + strings.Repeat("a", filter.MaxPathLength+1) + `": 1}`, strings.Repeat("a", filter.MaxPathLength+1)},
		{`{"a": 1, "a": 2}`, "a"},
		{`{"a": {"$eq": {"x": 1, "x": 2}}}`, "a.$eq.x"},
		{`{"a": {"$in": []}}`, "a.$in"},
		{`{"a": {"$nin": 3}}`, "a.$nin"},
		{longList, "a.$in"},
		{`{"a": {"$exists": "yes"}}`, "a.$exists"},
		{`{"a": {"$startsWith": 1}}`, "a.$startsWith"},
		{`{"a": {"$lt": null}}`, "a.$lt"},
		{`{"a": {"$gte": [1]}}`, "a.$gte"},
		{`{"a": 1e999}`, "a"},
		{`{"x": 1, "b": {"$in": [1, 2e999]}}`, "b.$in[1]"},
		{deep, strings.TrimSuffix(strings.Repeat("$not.", filter.MaxDepth), ".")},
		{many.String(), fmt.Sprintf("f%d", filter.MaxConditions)},
		{`{"a": "` + strings.Repeat("x", filter.MaxBytes) + `"}`, ""},
	} {
		_, err := filter.Parse([]byte(c.filter))
		var fe *filter.Error
		require.True(t, errors.As(err, &fe), "%s: %v", c.filter, err)
		require.Equal(t, c.path, fe.Path, "%s: %v", c.filter, err)
		require.NotEmpty(t, fe.Message)
	}
}

// TestParseAcceptsTheBounds: a filter at every bound is accepted.
func TestParseAcceptsTheBounds(t *testing.T) {
	t.Parallel()
	deep := `{"a": 1}`
	for range filter.MaxDepth - 1 {
		deep = `{"$not": ` + deep + `}`
	}
	var many strings.Builder
	many.WriteString("{")
	for i := range filter.MaxConditions {
		if i > 0 {
			many.WriteString(",")
		}
		fmt.Fprintf(&many, `"f%d": %d`, i, i)
	}
	many.WriteString("}")
	list := `{"a": {"$in": [` + strings.Repeat(`1,`, filter.MaxList-1) + `1]}}`
	path := `{"` + strings.Repeat("a.", filter.MaxPathSegments-1) + `a": 1}`
	for _, f := range []string{deep, many.String(), list, path} {
		_, err := filter.Parse([]byte(f))
		require.NoError(t, err, f)
	}
}

// FuzzParse: no input makes Parse or Match panic; a refusal is an *Error
// with a message; an accepted filter is within the bounds and evaluates
// against any payload.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"$or": [{"amount": {"$gt": 100}}, {"customer.tier": {"$in": ["gold"]}}], "$event_type": {"$startsWith": "invoice."}}`), []byte(`{"amount": 120, "customer": {"tier": "gold"}}`))
	f.Add([]byte(`{"$not": {"items.0.sku": {"$exists": true, "$neq": null}}}`), []byte(`{"items": [{"sku": null}]}`))
	f.Add([]byte(`{"a": [1, {"b": 2}], "c": {"$lte": "z"}}`), []byte(`[[[]]]`))
	f.Add([]byte(`{"a": {"$eq": {"x": [1e308, -0, 0.5]}}}`), []byte(`{"a": {"x": [1e308, 0, 5e-1]}}`))
	f.Add([]byte(`{"$and": [{"$or": [{"$not": {"a": 1}}]}]}`), []byte(`7`))
	f.Fuzz(func(t *testing.T, src, payload []byte) {
		flt, err := filter.Parse(src)
		if err != nil {
			var fe *filter.Error
			require.True(t, errors.As(err, &fe), "%v", err)
			require.NotEmpty(t, fe.Message)
			return
		}
		require.LessOrEqual(t, len(src), filter.MaxBytes)
		if p, err := filter.DecodePayload(payload); err == nil {
			_ = flt.Match("a.b", p)
		}
		_ = flt.Match("", nil)
	})
}
