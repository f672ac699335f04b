package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNextFetchTakesTurns: a dispatcher fetches at once only in its own
// slot and once per turn, else at its next slot's start.
func TestNextFetchTakesTurns(t *testing.T) {
	t.Parallel()
	const slot = 5 * time.Millisecond
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // a multiple of every turn
	at := func(ms float64) time.Time { return epoch.Add(time.Duration(ms * float64(time.Millisecond))) }
	never := time.Time{}
	for _, tc := range []struct {
		name     string
		now      float64
		last     time.Time
		shard, n int
		want     float64
	}{
		{"alone, never fetched: now", 2, never, 0, 1, 2},
		{"alone, fetched in this slot: the next", 3, at(1), 0, 1, 5},
		{"alone, fetched in the last slot: now", 6, at(4), 0, 1, 6},
		{"first of four, in its slot: now", 1, never, 0, 4, 1},
		{"first of four, after its slot: next turn", 7, never, 0, 4, 20},
		{"second of four, before its slot: its start", 1, never, 1, 4, 5},
		{"second of four, in its slot: now", 7, never, 1, 4, 7},
		{"second of four, fetched in this slot: next turn", 8, at(6), 1, 4, 25},
		{"second of four, its start already taken: next turn", 1, at(5), 1, 4, 25},
		{"last of four, late in the turn: now", 19, at(4), 3, 4, 19},
		{"a place out of range counts as alone", 3, never, 5, 4, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := nextFetch(at(tc.now), tc.last, slot, tc.shard, tc.n)
			require.Equal(t, at(tc.want), got)
		})
	}
}

// TestPacedFleetFetchesOncePerSlot: dispatchers that want to fetch all
// the time, each paced by its place in the fleet, fetch as often together
// as one alone does, each one in its own slots.
func TestPacedFleetFetchesOncePerSlot(t *testing.T) {
	t.Parallel()
	const slot = 5 * time.Millisecond
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fetches := func(n int) map[time.Time]int {
		got := map[time.Time]int{}
		for shard := range n {
			last := time.Time{}
			now := epoch
			for now.Before(epoch.Add(time.Second)) {
				at := nextFetch(now, last, slot, shard, n)
				require.False(t, at.Before(now))
				got[at.Truncate(slot)]++
				turn := slot * time.Duration(n)
				require.Equal(t, shard, int(at.Sub(at.Truncate(turn))/slot), "a fetch outside its own slots")
				last = at
				now = at.Add(time.Millisecond / 3) // the fetch's time, then it asks again
			}
		}
		return got
	}
	one := fetches(1)
	for _, n := range []int{2, 4, 7} {
		got := fetches(n)
		require.InDelta(t, len(one), len(got), float64(n), "slots fetched in one second by %d dispatchers", n)
		for s, c := range got {
			require.Equal(t, 1, c, "two fetches in slot %s", s)
		}
	}
}

// TestFetchPacerWaitsForItsTurn: the pacer holds a fetch of its queue
// until its slot and lets other queues' fetches through; a cancelled wait
// returns the context's error.
func TestFetchPacerWaitsForItsTurn(t *testing.T) {
	t.Parallel()
	p := NewFetchPacer(QueueDeliver, time.Hour, func() (int, int) { return 1, 2 }, func() time.Time {
		return time.Date(2026, 1, 1, 0, 10, 0, 0, time.UTC) // in shard 0's slot
	})
	require.NoError(t, p.BeforeFetch(context.Background(), "default"), "another queue is not paced")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, p.BeforeFetch(ctx, QueueDeliver), context.Canceled)

	alone := NewFetchPacer(QueueDeliver, time.Hour, func() (int, int) { return 0, 1 }, func() time.Time {
		return time.Date(2026, 1, 1, 0, 10, 0, 0, time.UTC)
	})
	require.NoError(t, alone.BeforeFetch(context.Background(), QueueDeliver), "its slot: no wait")
}
