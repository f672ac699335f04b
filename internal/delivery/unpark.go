package delivery

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/store"
)

// ParkedStore finds and releases parked deliveries.
type ParkedStore interface {
	ParkedEndpoints(ctx context.Context, ids []string) ([]store.ParkedEndpoint, error)
	ParkedEndpointsOfShard(ctx context.Context, shard, n int) ([]store.ParkedEndpoint, error)
	ReleaseParked(ctx context.Context, endpointID string, limit int, enq store.Enqueuer) ([]store.Released, error)
	ReleaseOutcomes(ctx context.Context, released []store.Released) ([]store.ReleaseOutcome, error)
	EndHeldRelease(ctx context.Context, endpointID string, linger time.Duration) (bool, error)
	AdvanceQueue(ctx context.Context, endpointID string, enq store.Enqueuer) error
}

var _ ParkedStore = (*store.Store)(nil)

// Unparker gives parked deliveries their jobs back, and the held
// deliveries of an endpoint that was enabled (held ones first). When an
// endpoint's breaker is closed it releases them, oldest first, at a pace
// (see UnparkPace) rather than all at once; when it could
// admit a probe (open past open_until, or half-open with no trial in
// flight) it releases the oldest one, which becomes the probe, so an
// endpoint whose whole backlog is parked still gets probed without new
// traffic. It runs a pass over every endpoint with parked deliveries every
// interval (over its shard of the endpoints, SetShare), and a pass over
// one endpoint when Kick names it (the breaker gate kicks on every
// transition and trial it sees). Concurrent unparkers in other processes
// never release a delivery twice.
type Unparker struct {
	store    ParkedStore
	enq      store.Enqueuer
	interval time.Duration
	logger   *slog.Logger
	metrics  *Metrics
	kick     chan string
	pace     UnparkPace
	share    func() (shard, n int)

	// window holds, per endpoint whose closed breaker still has parked
	// deliveries, how many of its deliveries may have a job due at once,
	// the failures its breaker had counted at the last pass and the
	// deliveries it released whose outcome is not known yet. Only Run's
	// goroutine (or a test calling Pass) touches it.
	window map[string]paceState
}

type paceState struct {
	window   int
	failures int
	// congested is set once a failure was seen: the window then grows by
	// Start per pass instead of doubling.
	congested bool
	// released are the deliveries this unparker released whose outcome
	// it has not seen yet (the latest trackedReleases).
	released []store.Released
}

// UnparkPace is how a closed breaker's parked backlog is released. Released
// all at once, a backlog of thousands is queued into a fresh window: the
// jobs beyond the per-endpoint cap snooze every 100 ms, churning the queue,
// and an endpoint that just recovered, perhaps barely, takes the whole
// fleet's cap at once and trips again. Instead the unparker keeps at most a
// window of the endpoint's deliveries queued (its own new traffic
// included): the window starts at Start, a few trials' worth, doubles on
// each pass that finds at least half of it drained (the endpoint keeps up)
// up to Max, about the per-endpoint cap times the dispatchers, and halves
// (to no less than 1) on a pass that finds a failure since the last: a
// delivery it released attempted and not delivered (read from the
// deliveries, which the ledger writes before an attempt's job ends: a
// refused delivery waiting for its retry no longer counts as queued, and
// the breaker's shared counts of it follow only at their next flush), or
// new failures counted by the breaker (the endpoint's other traffic);
// after a failure it grows by Start per pass, not doubling (TCP's
// congestion avoidance after slow start). A pass runs
// every Interval while a backlog is being released. So the release follows the rate and the concurrency the
// endpoint shows it takes, and a barely recovered endpoint is not handed
// more than it answered well.
type UnparkPace struct {
	// Start is the first window: a few trials' worth. Default 4.
	Start int
	// Max is the largest window. Default 100.
	Max int
	// Interval is how often a backlog being released is looked at.
	// Default 200ms.
	Interval time.Duration
}

// SetPace sets the release pace; call it before Run.
func (u *Unparker) SetPace(p UnparkPace) {
	if p.Start <= 0 {
		p.Start = 4
	}
	if p.Max < p.Start {
		p.Max = max(100, p.Start)
	}
	if p.Interval <= 0 {
		p.Interval = 200 * time.Millisecond
	}
	u.pace = p
}

// SetShare splits the periodic pass among the fleet: it covers only the
// endpoints of this process's shard (share, read at every pass), so each
// endpoint's backlog is paced by one dispatcher and the fleet lists the
// parked deliveries once per interval, whatever its size. Kicks and the
// paced passes of endpoints being released still cover the endpoints
// they name. Call it before Run.
func (u *Unparker) SetShare(share func() (shard, n int)) { u.share = share }

// releaseBatch is how many deliveries one release transaction queues.
const releaseBatch = 500

// heldReleaseLinger is how long after an enable the unparker still looks
// for held deliveries of the endpoint before it clears its release stamp
// (see store.EndHeldRelease).
const heldReleaseLinger = time.Minute

// NewUnparker returns an unparker; call Run.
func NewUnparker(st ParkedStore, enq store.Enqueuer, interval time.Duration, logger *slog.Logger, metrics *Metrics) *Unparker {
	if interval <= 0 {
		interval = 2 * time.Second
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	u := &Unparker{store: st, enq: enq, interval: interval, logger: logger, metrics: metrics, kick: make(chan string, 1024), window: map[string]paceState{}}
	u.SetPace(UnparkPace{})
	return u
}

// Kick asks for a pass over one endpoint soon. It never blocks.
func (u *Unparker) Kick(endpointID string) {
	select {
	case u.kick <- endpointID:
	default: // the periodic pass catches up
	}
}

// Run passes until ctx ends.
func (u *Unparker) Run(ctx context.Context) {
	t := time.NewTicker(u.interval)
	defer t.Stop()
	pace := time.NewTicker(u.pace.Interval)
	defer pace.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			u.Pass(ctx, nil)
		case <-pace.C:
			if ids := u.Releasing(); len(ids) > 0 {
				u.Pass(ctx, ids)
			}
		case id := <-u.kick:
			u.Pass(ctx, []string{id})
		}
	}
}

// Releasing lists the endpoints whose closed breaker's backlog is being
// released at a pace.
func (u *Unparker) Releasing() []string {
	ids := make([]string, 0, len(u.window))
	for id := range u.window {
		ids = append(ids, id)
	}
	return ids
}

// Pass releases what may go now, for the endpoints in ids (all when nil).
func (u *Unparker) Pass(ctx context.Context, ids []string) {
	var list []store.ParkedEndpoint
	var err error
	if shard, n := u.shareOf(); ids == nil && n > 1 {
		list, err = u.store.ParkedEndpointsOfShard(ctx, shard, n)
	} else {
		list, err = u.store.ParkedEndpoints(ctx, ids)
	}
	if err != nil {
		if ctx.Err() == nil {
			u.logger.Warn("unpark_pass", slog.String("error", err.Error()))
		}
		return
	}
	failed := u.stepFailures(ctx, list)
	listed := make(map[string]bool, len(list))
	for _, pe := range list {
		if pe.ReleasingHeld && pe.Held == 0 {
			if _, err := u.store.EndHeldRelease(ctx, pe.EndpointID, heldReleaseLinger); err != nil && ctx.Err() == nil {
				u.logger.Warn("unpark_end_held_release", slog.String("endpoint", pe.EndpointID), slog.String("error", err.Error()))
			}
		}
		if pe.Backlog() == 0 {
			continue
		}
		listed[pe.EndpointID] = true
		switch state := pe.Breaker.EffectiveState(pe.Now); {
		case pe.FIFO:
			// A FIFO queue goes one delivery at a time, its head first.
			delete(u.window, pe.EndpointID)
			if state == breaker.StateClosed || (state == breaker.StateHalfOpen && !pe.TrialInFlight) {
				u.advance(ctx, pe.EndpointID)
			}
		case state == breaker.StateClosed:
			u.track(pe.EndpointID, u.release(ctx, pe.EndpointID, u.paced(pe, failed[pe.EndpointID])))
		case state == breaker.StateHalfOpen:
			delete(u.window, pe.EndpointID)
			if !pe.TrialInFlight {
				u.release(ctx, pe.EndpointID, 1)
			}
		default:
			delete(u.window, pe.EndpointID)
		}
	}
	// An endpoint with nothing parked any more is done (or was deleted).
	for id := range u.window {
		if !listed[id] && (ids == nil || slices.Contains(ids, id)) {
			delete(u.window, id)
		}
	}
}

// shareOf is the process's shard of the periodic pass: all of it (0 of 1)
// without a share.
func (u *Unparker) shareOf() (shard, n int) {
	if u.share == nil {
		return 0, 1
	}
	return u.share()
}

// stepFailures reads what became of the deliveries released to the
// listed endpoints being paced, forgets those whose outcome is known, and
// returns how many of each endpoint's were attempted and not delivered.
// On an error it returns nothing and keeps them for the next pass.
func (u *Unparker) stepFailures(ctx context.Context, list []store.ParkedEndpoint) map[string]int {
	var released []store.Released
	var owners []string
	for _, pe := range list {
		for _, r := range u.window[pe.EndpointID].released {
			released = append(released, r)
			owners = append(owners, pe.EndpointID)
		}
	}
	if len(released) == 0 {
		return nil
	}
	outcomes, err := u.store.ReleaseOutcomes(ctx, released)
	if err != nil {
		if ctx.Err() == nil {
			u.logger.Warn("unpark_release_outcomes", slog.String("error", err.Error()))
		}
		return nil
	}
	failed := map[string]int{}
	outstanding := map[string][]store.Released{}
	for i, o := range outcomes {
		switch o {
		case store.ReleaseOutstanding:
			outstanding[owners[i]] = append(outstanding[owners[i]], released[i])
		case store.ReleaseFailed:
			failed[owners[i]]++
		}
	}
	for _, pe := range list {
		if st, ok := u.window[pe.EndpointID]; ok {
			st.released = outstanding[pe.EndpointID]
			u.window[pe.EndpointID] = st
		}
	}
	return failed
}

// trackedReleases bounds the released deliveries the unparker follows
// per endpoint being paced: the latest, which an endpoint taking more
// than it can refuses first. Bounded so that thousands of endpoints
// recovering at once (one host's) cost one pass a bounded read and
// bounded memory; a refusal among the others reaches the pace through
// the breaker's counts at their next flush.
const trackedReleases = 16

// track remembers the deliveries just released to an endpoint being
// paced, to read their outcomes at the next pass (the latest
// trackedReleases of them).
func (u *Unparker) track(endpointID string, released []store.Released) {
	st, ok := u.window[endpointID]
	if !ok || len(released) == 0 {
		return
	}
	st.released = append(st.released, released...)
	if over := len(st.released) - trackedReleases; over > 0 {
		st.released = slices.Delete(st.released, 0, over)
	}
	u.window[endpointID] = st
}

// paced returns how many of a closed breaker's parked deliveries may be
// released now, and moves its window (see UnparkPace); failed is how many
// of the deliveries it released were attempted and not delivered since
// the last pass.
func (u *Unparker) paced(pe store.ParkedEndpoint, failed int) int {
	st, ok := u.window[pe.EndpointID]
	switch {
	case !ok:
		st.window = u.pace.Start
	case failed > 0 || pe.Failures > st.failures:
		st.window, st.congested = max(st.window/2, 1), true
	case pe.Queued <= st.window/2 && st.congested:
		st.window = min(st.window+u.pace.Start, u.pace.Max)
	case pe.Queued <= st.window/2:
		st.window = min(2*st.window, u.pace.Max)
	}
	st.failures = pe.Failures
	n := min(pe.Backlog(), max(st.window-pe.Queued, 0))
	if n < pe.Backlog() {
		u.window[pe.EndpointID] = st
	} else {
		delete(u.window, pe.EndpointID)
	}
	return n
}

// Window returns the release window of an endpoint whose backlog is being
// released at a pace, or 0.
func (u *Unparker) Window(endpointID string) int { return u.window[endpointID].window }

// advance moves a FIFO endpoint's queue: its head, parked or in line,
// gets its job when nothing of the queue is in flight.
func (u *Unparker) advance(ctx context.Context, endpointID string) {
	if err := u.store.AdvanceQueue(ctx, endpointID, u.enq); err != nil && ctx.Err() == nil {
		u.logger.Warn("unpark_advance", slog.String("endpoint", endpointID), slog.String("error", err.Error()))
	}
}

// release queues up to n parked deliveries of one endpoint and returns
// them.
func (u *Unparker) release(ctx context.Context, endpointID string, n int) []store.Released {
	var released []store.Released
	for len(released) < n && ctx.Err() == nil {
		got, err := u.store.ReleaseParked(ctx, endpointID, min(n-len(released), releaseBatch), u.enq)
		if err != nil {
			if ctx.Err() == nil {
				u.logger.Warn("unpark_release", slog.String("endpoint", endpointID), slog.String("error", err.Error()))
			}
			break
		}
		if len(got) == 0 {
			break
		}
		released = append(released, got...)
	}
	if len(released) == 0 {
		return nil
	}
	if u.metrics != nil {
		u.metrics.Unparked.Add(float64(len(released)))
	}
	u.logger.Info("deliveries_unparked", slog.String("endpoint", endpointID), slog.Int("released", len(released)))
	return released
}
