// Package filter owns endpoint payload filters: their JSON grammar and
// bounds (Parse, which names the path of a fault inside the filter) and
// their evaluation against a message's event type and payload (Match). It
// is pure: no I/O, no clock.
//
// A filter is a JSON object whose members all hold (an implicit $and):
//
//	{"amount": {"$gt": 100}, "customer.tier": {"$in": ["gold", "platinum"]}}
//	{"$or": [{"status": "paid"}, {"$not": {"refund": {"$exists": true}}}]}
//	{"$event_type": {"$startsWith": "invoice."}}
//
// A member is $and or $or (an array of filters), $not (a filter),
// $event_type (a condition on the message's event type) or a dot path into
// the payload with its condition. A condition is an object of operators
// ($eq, $neq, $gt, $gte, $lt, $lte, $in, $nin, $exists, $startsWith), all of
// which must hold, or a value that is not an object, compared with $eq.
package filter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Bounds of a filter.
const (
	// MaxBytes is the most bytes of JSON a filter may have.
	MaxBytes = 4096
	// MaxDepth is how deeply filters may nest through $and, $or and $not;
	// the outermost filter is depth 1.
	MaxDepth = 5
	// MaxConditions is the most operators a filter may hold (a value
	// compared with an implicit $eq counts as one).
	MaxConditions = 64
	// MaxList is the most members of an $and or $or and the most values of
	// an $in or $nin.
	MaxList = 64
	// MaxPathSegments is the most dot-separated names a path may have.
	MaxPathSegments = 16
	// MaxPathLength is the longest a path may be, in bytes.
	MaxPathLength = 256
)

// Error is a fault in a filter. Path locates it inside the filter: member
// names joined by dots and array indexes in brackets, such as
// "$or[1].amount.$gt"; it is empty for the filter as a whole.
type Error struct {
	Path    string
	Message string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return "filter: " + e.Message
	}
	return "filter." + e.Path + ": " + e.Message
}

// Filter is a parsed filter, safe for concurrent use.
type Filter struct {
	root node
}

// Parse reads a filter and checks its grammar and bounds. A fault is an
// *Error naming where it is (the first fault in document order).
func Parse(src []byte) (*Filter, error) {
	if len(src) > MaxBytes {
		return nil, &Error{Message: fmt.Sprintf("must be at most %d bytes of JSON", MaxBytes)}
	}
	v, err := decodeOrdered(src)
	if err != nil {
		return nil, err
	}
	p := &parser{}
	root, err := p.filter(v, "", 1)
	if err != nil {
		return nil, err
	}
	return &Filter{root: root}, nil
}

// Match reports whether a message with this event type and payload (as
// DecodePayload returns it) passes the filter.
func (f *Filter) Match(eventType string, payload any) bool {
	return f.root.match(&subject{eventType: eventType, payload: payload})
}

// DecodePayload decodes a message payload for Match, keeping numbers
// exact (json.Number) until a comparison reads them.
func DecodePayload(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode payload: %w", err)
	}
	return v, nil
}

// subject is what a filter is evaluated against.
type subject struct {
	eventType string
	payload   any
}

type node interface {
	match(s *subject) bool
}

type allOf []node

func (n allOf) match(s *subject) bool {
	for _, c := range n {
		if !c.match(s) {
			return false
		}
	}
	return true
}

type anyOf []node

func (n anyOf) match(s *subject) bool {
	for _, c := range n {
		if c.match(s) {
			return true
		}
	}
	return false
}

type not struct{ n node }

func (n not) match(s *subject) bool { return !n.n.match(s) }

// field is a condition on one path of the payload (or on the event type).
type field struct {
	eventType bool
	path      []segment
	ops       []op
}

type segment struct {
	key   string
	index int // the key as an array index, or -1
}

func (n *field) match(s *subject) bool {
	var (
		v     any
		found bool
	)
	if n.eventType {
		v, found = s.eventType, true
	} else {
		v, found = lookup(s.payload, n.path)
	}
	for _, o := range n.ops {
		if !o.holds(v, found) {
			return false
		}
	}
	return true
}

// lookup follows path from v: a name indexes an object, a non-negative
// integer in canonical form also indexes an array.
func lookup(v any, path []segment) (any, bool) {
	for _, seg := range path {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[seg.key]; !ok {
				return nil, false
			}
		case []any:
			if seg.index < 0 || seg.index >= len(x) {
				return nil, false
			}
			v = x[seg.index]
		default:
			return nil, false
		}
	}
	return v, true
}

// Operators.
const (
	opEq         = "$eq"
	opNeq        = "$neq"
	opGt         = "$gt"
	opGte        = "$gte"
	opLt         = "$lt"
	opLte        = "$lte"
	opIn         = "$in"
	opNin        = "$nin"
	opExists     = "$exists"
	opStartsWith = "$startsWith"
)

// op is one operator of a condition with its operand.
type op struct {
	name   string
	value  any   // $eq, $neq, $gt, $gte, $lt, $lte, $startsWith
	values []any // $in, $nin
	exists bool  // $exists
}

// holds applies the operator to the value at the path (found false: the
// path leads nowhere). Every operator is false on a missing value but
// $neq, $nin and $exists false, which are the negations of $eq, $in and
// $exists true.
func (o op) holds(v any, found bool) bool {
	switch o.name {
	case opEq:
		return found && equal(v, o.value)
	case opNeq:
		return !(found && equal(v, o.value))
	case opIn:
		return found && contains(o.values, v)
	case opNin:
		return !(found && contains(o.values, v))
	case opExists:
		return found == o.exists
	case opStartsWith:
		s, ok := v.(string)
		return found && ok && strings.HasPrefix(s, o.value.(string))
	}
	if !found {
		return false
	}
	c, ok := compare(v, o.value)
	if !ok {
		return false
	}
	switch o.name {
	case opGt:
		return c > 0
	case opGte:
		return c >= 0
	case opLt:
		return c < 0
	default: // opLte
		return c <= 0
	}
}

func contains(list []any, v any) bool {
	for _, w := range list {
		if equal(v, w) {
			return true
		}
	}
	return false
}

// number reads a JSON number as a float64.
func number(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return f, true
}

// compare orders two numbers or two strings; other pairs are not ordered.
func compare(a, b any) (int, bool) {
	if x, ok := number(a); ok {
		y, ok := number(b)
		if !ok {
			return 0, false
		}
		switch {
		case x < y:
			return -1, true
		case x > y:
			return 1, true
		}
		return 0, true
	}
	if x, ok := a.(string); ok {
		y, ok := b.(string)
		if !ok {
			return 0, false
		}
		return strings.Compare(x, y), true
	}
	return 0, false
}

// equal is JSON equality: numbers by value, arrays element by element,
// objects by their members whatever their order.
func equal(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case json.Number:
		if _, ok := b.(json.Number); !ok {
			return false
		}
		c, ok := compare(a, b)
		return ok && c == 0
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !equal(xv, yv) {
				return false
			}
		}
		return true
	}
	return false
}

// parser builds the node tree, counting conditions against the bound.
type parser struct {
	conditions int
}

// ordered is a decoded JSON value whose objects keep their members'
// order, so a fault is reported at the first place it occurs.
type ordered struct {
	members []member // an object's
	items   []ordered
	value   any // a scalar: nil, bool, string or json.Number
	kind    kind
}

type kind int

const (
	kindScalar kind = iota
	kindObject
	kindArray
)

type member struct {
	key   string
	value ordered
}

// plain turns an ordered value into the form DecodePayload gives.
func (v ordered) plain() any {
	switch v.kind {
	case kindObject:
		m := make(map[string]any, len(v.members))
		for _, mb := range v.members {
			m[mb.key] = mb.value.plain()
		}
		return m
	case kindArray:
		a := make([]any, len(v.items))
		for i, it := range v.items {
			a[i] = it.plain()
		}
		return a
	}
	return v.value
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (p *parser) filter(v ordered, path string, depth int) (node, error) {
	if v.kind != kindObject {
		return nil, &Error{Path: path, Message: "must be a JSON object of conditions"}
	}
	if len(v.members) == 0 {
		return nil, &Error{Path: path, Message: "must hold at least one condition"}
	}
	if depth > MaxDepth {
		return nil, &Error{Path: path, Message: fmt.Sprintf("nests deeper than %d filters", MaxDepth)}
	}
	var out allOf
	for _, m := range v.members {
		at := join(path, m.key)
		switch {
		case m.key == "$and" || m.key == "$or":
			if m.value.kind != kindArray || len(m.value.items) == 0 || len(m.value.items) > MaxList {
				return nil, &Error{Path: at, Message: fmt.Sprintf("must be an array of 1 to %d filters", MaxList)}
			}
			var list []node
			for i, it := range m.value.items {
				n, err := p.filter(it, fmt.Sprintf("%s[%d]", at, i), depth+1)
				if err != nil {
					return nil, err
				}
				list = append(list, n)
			}
			if m.key == "$and" {
				out = append(out, allOf(list))
			} else {
				out = append(out, anyOf(list))
			}
		case m.key == "$not":
			n, err := p.filter(m.value, at, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, not{n})
		case m.key == "$event_type":
			ops, err := p.condition(m.value, at)
			if err != nil {
				return nil, err
			}
			out = append(out, &field{eventType: true, ops: ops})
		case strings.HasPrefix(m.key, "$"):
			return nil, &Error{Path: at, Message: "is not a filter operator: use $and, $or, $not, $event_type or a dot path into the payload"}
		default:
			segs, err := parsePath(m.key, at)
			if err != nil {
				return nil, err
			}
			ops, err := p.condition(m.value, at)
			if err != nil {
				return nil, err
			}
			out = append(out, &field{path: segs, ops: ops})
		}
	}
	if len(out) == 1 {
		return out[0], nil
	}
	return out, nil
}

func parsePath(s, at string) ([]segment, error) {
	if len(s) > MaxPathLength {
		return nil, &Error{Path: at, Message: fmt.Sprintf("is a path longer than %d bytes", MaxPathLength)}
	}
	parts := strings.Split(s, ".")
	if len(parts) > MaxPathSegments {
		return nil, &Error{Path: at, Message: fmt.Sprintf("is a path of more than %d names", MaxPathSegments)}
	}
	segs := make([]segment, len(parts))
	for i, part := range parts {
		switch {
		case part == "":
			return nil, &Error{Path: at, Message: "is a path with an empty name: names are joined by single dots"}
		case strings.HasPrefix(part, "$"):
			return nil, &Error{Path: at, Message: "is a path with a name starting with $, which only operators do"}
		}
		segs[i] = segment{key: part, index: arrayIndex(part)}
	}
	return segs, nil
}

// arrayIndex reads a canonical non-negative integer ("0", "12", not "01"
// or "+1"), or returns -1.
func arrayIndex(s string) int {
	if s == "" || len(s) > 9 || (len(s) > 1 && s[0] == '0') {
		return -1
	}
	n := 0
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return -1
		}
		n = n*10 + int(s[i]-'0')
	}
	return n
}

func (p *parser) count(at string) error {
	p.conditions++
	if p.conditions > MaxConditions {
		return &Error{Path: at, Message: fmt.Sprintf("is beyond the %d conditions a filter may hold", MaxConditions)}
	}
	return nil
}

// condition reads the condition on one path: an object of operators, or a
// value compared with $eq.
func (p *parser) condition(v ordered, at string) ([]op, error) {
	if v.kind != kindObject {
		if err := p.count(at); err != nil {
			return nil, err
		}
		return []op{{name: opEq, value: v.plain()}}, nil
	}
	if len(v.members) == 0 {
		return nil, &Error{Path: at, Message: "must hold at least one operator"}
	}
	ops := make([]op, 0, len(v.members))
	for _, m := range v.members {
		o, err := p.operator(m, join(at, m.key))
		if err != nil {
			return nil, err
		}
		ops = append(ops, o)
	}
	return ops, nil
}

func (p *parser) operator(m member, at string) (op, error) {
	o := op{name: m.key}
	v := m.value
	switch m.key {
	case opEq, opNeq:
		o.value = v.plain()
	case opGt, opGte, opLt, opLte:
		_, isString := v.value.(string)
		if _, isNumber := number(v.value); v.kind != kindScalar || (!isString && !isNumber) {
			return op{}, &Error{Path: at, Message: "must be a number or a string"}
		}
		o.value = v.value
	case opIn, opNin:
		if v.kind != kindArray || len(v.items) == 0 || len(v.items) > MaxList {
			return op{}, &Error{Path: at, Message: fmt.Sprintf("must be an array of 1 to %d values", MaxList)}
		}
		for _, it := range v.items {
			o.values = append(o.values, it.plain())
		}
	case opExists:
		b, ok := v.value.(bool)
		if v.kind != kindScalar || !ok {
			return op{}, &Error{Path: at, Message: "must be true or false"}
		}
		o.exists = b
	case opStartsWith:
		if _, ok := v.value.(string); v.kind != kindScalar || !ok {
			return op{}, &Error{Path: at, Message: "must be a string"}
		}
		o.value = v.value
	default:
		return op{}, &Error{Path: at, Message: "is not an operator: use $eq, $neq, $gt, $gte, $lt, $lte, $in, $nin, $exists or $startsWith (compare an object with $eq; reach into one with a dot path)"}
	}
	return o, p.count(at)
}

// decodeOrdered decodes one JSON value keeping members in order, and
// refuses duplicate member names and trailing data.
func decodeOrdered(src []byte) (ordered, error) {
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.UseNumber()
	v, err := readValue(dec, "")
	if err != nil {
		return ordered{}, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ordered{}, &Error{Message: "must be one JSON object"}
	}
	return v, nil
}

// errSyntax is malformed JSON, a fault of the filter as a whole.
var errSyntax = &Error{Message: "is not valid JSON"}

func readValue(dec *json.Decoder, path string) (ordered, error) {
	tok, err := dec.Token()
	if err != nil {
		return ordered{}, errSyntax
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			v := ordered{kind: kindObject}
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return ordered{}, errSyntax
				}
				key := kt.(string)
				at := join(path, key)
				if seen[key] {
					return ordered{}, &Error{Path: at, Message: "is given twice"}
				}
				seen[key] = true
				mv, err := readValue(dec, at)
				if err != nil {
					return ordered{}, err
				}
				v.members = append(v.members, member{key: key, value: mv})
			}
			if _, err := dec.Token(); err != nil {
				return ordered{}, errSyntax
			}
			return v, nil
		case '[':
			v := ordered{kind: kindArray}
			for i := 0; dec.More(); i++ {
				it, err := readValue(dec, fmt.Sprintf("%s[%d]", path, i))
				if err != nil {
					return ordered{}, err
				}
				v.items = append(v.items, it)
			}
			if _, err := dec.Token(); err != nil {
				return ordered{}, errSyntax
			}
			return v, nil
		}
		return ordered{}, errSyntax
	case json.Number:
		if f, err := strconv.ParseFloat(string(t), 64); err != nil || math.IsInf(f, 0) {
			return ordered{}, &Error{Path: path, Message: "is a number out of range"}
		}
		return ordered{value: t}, nil
	}
	return ordered{value: tok}, nil
}
