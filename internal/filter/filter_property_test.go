package filter_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/hookd/hookd/internal/filter"
)

// The reference evaluator reads the filter as plain decoded JSON on every
// call and follows the documented rules in the most direct way: it shares
// no code with the package, so the property below compares two
// independent readings of the same rules.

func refDecode(t *rapid.T, b []byte) any {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

// refCanon turns numbers into float64 so reflect.DeepEqual is JSON
// equality.
func refCanon(v any) any {
	switch x := v.(type) {
	case json.Number:
		f, _ := strconv.ParseFloat(string(x), 64)
		return f
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = refCanon(x[i])
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = refCanon(e)
		}
		return out
	}
	return v
}

func refLookup(payload any, path string) (any, bool) {
	v := payload
	for _, name := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			e, ok := x[name]
			if !ok {
				return nil, false
			}
			v = e
		case []any:
			i, err := strconv.Atoi(name)
			if err != nil || i < 0 || i >= len(x) || strconv.Itoa(i) != name {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func refMatch(f map[string]any, eventType string, payload any) bool {
	for k, c := range f {
		var ok bool
		switch k {
		case "$and":
			ok = true
			for _, sub := range c.([]any) {
				ok = ok && refMatch(sub.(map[string]any), eventType, payload)
			}
		case "$or":
			for _, sub := range c.([]any) {
				ok = ok || refMatch(sub.(map[string]any), eventType, payload)
			}
		case "$not":
			ok = !refMatch(c.(map[string]any), eventType, payload)
		case "$event_type":
			ok = refCondition(c, eventType, true)
		default:
			v, found := refLookup(payload, k)
			ok = refCondition(c, v, found)
		}
		if !ok {
			return false
		}
	}
	return true
}

func refCondition(c, v any, found bool) bool {
	ops, isObject := c.(map[string]any)
	if !isObject {
		ops = map[string]any{"$eq": c}
	}
	for name, arg := range ops {
		if !refOp(name, arg, v, found) {
			return false
		}
	}
	return true
}

func refOp(name string, arg, v any, found bool) bool {
	eq := func(a, b any) bool { return reflect.DeepEqual(refCanon(a), refCanon(b)) }
	in := func() bool {
		for _, w := range arg.([]any) {
			if eq(v, w) {
				return true
			}
		}
		return false
	}
	switch name {
	case "$eq":
		return found && eq(v, arg)
	case "$neq":
		return !found || !eq(v, arg)
	case "$in":
		return found && in()
	case "$nin":
		return !found || !in()
	case "$exists":
		return found == arg.(bool)
	case "$startsWith":
		s, ok := v.(string)
		return found && ok && strings.HasPrefix(s, arg.(string))
	}
	if !found {
		return false
	}
	var sign int
	switch a := refCanon(arg).(type) {
	case float64:
		x, ok := refCanon(v).(float64)
		if !ok {
			return false
		}
		switch {
		case x < a:
			sign = -1
		case x > a:
			sign = 1
		}
	case string:
		x, ok := v.(string)
		if !ok {
			return false
		}
		sign = strings.Compare(x, a)
	}
	switch name {
	case "$gt":
		return sign > 0
	case "$gte":
		return sign >= 0
	case "$lt":
		return sign < 0
	}
	return sign <= 0
}

// Generators draw from small vocabularies so that paths often exist and
// values often compare equal: numbers in several spellings of the same
// value, strings that prefix one another.
var (
	genNames   = []string{"a", "b", "c", "0", "1"}
	genNumbers = []string{"-1", "0", "0.0", "1", "1.0", "1e0", "1.5", "2", "10", "-0"}
	genStrings = []string{"", "x", "xy", "xyz", "inv", "invoice.paid", "A", "a"}
	genTypes   = []string{"invoice.paid", "invoice.failed", "order.created"}
)

func scalarJSON(t *rapid.T, label string) string {
	switch rapid.IntRange(0, 3).Draw(t, label+"_kind") {
	case 0:
		return "null"
	case 1:
		return strconv.FormatBool(rapid.Bool().Draw(t, label+"_bool"))
	case 2:
		return rapid.SampledFrom(genNumbers).Draw(t, label+"_number")
	}
	return strconv.Quote(rapid.SampledFrom(genStrings).Draw(t, label+"_string"))
}

// valueJSON draws any JSON value, nesting at most depth levels.
func valueJSON(t *rapid.T, depth int, label string) string {
	k := rapid.IntRange(0, 2).Draw(t, label+"_shape")
	if depth == 0 || k == 0 {
		return scalarJSON(t, label)
	}
	n := rapid.IntRange(0, 3).Draw(t, label+"_len")
	parts := make([]string, 0, n)
	if k == 1 {
		for range n {
			parts = append(parts, valueJSON(t, depth-1, label))
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	seen := map[string]bool{}
	for range n {
		name := rapid.SampledFrom(genNames).Draw(t, label+"_name")
		if seen[name] {
			continue
		}
		seen[name] = true
		parts = append(parts, strconv.Quote(name)+":"+valueJSON(t, depth-1, label))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func pathString(t *rapid.T) string {
	n := rapid.IntRange(1, 3).Draw(t, "path_len")
	names := make([]string, n)
	for i := range names {
		names[i] = rapid.SampledFrom(genNames).Draw(t, "path_name")
	}
	return strings.Join(names, ".")
}

func conditionJSON(t *rapid.T) string {
	if rapid.IntRange(0, 3).Draw(t, "implicit") == 0 {
		v := valueJSON(t, 2, "eq")
		if strings.HasPrefix(v, "{") {
			v = "null" // an object here would be read as operators
		}
		return v
	}
	ops := []string{"$eq", "$neq", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$startsWith"}
	n := rapid.IntRange(1, 2).Draw(t, "ops")
	seen := map[string]bool{}
	var parts []string
	for range n {
		name := rapid.SampledFrom(ops).Draw(t, "op")
		if seen[name] {
			continue
		}
		seen[name] = true
		var arg string
		switch name {
		case "$eq", "$neq":
			arg = valueJSON(t, 2, "arg")
		case "$gt", "$gte", "$lt", "$lte":
			if rapid.Bool().Draw(t, "ordered_number") {
				arg = rapid.SampledFrom(genNumbers).Draw(t, "arg_number")
			} else {
				arg = strconv.Quote(rapid.SampledFrom(genStrings).Draw(t, "arg_string"))
			}
		case "$in", "$nin":
			k := rapid.IntRange(1, 3).Draw(t, "list_len")
			vals := make([]string, k)
			for i := range vals {
				vals[i] = valueJSON(t, 1, "list")
			}
			arg = "[" + strings.Join(vals, ",") + "]"
		case "$exists":
			arg = strconv.FormatBool(rapid.Bool().Draw(t, "exists"))
		case "$startsWith":
			arg = strconv.Quote(rapid.SampledFrom(genStrings).Draw(t, "prefix"))
		}
		parts = append(parts, strconv.Quote(name)+":"+arg)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// filterJSON draws a valid filter: at most 2 members and 2 filters per
// $and or $or, 2 operators per condition and 3 levels, so it stays within
// MaxConditions and MaxDepth.
func filterJSON(t *rapid.T, depth int) string {
	n := rapid.IntRange(1, 2).Draw(t, "members")
	seen := map[string]bool{}
	var parts []string
	for range n {
		kind := rapid.IntRange(0, 5).Draw(t, "member")
		if depth >= 3 && kind <= 2 {
			kind = 4
		}
		var key, val string
		switch kind {
		case 0, 1:
			key = []string{"$and", "$or"}[kind]
			k := rapid.IntRange(1, 2).Draw(t, "list")
			subs := make([]string, k)
			for i := range subs {
				subs[i] = filterJSON(t, depth+1)
			}
			val = "[" + strings.Join(subs, ",") + "]"
		case 2:
			key, val = "$not", filterJSON(t, depth+1)
		case 3:
			key = "$event_type"
			val = conditionJSON(t)
		default:
			key, val = pathString(t), conditionJSON(t)
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		parts = append(parts, strconv.Quote(key)+":"+val)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// TestMatchAgreesWithTheReference: for random filters and payloads,
// Match gives the reference evaluator's answer.
func TestMatchAgreesWithTheReference(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		src := filterJSON(t, 1)
		payload := valueJSON(t, 3, "payload")
		eventType := rapid.SampledFrom(genTypes).Draw(t, "event_type")
		f, err := filter.Parse([]byte(src))
		if err != nil {
			t.Fatalf("a valid filter was refused: %s: %v", src, err)
		}
		p, err := filter.DecodePayload([]byte(payload))
		if err != nil {
			t.Fatalf("decode payload %s: %v", payload, err)
		}
		want := refMatch(refDecode(t, []byte(src)).(map[string]any), eventType, refDecode(t, []byte(payload)))
		if got := f.Match(eventType, p); got != want {
			t.Fatalf("filter %s on %s (%s): Match %v, reference %v", src, payload, eventType, got, want)
		}
	})
}
