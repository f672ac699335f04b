package breaker_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
)

func TestStateNamesRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		state breaker.State
		name  string
	}{
		{breaker.StateClosed, "closed"},
		{breaker.StateOpen, "open"},
		{breaker.StateHalfOpen, "half_open"},
		{breaker.StateIsolated, "isolated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			requireNameRoundTrip(t, tt.state, tt.name, breaker.ParseState)
		})
	}
}

func TestStateRejectsUnknownNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "Closed", "half-open", "forced_open"} {
		_, err := breaker.ParseState(name)
		require.Error(t, err, name)
	}
	require.Equal(t, "state(9)", breaker.State(9).String())
	_, err := json.Marshal(breaker.State(9))
	require.Error(t, err)
}
