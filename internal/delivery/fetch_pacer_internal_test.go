package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFetchNowBacksOffOnlyTheIdleOthers: the fleet's first dispatcher,
// one alone and one whose last fetch found jobs always fetch; another whose
// fetches found nothing waits out its back-off.
func TestFetchNowBacksOffOnlyTheIdleOthers(t *testing.T) {
	t.Parallel()
	const backoff = 100 * time.Millisecond
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	recently, long := now.Add(-30*time.Millisecond), now.Add(-backoff)
	for _, tc := range []struct {
		name      string
		idleSince time.Time
		shard, n  int
		want      bool
	}{
		{"alone, idle", recently, 0, 1, true},
		{"first of four, idle", recently, 0, 4, true},
		{"second of four, finding work", time.Time{}, 1, 4, true},
		{"second of four, idle a moment", recently, 1, 4, false},
		{"last of four, idle a moment", recently, 3, 4, false},
		{"second of four, back-off over", long, 1, 4, true},
		{"a place out of range fetches", recently, 4, 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, fetchNow(now, tc.idleSince, backoff, tc.shard, tc.n))
		})
	}
}

// TestFetchPacerFollowsWhatFetchesFind: an empty fetch starts the back-off,
// one finding jobs ends it, the fetch past the back-off that finds nothing
// starts another; other queues are never held back.
func TestFetchPacerFollowsWhatFetchesFind(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := NewFetchPacer(QueueDeliver, 100*time.Millisecond, func() (int, int) { return 2, 3 }, func() time.Time { return now })
	ctx := context.Background()
	require.True(t, p.Fetch(ctx, QueueDeliver), "no fetch yet")
	p.Fetched(QueueDeliver, 0)
	require.False(t, p.Fetch(ctx, QueueDeliver), "found nothing: the others fetch")
	require.True(t, p.Fetch(ctx, "default"), "another queue")
	now = now.Add(60 * time.Millisecond)
	require.False(t, p.Fetch(ctx, QueueDeliver))
	now = now.Add(40 * time.Millisecond)
	require.True(t, p.Fetch(ctx, QueueDeliver), "the back-off is over")
	p.Fetched(QueueDeliver, 0)
	require.False(t, p.Fetch(ctx, QueueDeliver), "nothing again: another back-off")
	now = now.Add(100 * time.Millisecond)
	require.True(t, p.Fetch(ctx, QueueDeliver))
	p.Fetched(QueueDeliver, 7)
	require.True(t, p.Fetch(ctx, QueueDeliver), "finding work: every fetch")
	p.Fetched(QueueDeliver, 3)
	require.True(t, p.Fetch(ctx, QueueDeliver))
}
