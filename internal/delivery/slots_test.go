package delivery

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
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
		// Holders keep their slot until the cap is reached, so the
		// others contend for full slots.
		full := make(chan struct{})
		var fullOnce sync.Once
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
				if n == 3 {
					fullOnce.Do(func() { close(full) })
				}
				<-full
				inFlight.Add(-1)
				s.release("ep", time.Millisecond)
			}()
		}
		wg.Wait()
		require.Equal(t, int64(3), peak.Load(), "the cap is reached and never passed")
	})

	t.Run("a fast endpoint's delivery waits for a slot", func(t *testing.T) {
		t.Parallel()
		// In a synctest bubble the clock is fake and synctest.Wait returns
		// once the second acquire is blocked waiting for the slot.
		synctest.Test(t, func(t *testing.T) {
			s := newEndpointSlots(1)
			require.True(t, s.acquire(ctx, "fast"))
			got := make(chan bool)
			go func() { got <- s.acquire(ctx, "fast") }()
			synctest.Wait()
			select {
			case <-got:
				t.Fatal("acquire returned while the slot was taken")
			default:
			}
			s.release("fast", 5*time.Millisecond)
			require.True(t, <-got, "the slot freed within maxWait")
		})
	})

	// In a bubble, time passes only while every goroutine waits: a refusal
	// "at once" takes no time at all, a wait exactly maxWait.
	t.Run("a slow endpoint's delivery is refused at once", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
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
			require.Zero(t, time.Since(start), "no wait for a slow endpoint")
		})
	})

	// A refused delivery's job comes back when a slot may be free: soon
	// for a fast endpoint, after about one answer's time for a slow one.
	t.Run("a refused delivery waits for about one answer", func(t *testing.T) {
		t.Parallel()
		s := newEndpointSlots(1)
		require.Equal(t, minSlotRetry, s.retryIn("unknown"))
		for _, tt := range []struct {
			id   string
			took time.Duration
			want time.Duration
		}{
			{"fast", 5 * time.Millisecond, minSlotRetry},
			{"slow", 2 * time.Second, 2 * time.Second},
			{"hanging", time.Minute, maxSlotRetry},
		} {
			// Many answers of the same time: the average converges on it.
			for range 200 {
				require.True(t, s.acquire(ctx, tt.id))
				s.release(tt.id, tt.took)
			}
			require.True(t, s.acquire(ctx, tt.id), tt.id)
			require.InDelta(t, tt.want.Seconds(), s.retryIn(tt.id).Seconds(), tt.want.Seconds()/20, tt.id)
			s.release(tt.id, tt.took)
		}
	})

	t.Run("a full fast endpoint gives up after maxWait", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			s := newEndpointSlots(1)
			require.True(t, s.acquire(ctx, "stuck"))
			start := time.Now()
			require.False(t, s.acquire(ctx, "stuck"))
			require.Equal(t, s.maxWait, time.Since(start))
		})
	})
}
