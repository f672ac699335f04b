package destination

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
)

// maxKeyPathDepth bounds a key path's segments.
const maxKeyPathDepth = 16

// parseKeyPath splits a dotted path ("customer.id") into its segments:
// each non-empty, at most maxKeyPathDepth of them.
func parseKeyPath(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if len(p) > maxNameLen {
		return nil, errors.New("longer than 255 characters")
	}
	segs := strings.Split(p, ".")
	if len(segs) > maxKeyPathDepth {
		return nil, errors.New("more than 16 segments")
	}
	for _, s := range segs {
		if s == "" {
			return nil, errors.New("empty segment: want dot-separated field names (customer.id)")
		}
	}
	return segs, nil
}

// keyAt is the value at path in a JSON object: a string's text, or any
// other value's JSON. ok is false without a path, for a body that is no
// object, and where the path leads nowhere or to null.
func keyAt(body []byte, path []string) ([]byte, bool) {
	if len(path) == 0 {
		return nil, false
	}
	cur := json.RawMessage(body)
	for _, seg := range path {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(cur, &obj); err != nil {
			return nil, false
		}
		v, ok := obj[seg]
		if !ok {
			return nil, false
		}
		cur = v
	}
	cur = bytes.TrimSpace(cur)
	if len(cur) == 0 || string(cur) == "null" {
		return nil, false
	}
	var s string
	if cur[0] == '"' && json.Unmarshal(cur, &s) == nil {
		return []byte(s), true
	}
	return cur, true
}
