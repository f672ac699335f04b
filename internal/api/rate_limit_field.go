package api

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// maxEndpointRateLimit caps an endpoint's rate_limit (deliveries per second).
const maxEndpointRateLimit = 100000

// nullableInt is a request member that may be absent, null or a number:
// on PATCH, absent keeps the value and null removes it. The JSON is kept
// raw so validation can name the field whatever was sent.
type nullableInt struct {
	set bool
	raw json.RawMessage
}

// UnmarshalJSON keeps the member's JSON (encoding/json calls it for null
// too).
func (n *nullableInt) UnmarshalJSON(b []byte) error {
	n.set = true
	n.raw = append(n.raw[:0], b...)
	return nil
}

// MarshalJSON writes the member back as it came (null when absent);
// IsZero leaves an absent one out under omitzero, so a decoded request
// encodes to one that decodes the same.
func (n nullableInt) MarshalJSON() ([]byte, error) {
	if !n.set {
		return []byte("null"), nil
	}
	return n.raw, nil
}

// IsZero reports whether the member was absent.
func (n nullableInt) IsZero() bool { return !n.set }

func (n nullableInt) null() bool { return !n.set || bytes.Equal(n.raw, []byte("null")) }

// number returns the member's integer; validateRateLimit has checked it.
func (n nullableInt) number() int {
	var v int
	_ = json.Unmarshal(n.raw, &v)
	return v
}

// value is the member for a create: nil when absent or null.
func (n nullableInt) value() *int {
	if n.null() {
		return nil
	}
	v := n.number()
	return &v
}

// patch is the member for store.EndpointPatch: nil when absent, 0 for null
// (remove), else the number.
func (n nullableInt) patch() *int {
	if !n.set {
		return nil
	}
	v := 0
	if !n.null() {
		v = n.number()
	}
	return &v
}

func validateRateLimit(fe *fieldErrors, field string, n nullableInt) {
	if n.null() {
		return
	}
	var v int
	dec := json.NewDecoder(bytes.NewReader(n.raw))
	if err := dec.Decode(&v); err != nil || v < 1 || v > maxEndpointRateLimit {
		fe.add(field, fmt.Sprintf("must be an integer from 1 to %d (deliveries per second), or null for no limit", maxEndpointRateLimit))
	}
}
