package breaker_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
)

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
			require.Equal(t, tt.name, tt.outcome.String())
			parsed, err := breaker.ParseOutcome(tt.name)
			require.NoError(t, err)
			require.Equal(t, tt.outcome, parsed)

			encoded, err := json.Marshal(tt.outcome)
			require.NoError(t, err)
			var decoded breaker.Outcome
			require.NoError(t, json.Unmarshal(encoded, &decoded))
			require.Equal(t, tt.outcome, decoded)
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
