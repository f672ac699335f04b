package delivery

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestEndpointSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("never more than max in flight", func(t *testing.T) {
		t.Parallel()
		s := newEndpointSlots(3)
		var inFlight, peak atomic.Int64
		var wg sync.WaitGroup
		for range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if !s.acquire(ctx, "ep") {
					return
				}
				n := inFlight.Add(1)
				for m := peak.Load(); n > m && !peak.CompareAndSwap(m, n); m = peak.Load() {
				}
				time.Sleep(time.Millisecond)
				inFlight.Add(-1)
				s.release("ep", time.Millisecond)
			}()
		}
		wg.Wait()
		require.LessOrEqual(t, peak.Load(), int64(3))
	})

	t.Run("a fast endpoint's delivery waits for a slot", func(t *testing.T) {
		t.Parallel()
		s := newEndpointSlots(1)
		require.True(t, s.acquire(ctx, "fast"))
		go func() {
			time.Sleep(5 * time.Millisecond)
			s.release("fast", 5*time.Millisecond)
		}()
		require.True(t, s.acquire(ctx, "fast"), "the slot freed within maxWait")
	})

	t.Run("a slow endpoint's delivery is refused at once", func(t *testing.T) {
		t.Parallel()
		s := newEndpointSlots(1)
		require.True(t, s.acquire(ctx, "slow"))
		s.release("slow", 10*time.Second)
		s.release("slow", 10*time.Second) // its latency average is now slow
		for range 20 {
			require.True(t, s.acquire(ctx, "slow"))
			s.release("slow", 10*time.Second)
		}
		require.True(t, s.acquire(ctx, "slow"))
		start := time.Now()
		require.False(t, s.acquire(ctx, "slow"))
		require.Less(t, time.Since(start), 20*time.Millisecond, "no wait for a slow endpoint")
	})

	t.Run("a full fast endpoint gives up after maxWait", func(t *testing.T) {
		t.Parallel()
		s := newEndpointSlots(1)
		require.True(t, s.acquire(ctx, "stuck"))
		start := time.Now()
		require.False(t, s.acquire(ctx, "stuck"))
		require.GreaterOrEqual(t, time.Since(start), s.maxWait)
	})
}
