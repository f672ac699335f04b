package breaker_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
)

// requireNameRoundTrip checks that v is named name, that parse reads name
// back to v, and that v survives JSON as its name.
func requireNameRoundTrip[T interface {
	comparable
	fmt.Stringer
}](t *testing.T, v T, name string, parse func(string) (T, error)) {
	t.Helper()
	require.Equal(t, name, v.String())
	parsed, err := parse(name)
	require.NoError(t, err)
	require.Equal(t, v, parsed)

	encoded, err := json.Marshal(v)
	require.NoError(t, err)
	require.JSONEq(t, `"`+name+`"`, string(encoded))
	var decoded T
	require.NoError(t, json.Unmarshal(encoded, &decoded))
	require.Equal(t, v, decoded)
}

func TestOutcomeNamesRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		outcome breaker.Outcome
		name    string
	}{
		{breaker.OutcomeSuccess, "success"},
		{breaker.OutcomeFailure, "failure"},
		{breaker.OutcomeIgnore, "ignore"},
		{breaker.OutcomeAuthFailure, "auth_failure"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			requireNameRoundTrip(t, tt.outcome, tt.name, breaker.ParseOutcome)
		})
	}
}

func TestOutcomeRejectsUnknownNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "Success", "auth-failure", "timeout"} {
		_, err := breaker.ParseOutcome(name)
		require.Error(t, err, name)
	}
	require.Equal(t, "outcome(7)", breaker.Outcome(7).String())
}
