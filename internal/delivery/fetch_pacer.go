package delivery

import (
	"context"
	"sync"
	"time"

	"github.com/hookd/hookd/internal/store"
)

// River fetches jobs in every process on every insert notification (each
// notification reaches every producer), at most once per FetchCooldown.
// A fleet of n dispatchers therefore fetches n times as often as one,
// each fetch finding fewer jobs, and every fetch pays for the same walk of
// the queue's index: PostgreSQL's cost per delivery grows with the fleet.
// The pacer splits time into slots of one cooldown and gives them to the
// live dispatchers in turn (by their place in the fleet, Fleet.Share): a
// dispatcher fetches at most once per turn, in its own slot, so the
// fleet's fetches stay at one per cooldown whatever its size, and a job
// inserted waits at most about a cooldown for some dispatcher's fetch, as
// with one dispatcher. The slots are on each host's clock: clocks apart
// by a few milliseconds make turns overlap, never lose them.

// FetchPacer spaces this dispatcher's fetches of queue's jobs.
type FetchPacer struct {
	queue string
	slot  time.Duration
	share func() (shard, n int)
	now   func() time.Time

	mu   sync.Mutex
	last time.Time
}

var _ store.FetchPacer = (*FetchPacer)(nil)

// NewFetchPacer returns a pacer of queue's fetches in slots of slot,
// shared by share (Fleet.Share); now is the clock (time.Now).
func NewFetchPacer(queue string, slot time.Duration, share func() (shard, n int), now func() time.Time) *FetchPacer {
	return &FetchPacer{queue: queue, slot: slot, share: share, now: now}
}

// BeforeFetch waits for this dispatcher's next turn to fetch queue's jobs;
// other queues fetch at once.
func (p *FetchPacer) BeforeFetch(ctx context.Context, queue string) error {
	if queue != p.queue || p.slot <= 0 {
		return nil
	}
	shard, n := p.share()
	p.mu.Lock()
	now := p.now()
	at := nextFetch(now, p.last, p.slot, shard, n)
	p.last = at
	p.mu.Unlock()
	if wait := at.Sub(now); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// nextFetch is when the dispatcher of place shard among n, whose last
// fetch was at last, fetches next at the earliest from now: now if now is
// in its slot and it has not fetched in that slot, else the start of its
// next slot. Slots are slot long and taken in turn, a turn n slots long.
func nextFetch(now, last time.Time, slot time.Duration, shard, n int) time.Time {
	if n < 1 || shard < 0 || shard >= n {
		shard, n = 0, 1
	}
	turn := slot * time.Duration(n)
	start := now.Truncate(turn).Add(time.Duration(shard) * slot)
	if start.After(now) {
		// Its slot in this turn is still to come; the previous turn's
		// slot ended before now (start - turn + slot <= now).
		if last.Before(start) {
			return start
		}
		return start.Add(turn)
	}
	if now.Before(start.Add(slot)) && last.Before(start) {
		return now
	}
	return start.Add(turn)
}
