package store

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/riverqueue/river/rivertype"
)

// A fetch of jobs marks them running, by this process's client, when the
// server runs it; if its answer never reaches the process (the connection
// broke after the server ran it, or River gave up waiting and the server
// ran it later, as after a network cut), the jobs stay running and nobody
// runs them. The process is alive, so the fleet's rescue of gone
// dispatchers never takes them, and River's rescuer only after
// RESCUE_STUCK_AFTER (over a minute). HeldRuns is what the process knows
// it runs: its heartbeat releases the others (ReleaseLostRuns).

// HeldRuns are the jobs this process fetched and handed to River and
// whose outcomes it has not written yet: its fenced driver adds a fetch's
// jobs and removes the jobs of every outcome write that got an answer. A
// job running under this process's client that is not among them was
// fetched by a fetch whose answer was lost.
type HeldRuns struct {
	// handOffWithin is how old (on the database's clock) a fetched run
	// may be when the driver hands it to River; an older one is left for
	// the release, which takes only runs older than ReleaseLostAfter.
	handOffWithin time.Duration
	now           func() time.Time

	mu  sync.Mutex
	ids map[int64]struct{}
	// doubted is when (database time) a fetch's answer was last lost or
	// came too late to hand off: from then its runs may be running here
	// unheld.
	doubted time.Time
}

// Lost runs: a fetched run is handed to River within lostRunHandOff of
// its fetch (database time) or not at all; the release takes runs older
// than LostRunAge, and acts only within lostRunWindow of reading the held
// runs. So a run the release takes was not held when it read them (it
// would have been handed off by then) and will not be handed off after:
// LostRunAge > lostRunHandOff + lostRunWindow, with a second for clock
// error (the database clock's offset is measured at a round trip's
// midpoint).
const (
	lostRunHandOff = 2 * time.Second
	lostRunWindow  = 1500 * time.Millisecond
	// LostRunAge is how long after its fetch a run nobody holds is
	// released.
	LostRunAge = 6 * time.Second
)

// NewHeldRuns returns an empty set; now is the database's clock
// (DBClock.Now).
func NewHeldRuns(now func() time.Time) *HeldRuns {
	return &HeldRuns{handOffWithin: lostRunHandOff, now: now, ids: map[int64]struct{}{}}
}

// handOff adds the jobs of a fetch that are fresh enough to hand to
// River and returns them; the others (a fetch whose answer took longer
// than lostRunHandOff) stay running for the release to take, and their
// number is returned too.
func (h *HeldRuns) handOff(jobs []*rivertype.JobRow) ([]*rivertype.JobRow, int) {
	now := h.now()
	kept := jobs[:0:0]
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, j := range jobs {
		if j.AttemptedAt != nil && now.Sub(*j.AttemptedAt) > h.handOffWithin {
			continue
		}
		h.ids[j.ID] = struct{}{}
		kept = append(kept, j)
	}
	return kept, len(jobs) - len(kept)
}

// doubt records that a fetch's answer was lost (the fetch failed, and the
// server may have run it) or came too late to hand off.
func (h *HeldRuns) doubt() {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.doubted = now
}

// Doubted returns when (database time) a fetch's answer was last lost or
// late; zero when none was. Only such a fetch leaves runs for the
// release, so the release need not scan the running jobs otherwise.
func (h *HeldRuns) Doubted() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.doubted
}

// written removes the jobs whose outcomes were written.
func (h *HeldRuns) written(ids []int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		delete(h.ids, id)
	}
}

// IDs returns the held jobs, sorted.
func (h *HeldRuns) IDs() []int64 {
	h.mu.Lock()
	ids := make([]int64, 0, len(h.ids))
	for id := range h.ids {
		ids = append(ids, id)
	}
	h.mu.Unlock()
	slices.Sort(ids)
	return ids
}

// ReleaseLostRuns makes available again the jobs running under client
// (this process's River client) that it does not hold, fetched more than
// LostRunAge ago: runs whose fetch's answer was lost. held are the jobs
// the process holds (HeldRuns.IDs), read at readAt on the database's
// clock; the statement acts only until readAt + lostRunWindow, so a late
// one (sent before a cut and run after) takes nothing. As the fleet's
// rescue does, it leaves each job's attempt to its next fetch and skips a
// row another session holds. It returns the jobs released.
func (s *Store) ReleaseLostRuns(ctx context.Context, client string, held []int64, readAt time.Time) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `
		WITH lost AS (
			SELECT id FROM river_job
			WHERE state = 'running' AND attempted_by[array_length(attempted_by, 1)] = $1
				AND attempted_at < clock_timestamp() - $3::interval
				AND NOT (id = ANY($2::bigint[]))
				AND clock_timestamp() < $4::timestamptz
			FOR UPDATE SKIP LOCKED
		), released AS (
			UPDATE river_job j SET `+rescueSet(`'released: the answer to the fetch of dispatcher ' || $1 || ' was lost; it never ran'`)+`
			FROM lost WHERE j.id = lost.id
			RETURNING 1
		)
		SELECT count(*)::int FROM released`,
		client, held, LostRunAge, readAt.Add(lostRunWindow)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("release lost runs: %w", err)
	}
	return n, nil
}
