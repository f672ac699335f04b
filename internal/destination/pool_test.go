package destination_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/destination"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestPoolKeysByConfigAndClosesIdle(t *testing.T) {
	t.Parallel()
	requireRunning(t, "Redis", redisAddr)
	stream := unique(t)
	redisAdmin(t, stream)
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	pool := destination.NewPool(destination.PoolConfig{IdleTimeout: time.Minute}, destination.Deps{Now: clock.Now})
	t.Cleanup(pool.Close)
	s := newSigner(t)
	a := &destination.RedisConfig{URL: "redis://" + redisAddr, Stream: stream}
	b := &destination.RedisConfig{URL: "redis://" + redisAddr, Stream: stream, MaxLen: 50}
	require.Equal(t, destination.Confirmed, publish(pool, a, s.message("p", 0)).Outcome)
	require.Equal(t, destination.Confirmed, publish(pool, a, s.message("p", 1)).Outcome)
	require.Equal(t, 1, pool.Len(), "one publisher per destination")
	// Another config (or rotated credentials) is another destination.
	require.Equal(t, destination.Confirmed, publish(pool, b, s.message("p", 2)).Outcome)
	require.Equal(t, 2, pool.Len())

	clock.Add(30 * time.Second)
	require.Equal(t, destination.Confirmed, publish(pool, b, s.message("p", 3)).Outcome)
	clock.Add(45 * time.Second)
	pool.CloseIdle()
	require.Equal(t, 1, pool.Len(), "a, unused for 75 s, is closed; b, used 45 s ago, is kept")
	// A destination closed for idleness connects again when used.
	require.Equal(t, destination.Confirmed, publish(pool, a, s.message("p", 4)).Outcome)
	require.Equal(t, 2, pool.Len())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, 0, pool.Len(), "Run closes every publisher as it ends")
	r := publish(pool, a, s.message("p", 5))
	require.Equal(t, destination.Failed, r.Outcome, "a closed pool publishes nothing")
}
