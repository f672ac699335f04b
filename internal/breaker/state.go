package breaker

import (
	"fmt"
	"strconv"
)

// State is the position of a breaker in its state machine.
type State uint8

const (
	// StateClosed lets every request through and watches their outcomes.
	StateClosed State = iota
	// StateOpen refuses every request until its open duration has elapsed.
	StateOpen
	// StateHalfOpen lets a limited number of trial requests through to decide
	// whether to close again.
	StateHalfOpen
	// StateIsolated is held open by an operator: it refuses every request and
	// admits no trials until Reset (resilience4j's FORCED_OPEN).
	StateIsolated
)

var stateNames = [...]string{
	StateClosed:   "closed",
	StateOpen:     "open",
	StateHalfOpen: "half_open",
	StateIsolated: "isolated",
}

// String returns the contract name of s: "closed", "open", "half_open" or
// "isolated".
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// ParseState returns the State whose contract name is s.
func ParseState(s string) (State, error) {
	for i, name := range stateNames {
		if name == s {
			return State(i), nil
		}
	}
	return 0, fmt.Errorf("unknown breaker state %q", s)
}

// MarshalText encodes s as its contract name.
func (s State) MarshalText() ([]byte, error) {
	if int(s) >= len(stateNames) {
		return nil, fmt.Errorf("unknown breaker state %d", s)
	}
	return []byte(s.String()), nil
}

// UnmarshalText decodes a contract name into s.
func (s *State) UnmarshalText(text []byte) error {
	parsed, err := ParseState(string(text))
	if err != nil {
		return err
	}
	*s = parsed
	return nil
}
