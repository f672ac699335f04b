package delivery

import (
	"context"
	"sync"
	"time"

	"github.com/hookd/hookd/internal/store"
)

// River fetches jobs in every process on every insert notification (each
// notification reaches every producer). In a fleet of n dispatchers the
// first fetch takes the jobs a notification announced and the n - 1 others
// find nothing, each paying for the same walk of the queue's index: the
// fleet's fetches grew n-fold, PostgreSQL's cost per delivery with them.
// The pacer lets a dispatcher whose last fetch found nothing leave the
// fetches of the next notifications to the others for a while (its
// back-off), except the first dispatcher in the fleet's order, which
// always fetches: a job is fetched as soon as with one dispatcher, by the
// first or by any dispatcher that is finding work.
//
// Under load every dispatcher finds work at every notification, and the
// fleet's n fetches of one notification's jobs each take a nth of them:
// the fleet fetched n times as often as one dispatcher, River's completions
// and this process's ledger then ran in batches n times smaller. So a
// dispatcher in a fleet of n spaces its fetches by n - 1 times
// FetchSpacing (at most MaxFetchSpacing): the fleet fetches about as often
// as one dispatcher would, each fetch as large. A fetch that filled every
// free worker slot (a backlog) is followed by the next without a wait, and
// a dispatcher that has not fetched for the spacing fetches at once, so a
// quiet queue's job waits for no spacing.

// FetchSpacing is how much longer a dispatcher's fetches are spaced for
// each other dispatcher in the fleet; MaxFetchSpacing caps the spacing.
const (
	FetchSpacing    = 25 * time.Millisecond
	MaxFetchSpacing = 100 * time.Millisecond
)

// FetchPacer decides which of this dispatcher's fetches of queue's jobs
// run, and when.
type FetchPacer struct {
	queue   string
	backoff time.Duration
	share   func() (shard, n int)
	now     func() time.Time

	mu sync.Mutex
	// idleSince is when a fetch last found nothing, zero once one found
	// jobs.
	idleSince time.Time
	// last is when the last fetch ran; full, whether it filled the worker
	// slots it was asked for.
	last time.Time
	full bool
}

var _ store.FetchPacer = (*FetchPacer)(nil)

// NewFetchPacer returns a pacer of queue's fetches that backs off for
// backoff after a fetch that found nothing, in the fleet that share
// (Fleet.Share) describes; now is the clock (time.Now).
func NewFetchPacer(queue string, backoff time.Duration, share func() (shard, n int), now func() time.Time) *FetchPacer {
	return &FetchPacer{queue: queue, backoff: backoff, share: share, now: now}
}

// Fetch reports whether this fetch of queue's jobs runs, after waiting
// out the fleet's spacing (fetchDelay) or until ctx ends.
func (p *FetchPacer) Fetch(ctx context.Context, queue string) bool {
	if queue != p.queue {
		return true
	}
	shard, n := p.share()
	p.mu.Lock()
	now := p.now()
	if !fetchNow(now, p.idleSince, p.backoff, shard, n) {
		p.mu.Unlock()
		return false
	}
	wait := fetchDelay(now, p.last, p.full, n)
	p.mu.Unlock()
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// fetchDelay is how long a fetch at now waits in a fleet of n when the
// last fetch ran at last (full: it filled the slots it was asked for).
func fetchDelay(now, last time.Time, full bool, n int) time.Duration {
	if n <= 1 || full || last.IsZero() {
		return 0
	}
	spacing := min(time.Duration(n-1)*FetchSpacing, MaxFetchSpacing)
	return max(last.Add(spacing).Sub(now), 0)
}

// Fetched is told how many jobs a fetch of queue found, of the limit it
// asked for.
func (p *FetchPacer) Fetched(queue string, jobs, limit int) {
	if queue != p.queue {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last, p.full = p.now(), limit > 0 && jobs >= limit
	switch {
	case jobs > 0:
		p.idleSince = time.Time{}
	case p.idleSince.IsZero() || p.now().Sub(p.idleSince) >= p.backoff:
		// A fetch past the back-off found nothing again: another.
		p.idleSince = p.now()
	}
}

// fetchNow reports whether the dispatcher of place shard among n, whose
// fetches have found nothing since idleSince (zero: its last found jobs),
// fetches at now.
func fetchNow(now, idleSince time.Time, backoff time.Duration, shard, n int) bool {
	if n <= 1 || shard <= 0 || shard >= n || idleSince.IsZero() {
		return true
	}
	return now.Sub(idleSince) >= backoff
}
