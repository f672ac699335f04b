package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/store"
)

func TestEndpointStatsCountsPerMinute(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	other := b.endpoint(t, "acme")

	var minute time.Time
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT date_trunc('minute', now()) - interval '2 minutes'`).Scan(&minute))
	minute = minute.UTC()
	seed := func(endpointID string, at time.Time, classification string, n int) {
		t.Helper()
		_, err := b.db.Pool.Exec(ctx, `
			INSERT INTO delivery_attempts (delivery_id, message_id, endpoint_id, attempt_number, attempted_at, duration_ms, classification)
			SELECT 'dlv_seed', 'msg_seed', $1, 1, $2, 5, $3 FROM generate_series(1, $4)`, endpointID, at, classification, n)
		require.NoError(t, err)
	}
	seed(e.ID, minute.Add(10*time.Second), "success", 3)
	seed(e.ID, minute.Add(59*time.Second), "failure", 2)
	seed(e.ID, minute.Add(time.Minute), "blocked", 1)
	seed(e.ID, minute.Add(time.Minute+30*time.Second), "auth_failure", 4)
	seed(e.ID, minute.Add(time.Minute+31*time.Second), "ignore", 5)
	seed(e.ID, minute.Add(-90*time.Minute), "failure", 7)    // before the range
	seed(other.ID, minute.Add(10*time.Second), "failure", 9) // another endpoint

	// Transitions: one before the range, a reset and an isolate in it.
	b.openBreaker(t, e.ID)
	_, err := b.db.Pool.Exec(ctx, `UPDATE breaker_transitions SET at = now() - interval '90 minutes' WHERE endpoint_id = $1`, e.ID)
	require.NoError(t, err)
	_, err = s.OperateBreaker(ctx, e.ID, store.OperatorReset, testCfg, store.TransitionMeta{Actor: "alice", Note: "fixed"})
	require.NoError(t, err)
	_, err = s.OperateBreaker(ctx, e.ID, store.OperatorIsolate, testCfg, store.TransitionMeta{Actor: "bob"})
	require.NoError(t, err)

	st, err := s.EndpointStats(ctx, e.ID, 60)
	require.NoError(t, err)
	require.Len(t, st.Minutes, 60)
	require.Equal(t, st.From, st.Minutes[0].Minute)
	require.Equal(t, st.Now.Truncate(time.Minute), st.Minutes[59].Minute, "the last minute is the current one")
	require.True(t, !st.Now.Before(st.Minutes[59].Minute) && st.Now.Sub(st.Minutes[59].Minute) < time.Minute)
	var total int
	for i, m := range st.Minutes {
		if i > 0 {
			require.Equal(t, time.Minute, m.Minute.Sub(st.Minutes[i-1].Minute), "contiguous minutes")
		}
		require.Equal(t, time.UTC, m.Minute.Location())
		total += m.Success + m.Failure + m.Ignore + m.AuthFailure + m.Blocked
		switch m.Minute {
		case minute:
			require.Equal(t, store.MinuteCounts{Minute: minute, Success: 3, Failure: 2}, m)
		case minute.Add(time.Minute):
			require.Equal(t, store.MinuteCounts{Minute: m.Minute, Blocked: 1, AuthFailure: 4, Ignore: 5}, m)
		}
	}
	require.Equal(t, 15, total, "only this endpoint's attempts in the range")

	require.Len(t, st.Transitions, 2, "only the transitions in the range")
	require.Equal(t, breaker.StateClosed, st.Transitions[0].Transition.To, "oldest first")
	require.Equal(t, "alice", st.Transitions[0].Actor)
	require.Equal(t, "fixed", st.Transitions[0].Note)
	require.Equal(t, breaker.StateIsolated, st.Transitions[1].Transition.To)
	for _, tr := range st.Transitions {
		require.False(t, tr.Transition.At.Before(st.From))
	}

	// One minute is the current minute alone.
	st, err = s.EndpointStats(ctx, e.ID, 1)
	require.NoError(t, err)
	require.Len(t, st.Minutes, 1)
	require.Equal(t, st.From, st.Now.Truncate(time.Minute))

	// An endpoint with no attempts has a full range of zeros.
	st, err = s.EndpointStats(ctx, b.endpoint(t, "acme").ID, 5)
	require.NoError(t, err)
	require.Len(t, st.Minutes, 5)
	for _, m := range st.Minutes {
		require.Equal(t, store.MinuteCounts{Minute: m.Minute}, m)
	}
	require.Empty(t, st.Transitions)
	require.NotNil(t, st.Transitions)

	_, err = s.EndpointStats(ctx, e.ID, 0)
	require.Error(t, err)
}
