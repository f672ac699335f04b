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
// carries the number of trial slot locks held, not a stand-in 0 or 1.
func TestTrialsInFlightIsTheFleetsCount(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	b.openBreaker(t, e.ID)
	pool, err := s.OpenTrialPool(ctx, b.db.URL, 4, time.Minute, "store-test")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	cfg := testCfg
	cfg.HalfOpenConcurrency, cfg.HalfOpenTrials = 3, 5
	meta := store.TransitionMeta{Actor: "test"}

	first, d, after, err := pool.Acquire(ctx, e.ID, cfg, meta)
	require.NoError(t, err)
	require.Equal(t, breaker.Trial, d.Admission)
	assert.Equal(t, 1, after.TrialsInFlight)
	second, d, after, err := pool.Acquire(ctx, e.ID, cfg, meta)
	require.NoError(t, err)
	require.Equal(t, breaker.Trial, d.Admission)
	// assert, not require: the trials must still finish, or the pool's
	// Close waits for their connections.
	assert.Equal(t, 2, after.TrialsInFlight, "two slot locks are held")

	_, after, err = first.Finish(ctx, cfg, breaker.OutcomeSuccess, nil, meta)
	require.NoError(t, err)
	assert.Equal(t, 1, after.TrialsInFlight, "the second trial is still in flight")
	_, after, err = second.Finish(ctx, cfg, breaker.OutcomeSuccess, nil, meta)
	require.NoError(t, err)
	require.Zero(t, after.TrialsInFlight)
}
