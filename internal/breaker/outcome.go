package breaker

import (
	"fmt"
	"strconv"
)

// Outcome is what one admitted request told the breaker about the endpoint.
type Outcome uint8

const (
	// OutcomeSuccess is evidence the endpoint is healthy (a 2xx).
	OutcomeSuccess Outcome = iota
	// OutcomeFailure is evidence the endpoint is unwell (a timeout, a
	// connection error, a 5xx).
	OutcomeFailure
	// OutcomeIgnore is no evidence either way (a 4xx, a 429, our own bug): it
	// never touches the window or the consecutive count, and a half-open trial
	// that ends this way only gives back its trial slot.
	OutcomeIgnore
	// OutcomeAuthFailure is a credential problem (a 401 or 403), handled by
	// endpoint auto-disabling rather than the breaker: it never touches the
	// breaker, except that a half-open trial that ends this way gives back its
	// trial slot.
	OutcomeAuthFailure
)

var outcomeNames = [...]string{
	OutcomeSuccess:     "success",
	OutcomeFailure:     "failure",
	OutcomeIgnore:      "ignore",
	OutcomeAuthFailure: "auth_failure",
}

// String returns the contract name of o: "success", "failure", "ignore" or
// "auth_failure".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// ParseOutcome returns the Outcome whose contract name is s.
func ParseOutcome(s string) (Outcome, error) {
	for i, name := range outcomeNames {
		if name == s {
			return Outcome(i), nil
		}
	}
	return 0, fmt.Errorf("unknown outcome %q", s)
}

// MarshalText encodes o as its contract name.
func (o Outcome) MarshalText() ([]byte, error) {
	if int(o) >= len(outcomeNames) {
		return nil, fmt.Errorf("unknown outcome %d", o)
	}
	return []byte(o.String()), nil
}

// UnmarshalText decodes a contract name into o.
func (o *Outcome) UnmarshalText(text []byte) error {
	parsed, err := ParseOutcome(string(text))
	if err != nil {
		return err
	}
	*o = parsed
	return nil
}
