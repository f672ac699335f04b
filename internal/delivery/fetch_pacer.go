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
// first or by any dispatcher that is finding work. A dispatcher that is
// finding work fetches on every notification; under load every one is.

// FetchPacer decides which of this dispatcher's fetches of queue's jobs
// run.
type FetchPacer struct {
	queue   string
	backoff time.Duration
	share   func() (shard, n int)
	now     func() time.Time

	mu sync.Mutex
	// idleSince is when a fetch last found nothing, zero once one found
	// jobs.
	idleSince time.Time
}

var _ store.FetchPacer = (*FetchPacer)(nil)

// NewFetchPacer returns a pacer of queue's fetches that backs off for
// backoff after a fetch that found nothing, in the fleet that share
// (Fleet.Share) describes; now is the clock (time.Now).
func NewFetchPacer(queue string, backoff time.Duration, share func() (shard, n int), now func() time.Time) *FetchPacer {
	return &FetchPacer{queue: queue, backoff: backoff, share: share, now: now}
}

// Fetch reports whether this fetch of queue's jobs runs.
func (p *FetchPacer) Fetch(_ context.Context, queue string) bool {
	if queue != p.queue {
		return true
	}
	shard, n := p.share()
	p.mu.Lock()
	defer p.mu.Unlock()
	return fetchNow(p.now(), p.idleSince, p.backoff, shard, n)
}

// Fetched is told how many jobs a fetch of queue found.
func (p *FetchPacer) Fetched(queue string, jobs int) {
	if queue != p.queue {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
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
