package store

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hookd/hookd/internal/breaker"
)

// BreakerChannel is the NOTIFY channel that carries every breaker
// transition (a BreakerNotice), so every dispatcher's cached view follows
// within milliseconds. Nothing is notified per delivery.
const BreakerChannel = "hookd_breaker"

// BreakerNotice is the payload of a transition notification.
type BreakerNotice struct {
	EndpointID string
	State      breaker.State
	Generation int64
	OpenUntil  time.Time
}

// String encodes n as "endpoint|state|generation|open_until_unix_micro".
func (n BreakerNotice) String() string {
	var until int64
	if !n.OpenUntil.IsZero() {
		until = n.OpenUntil.UnixMicro()
	}
	return fmt.Sprintf("%s|%s|%d|%d", n.EndpointID, n.State, n.Generation, until)
}

// ParseBreakerNotice decodes a notification payload.
func ParseBreakerNotice(s string) (BreakerNotice, error) {
	parts := strings.Split(s, "|")
	if len(parts) != 4 {
		return BreakerNotice{}, fmt.Errorf("breaker notice %q: want 4 fields", s)
	}
	st, err := breaker.ParseState(parts[1])
	if err != nil {
		return BreakerNotice{}, fmt.Errorf("breaker notice: %w", err)
	}
	gen, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return BreakerNotice{}, fmt.Errorf("breaker notice generation: %w", err)
	}
	until, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil {
		return BreakerNotice{}, fmt.Errorf("breaker notice open_until: %w", err)
	}
	n := BreakerNotice{EndpointID: parts[0], State: st, Generation: gen}
	if until != 0 {
		n.OpenUntil = time.UnixMicro(until).UTC()
	}
	return n, nil
}
