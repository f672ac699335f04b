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
// find nothing or a few, each paying for a statement and a walk of the
// queue's index: the fleet's fetches grew with its size, its batches
// shrank, and PostgreSQL's cost per delivery grew with them.
//
// The pacer gives the dispatchers turns: time is cut into turns of equal
// length (by the database's clock, which every dispatcher shares), and
// turn k belongs to the dispatcher of place k mod n in the fleet's order.
// A notification arrives at every dispatcher at once, so the dispatcher
// whose turn it is fetches at once, as one dispatcher alone would, and the
// others leave it; the fleet fetches about as often as one dispatcher
// does, each fetch as large. Outside its turn a dispatcher still fetches
// when its last fetch filled every slot it asked for (a backlog: more jobs
// are waiting) and when it has not fetched for as long as River's poll
// interval (so a notification missed at the edge of a turn, or a fleet
// whose order is changing, waits at most a poll). A turn is widened by a
// small margin at both ends: near its edge two dispatchers may fetch, not
// none.

// FetchPacer decides which of this dispatcher's fetches of queue's jobs
// run.
type FetchPacer struct {
	queue  string
	turn   time.Duration
	margin time.Duration
	gap    time.Duration
	share  func() (shard, n int)
	now    func() time.Time

	mu sync.Mutex
	// last is when a fetch last ran; full, whether it found as many jobs
	// as it asked for.
	last time.Time
	full bool
}

var _ store.FetchPacer = (*FetchPacer)(nil)

// NewFetchPacer returns a pacer of queue's fetches in the fleet that share
// (Fleet.Share) describes, giving each dispatcher turns of length turn and
// letting one fetch whenever it has not for gap (River's poll interval);
// now is the clock the fleet shares (DBClock.Now).
func NewFetchPacer(queue string, turn, gap time.Duration, share func() (shard, n int), now func() time.Time) *FetchPacer {
	return &FetchPacer{queue: queue, turn: turn, margin: turn / 20, gap: gap, share: share, now: now}
}

// Fetch reports whether this fetch of queue's jobs runs.
func (p *FetchPacer) Fetch(_ context.Context, queue string) bool {
	if queue != p.queue {
		return true
	}
	shard, n := p.share()
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !fetchNow(now, p.last, p.full, p.gap, shard, n) && !inTurn(now, p.turn, p.margin, shard, n) {
		return false
	}
	p.last = now
	return true
}

// Fetched is told how many jobs a fetch of queue found of the limit it
// asked for.
func (p *FetchPacer) Fetched(queue string, jobs, limit int) {
	if queue != p.queue {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.full = jobs > 0 && jobs >= limit
}

// fetchNow reports whether the dispatcher of place shard among n fetches
// at now whatever the turn: alone (or outside the fleet's order, which it
// has not joined yet), after a fetch that filled its slots (full), or when
// it has not fetched since gap before now (last).
func fetchNow(now, last time.Time, full bool, gap time.Duration, shard, n int) bool {
	return n <= 1 || shard < 0 || shard >= n || full || last.IsZero() || now.Sub(last) >= gap
}

// inTurn reports whether now is within the turn of the dispatcher of place
// shard among n, turns being turn long and widened by margin at both ends.
func inTurn(now time.Time, turn, margin time.Duration, shard, n int) bool {
	if turn <= 0 {
		return true
	}
	for _, at := range []time.Time{now, now.Add(-margin), now.Add(margin)} {
		if int((at.UnixNano()/int64(turn))%int64(n)) == shard {
			return true
		}
	}
	return false
}
