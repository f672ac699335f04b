package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/store"
)

// TestTrialsInFlightIsTheFleetsCount: the breaker a trial step sees
// carries the number of trial leases in flight, not a stand-in 0 or 1.
func TestTrialsInFlightIsTheFleetsCount(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	b.openBreaker(t, e.ID)
	pool := s.TrialLeases()
	cfg := testCfg
	cfg.HalfOpenConcurrency, cfg.HalfOpenTrials = 3, 5
	meta := store.TransitionMeta{Actor: "test"}

	first, d, after, err := pool.Acquire(ctx, e.ID, cfg, time.Minute, meta)
	require.NoError(t, err)
	require.Equal(t, breaker.Trial, d.Admission)
	assert.Equal(t, 1, after.TrialsInFlight)
	second, d, after, err := pool.Acquire(ctx, e.ID, cfg, time.Minute, meta)
	require.NoError(t, err)
	require.Equal(t, breaker.Trial, d.Admission)
	assert.Equal(t, 2, after.TrialsInFlight, "two slots are leased")

	_, after, err = first.Finish(ctx, cfg, breaker.OutcomeSuccess, nil, meta)
	require.NoError(t, err)
	assert.Equal(t, 1, after.TrialsInFlight, "the second trial is still in flight")
	_, after, err = second.Finish(ctx, cfg, breaker.OutcomeSuccess, nil, meta)
	require.NoError(t, err)
	require.Zero(t, after.TrialsInFlight)
}
