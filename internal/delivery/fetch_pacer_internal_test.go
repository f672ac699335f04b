package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFetchNowOutsideTurns: a dispatcher alone, outside the fleet's order,
// after a fetch that filled its slots, or that has not fetched for a poll
// interval fetches whatever the turn; another waits for its turn.
func TestFetchNowOutsideTurns(t *testing.T) {
	t.Parallel()
	const gap = 250 * time.Millisecond
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	recently, long := now.Add(-30*time.Millisecond), now.Add(-gap)
	for _, tc := range []struct {
		name     string
		last     time.Time
		full     bool
		shard, n int
		want     bool
	}{
		{"alone", recently, false, 0, 1, true},
		{"first of four, fetched a moment ago", recently, false, 0, 4, false},
		{"third of four, fetched a moment ago", recently, false, 2, 4, false},
		{"third of four, its last fetch full", recently, true, 2, 4, true},
		{"third of four, no fetch for a poll interval", long, false, 2, 4, true},
		{"third of four, never fetched", time.Time{}, false, 2, 4, true},
		{"a place out of range", recently, false, 4, 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, fetchNow(now, tc.last, tc.full, gap, tc.shard, tc.n))
		})
	}
}

// TestTurnsCoverEveryMomentOnce: at any moment some dispatcher of the
// fleet is in its turn, and away from a turn's edges exactly one; each
// has an equal share of the time.
func TestTurnsCoverEveryMomentOnce(t *testing.T) {
	t.Parallel()
	const turn, margin = 20 * time.Millisecond, time.Millisecond
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, n := range []int{2, 3, 4, 7} {
		share := make([]int, n)
		for at := start; at.Before(start.Add(2 * time.Second)); at = at.Add(100 * time.Microsecond) {
			var in []int
			for shard := range n {
				if inTurn(at, turn, margin, shard, n) {
					in = append(in, shard)
				}
			}
			require.NotEmpty(t, in, "no dispatcher's turn at %s of %d", at.Format(time.StampMicro), n)
			off := at.Sub(start) % turn
			if off > margin && off < turn-margin {
				require.Len(t, in, 1, "away from an edge one dispatcher's turn at %s of %d", at.Format(time.StampMicro), n)
				share[in[0]]++
			}
		}
		for shard := 1; shard < n; shard++ {
			require.InDelta(t, share[0], share[shard], float64(share[0])/10, "shares of the time of %d: %v", n, share)
		}
	}
}

// TestFetchPacerTakesTurns: in a fleet a dispatcher fetches in its turns
// and leaves the others' to them, fetches again at once after a fetch that
// filled its slots, and never waits longer than a poll interval; other
// queues are never held back.
func TestFetchPacerTakesTurns(t *testing.T) {
	t.Parallel()
	const turn, gap = 20 * time.Millisecond, 250 * time.Millisecond
	// The start of a turn of place 1 of 3.
	now := time.Unix(0, 0).Add(3000*turn + turn + turn/2)
	p := NewFetchPacer(QueueDeliver, turn, gap, func() (int, int) { return 1, 3 }, func() time.Time { return now })
	ctx := context.Background()
	require.True(t, p.Fetch(ctx, QueueDeliver), "its turn")
	p.Fetched(QueueDeliver, 4, 300)
	now = now.Add(turn)
	require.False(t, p.Fetch(ctx, QueueDeliver), "the next dispatcher's turn")
	require.True(t, p.Fetch(ctx, "default"), "another queue")
	now = now.Add(turn)
	require.False(t, p.Fetch(ctx, QueueDeliver), "the turn after that")
	now = now.Add(turn)
	require.True(t, p.Fetch(ctx, QueueDeliver), "its turn again")
	p.Fetched(QueueDeliver, 300, 300)
	now = now.Add(turn)
	require.True(t, p.Fetch(ctx, QueueDeliver), "its slots were filled: more are waiting")
	p.Fetched(QueueDeliver, 12, 300)
	require.False(t, p.Fetch(ctx, QueueDeliver), "outside its turn again")
	now = now.Add(gap)
	require.True(t, p.Fetch(ctx, QueueDeliver), "a poll interval without a fetch")
	p.Fetched(QueueDeliver, 0, 300)
}
