package delivery

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEndpointSlotsForgetIdleEndpoints: an endpoint with nothing in flight
// holds no entry, so the map is as large as the endpoints being delivered
// to now, not every endpoint ever seen.
func TestEndpointSlotsForgetIdleEndpoints(t *testing.T) {
	t.Parallel()
	s := newEndpointSlots(2)
	for i := range 1000 {
		id := fmt.Sprintf("ep_%d", i)
		require.True(t, s.acquire(context.Background(), id))
		require.True(t, s.acquire(context.Background(), id))
		s.release(id, time.Millisecond)
		s.release(id, 0)
	}
	require.True(t, s.acquire(context.Background(), "busy"))
	s.mu.Lock()
	n := len(s.m)
	s.mu.Unlock()
	require.Equal(t, 1, n, "only the endpoint with an attempt in flight has an entry")
	s.release("busy", 0)

	// Slow endpoints are remembered while idle, but boundedly.
	for i := range 3 * maxIdleSlots {
		id := fmt.Sprintf("slow_%d", i)
		require.True(t, s.acquire(context.Background(), id))
		s.release(id, 10*time.Second)
	}
	s.mu.Lock()
	n = len(s.m)
	s.mu.Unlock()
	require.LessOrEqual(t, n, maxIdleSlots+1)
}
