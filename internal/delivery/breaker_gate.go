package delivery

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/store"
)

// BreakerStore is the Postgres side of the shared breaker.
type BreakerStore interface {
	LoadBreakers(ctx context.Context, ids []string) (map[string]breaker.Breaker, error)
	FlushOutcomes(ctx context.Context, counts []store.OutcomeCount, runs []store.RunCount, want []store.EvidenceRequest) ([]store.Evidence, error)
	CommitTransition(ctx context.Context, endpointID string, prev int64, b breaker.Breaker, t breaker.Transition, meta store.TransitionMeta) (bool, error)
	PruneBuckets(ctx context.Context, keep time.Duration, limit int) (int64, error)
	EpisodeStart(ctx context.Context, endpointID string, shadow bool) (time.Time, error)
}

var _ BreakerStore = (*store.Store)(nil)

// TrialAcquirer admits half-open trials fleet-wide, each holding a lease
// of the given length on one of its endpoint's trial slots.
type TrialAcquirer interface {
	Acquire(ctx context.Context, endpointID string, c breaker.Config, lease time.Duration, meta store.TransitionMeta) (*store.Trial, breaker.Decision, breaker.Breaker, error)
}

var _ TrialAcquirer = (*store.TrialLeases)(nil)

// DefaultTrialLeaseMargin is how much longer than its attempt's timeout a
// trial's lease lasts: the time from the admission to the request's start
// (reading the payload), and then TrialStepTimeout to record the outcome.
const DefaultTrialLeaseMargin = 15 * time.Second

// BreakerConfigs gives an endpoint's breaker config (its traffic class) and
// whether the breaker is enforced or runs in shadow mode.
type BreakerConfigs interface {
	BreakerConfig(t *Target) (c breaker.Config, enforce bool)
}

// FixedBreakerConfig gives every endpoint the same enforced config.
type FixedBreakerConfig struct {
	Config breaker.Config
}

var _ BreakerConfigs = FixedBreakerConfig{}

// BreakerConfig returns the fixed config.
func (f FixedBreakerConfig) BreakerConfig(*Target) (breaker.Config, bool) { return f.Config, true }

// BreakerGateConfig tunes the gate.
type BreakerGateConfig struct {
	// FlushInterval is how often counted outcomes go to Postgres and trips
	// are evaluated. Default 100ms.
	FlushInterval time.Duration
	// BusyRetry is how long a delivery refused because another worker holds
	// the trial waits. Default 1s (plus the worker's jitter).
	BusyRetry time.Duration
	// RefreshInterval is how often the whole cached view is reloaded, as a
	// safety net under NOTIFY. Default 10s.
	RefreshInterval time.Duration
	// Actor names this process in the transition history.
	Actor string
	// Shard names this process's rows of the shared breaker buckets (its
	// fleet ID: unique per process), so that no two processes' flushes
	// wait on one row.
	Shard string
	// FleetSuspectShare is the share of active endpoints whose breakers
	// opened within a minute above which the dispatcher suspects its own
	// egress (DNS, network, proxy) rather than its customers, and stops
	// opening breakers on transport errors until the share falls (Envoy's
	// max_ejection_percent idea). Zero disables the guard. Default 0.3 via
	// the dispatcher's flag.
	FleetSuspectShare float64
	// FleetMinOpens is the fewest opens in a minute that can raise the
	// suspicion, so a fleet of three endpoints is not "30% open" after one
	// trip. Default 5.
	FleetMinOpens int
	// OnChange, when set, is told the endpoint of every transition and
	// trial the gate sees (the unparker's kick).
	OnChange func(endpointID string)
	// RequestTimeout is an attempt's timeout when its endpoint names none
	// (the sender's); a trial's lease is its attempt's timeout plus
	// TrialLeaseMargin. Default MaxEndpointTimeout.
	RequestTimeout time.Duration
	// TrialLeaseMargin is added to an attempt's timeout to make its
	// trial's lease. Default DefaultTrialLeaseMargin.
	TrialLeaseMargin time.Duration
	// Live is the live dispatchers of the fleet, this one included
	// (Fleet.Live); nil counts this one alone. An endpoint's successes
	// alone are flushed once every FlushInterval x Live (at most a second),
	// so the fleet writes them as often as one dispatcher would; failures
	// go at every FlushInterval.
	Live func() int
}

// BreakerGate is the per-endpoint circuit breaker as every dispatcher
// process shares it. Closed-state decisions come from an in-process view of
// each breaker row, kept current by NOTIFY on transitions; outcomes are
// counted in memory and flushed to shared buckets every FlushInterval, after
// which the pure breaker decides on the shared window whether to trip, and
// a versioned write makes the trip (two processes can never both make it).
// Half-open trials hold leases on their endpoint's trial slots
// (store.TrialLeases).
type BreakerGate struct {
	cfg     BreakerGateConfig
	store   BreakerStore
	trials  TrialAcquirer
	configs BreakerConfigs
	now     func() time.Time
	rnd     func() float64
	logger  *slog.Logger
	metrics *BreakerMetrics

	mu         sync.Mutex
	views      map[string]breaker.Breaker
	pending    map[tallyKey]*tally
	busyUntil  map[string]time.Time
	suppressed map[string]time.Time
	// recentOpens holds, per endpoint, when its breaker last opened
	// (fleet-wide, from NOTIFY); active, when this process last delivered
	// to it. They feed the fleet guard.
	recentOpens map[string]time.Time
	active      map[string]time.Time
	suspect     bool
}

var _ Gate = (*BreakerGate)(nil)

type tallyKey struct {
	endpoint   string
	generation int64
}

// tally is what this process counted for one breaker generation since the
// last flush.
type tally struct {
	cfg       breaker.Config
	enforce   bool
	buckets   map[int64]*[2]int // bucket start (unix ns) -> successes, failures
	run       breaker.Run
	failures  int
	transport int // failures that were transport errors, not HTTP statuses
	// since is when the tally's first outcome was counted.
	since time.Time
}

// NewBreakerGate returns a gate; call Load, then Run.
func NewBreakerGate(cfg BreakerGateConfig, st BreakerStore, trials TrialAcquirer, configs BreakerConfigs, now func() time.Time, rnd func() float64, logger *slog.Logger, metrics *BreakerMetrics) *BreakerGate {
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = 100 * time.Millisecond
	}
	if cfg.BusyRetry <= 0 {
		cfg.BusyRetry = time.Second
	}
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = 10 * time.Second
	}
	if cfg.FleetMinOpens <= 0 {
		cfg.FleetMinOpens = 5
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = MaxEndpointTimeout
	}
	if cfg.TrialLeaseMargin <= 0 {
		cfg.TrialLeaseMargin = DefaultTrialLeaseMargin
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &BreakerGate{
		cfg: cfg, store: st, trials: trials, configs: configs, now: now, rnd: rnd, logger: logger, metrics: metrics,
		views:       map[string]breaker.Breaker{},
		pending:     map[tallyKey]*tally{},
		busyUntil:   map[string]time.Time{},
		suppressed:  map[string]time.Time{},
		recentOpens: map[string]time.Time{},
		active:      map[string]time.Time{},
	}
}

// Load replaces the cached view with every stored breaker.
func (g *BreakerGate) Load(ctx context.Context) error {
	all, err := g.store.LoadBreakers(ctx, nil)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, b := range all {
		// A NOTIFY may have brought a newer generation while the load was
		// reading: never go back to an older one.
		if cur, ok := g.views[id]; ok && cur.Generation > b.Generation {
			continue
		}
		g.setViewLocked(id, b)
	}
	return nil
}

// HandleNotice applies a transition notification (store.BreakerChannel).
func (g *BreakerGate) HandleNotice(payload string) {
	n, err := store.ParseBreakerNotice(payload)
	if err != nil {
		g.logger.Warn("breaker_notice_invalid", slog.String("payload", payload), slog.String("error", err.Error()))
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if n.State == breaker.StateOpen {
		g.recentOpens[n.EndpointID] = g.now()
	}
	b, ok := g.views[n.EndpointID]
	if ok && b.Generation >= n.Generation {
		return
	}
	b.State, b.Generation, b.OpenUntil, b.TrialsInFlight = n.State, n.Generation, n.OpenUntil, 0
	g.setViewLocked(n.EndpointID, b)
	if g.cfg.OnChange != nil {
		g.cfg.OnChange(n.EndpointID)
	}
}

// Admit decides one delivery.
func (g *BreakerGate) Admit(ctx context.Context, t *Target) (Admission, error) {
	cfg, enforce := g.configs.BreakerConfig(t)
	now := g.now()
	b, err := g.view(ctx, t.ID)
	if err != nil {
		return Admission{}, err
	}
	d := b.Peek(cfg, now)
	switch d.Admission {
	case breaker.Admitted:
		return g.admitted(t.ID, d.Ticket.Generation, cfg, enforce), nil
	case breaker.Trial:
		g.mu.Lock()
		busy := now.Before(g.busyUntil[t.ID])
		g.mu.Unlock()
		if busy {
			return g.refuse(t.ID, enforce, cfg, breaker.Decision{Admission: breaker.Rejected, Reason: breaker.ReasonHalfOpenBusy}, now), nil
		}
		return g.trial(ctx, t.ID, g.className(t), g.trialLease(t), cfg, enforce, now)
	default:
		return g.refuse(t.ID, enforce, cfg, d, now), nil
	}
}

func (g *BreakerGate) admitted(id string, gen int64, cfg breaker.Config, enforce bool) Admission {
	return Admission{Finish: func(_ context.Context, o Outcome) {
		g.count(id, gen, cfg, enforce, o)
	}}
}

// refuse turns a rejection into a refused admission (or, in shadow mode, an
// admission whose outcome the breaker never sees: its generation is stale).
func (g *BreakerGate) refuse(id string, enforce bool, cfg breaker.Config, d breaker.Decision, now time.Time) Admission {
	if !enforce {
		return Admission{Finish: func(context.Context, Outcome) {}}
	}
	if g.metrics != nil {
		g.metrics.Rejected.WithLabelValues(g.metrics.Labels.Label(id)).Inc()
	}
	return Admission{Refused: true, RetryAt: g.retryAt(cfg, d, now), Reason: d.Reason}
}

// retryAt spreads the wake-ups of refused deliveries. A dead endpoint can
// have thousands of jobs waiting: were they all to wake at open_until, all
// but one would be refused again (the trial slot is taken) and re-snoozed,
// churning the queue. So they wake over the half open duration after
// open_until (the first to wake becomes the probe; the rest mostly find
// the breaker closed again), and those refused while a trial is in flight
// or while isolated come back over a similar spread.
func (g *BreakerGate) retryAt(cfg breaker.Config, d breaker.Decision, now time.Time) time.Time {
	spread := time.Duration(g.rnd() * float64(cfg.OpenDuration/2))
	switch d.Reason {
	case breaker.ReasonOpen:
		if d.RetryAt.After(now) {
			return d.RetryAt.Add(spread)
		}
	case breaker.ReasonIsolated:
		return now.Add(cfg.OpenDuration + spread)
	}
	return now.Add(g.cfg.BusyRetry + spread)
}

// className names t's traffic class for the metrics.
func (g *BreakerGate) className(t *Target) string {
	if n, ok := g.configs.(interface{ ClassName(*Target) string }); ok {
		return n.ClassName(t)
	}
	return t.EffectiveClass()
}

// trialLease is the lease a trial to t holds: its attempt's timeout and the
// margin.
func (g *BreakerGate) trialLease(t *Target) time.Duration {
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = g.cfg.RequestTimeout
	}
	return timeout + g.cfg.TrialLeaseMargin
}

// trial asks the fleet for a trial slot, leased for lease. The admission's
// EndBy leaves store.TrialStepTimeout of the lease, counted from before
// the lease was taken, to record the outcome: the request's deadline ends
// before the lease does, whatever the clocks' offset.
func (g *BreakerGate) trial(ctx context.Context, id, class string, lease time.Duration, cfg breaker.Config, enforce bool, now time.Time) (Admission, error) {
	meta := store.TransitionMeta{Actor: g.cfg.Actor, Shadow: !enforce}
	tr, d, after, err := g.trials.Acquire(ctx, id, cfg, lease, meta)
	if err != nil {
		return Admission{}, err
	}
	if after.Generation != 0 {
		g.observe(id, after, d.Transition)
	}
	switch d.Admission {
	case breaker.Trial:
		return Admission{Trial: true, EndBy: now.Add(lease - store.TrialStepTimeout), Finish: func(ctx context.Context, out Outcome) {
			o, ok := toOutcome(out.Class)
			if !ok {
				o = breaker.OutcomeIgnore
			}
			res, after, err := tr.Finish(ctx, cfg, o, g.rnd, meta)
			if errors.Is(err, store.ErrTrialLeaseLost) {
				// Another trial holds the slot now: this outcome is not
				// the breaker's to hear.
				if g.metrics != nil {
					g.metrics.TrialLeasesLost.Inc()
				}
				g.logger.Warn("breaker_trial_lease_lost", slog.String("endpoint", id), slog.String("outcome", o.String()),
					slog.Time("lease_expired_at", tr.ExpiresAt))
				g.observe(id, after, nil)
				if g.cfg.OnChange != nil {
					g.cfg.OnChange(id)
				}
				return
			}
			if err != nil {
				g.logger.Error("breaker_trial_not_recorded", slog.String("endpoint", id), slog.String("error", err.Error()))
				return
			}
			g.observe(id, after, res.Transition)
			if g.cfg.OnChange != nil {
				// A trial ended: the next probe, or every parked delivery
				// once the breaker closed, may go now.
				g.cfg.OnChange(id)
			}
			if res.Transition != nil && res.Transition.To == breaker.StateClosed {
				g.observeEpisode(ctx, id, class, !enforce, res.Transition.At)
			}
		}}, nil
	case breaker.Admitted:
		return g.admitted(id, d.Ticket.Generation, cfg, enforce), nil
	default:
		if d.Reason == breaker.ReasonHalfOpenBusy {
			g.mu.Lock()
			g.busyUntil[id] = now.Add(g.cfg.BusyRetry / 4)
			g.mu.Unlock()
		}
		return g.refuse(id, enforce, cfg, d, now), nil
	}
}

// view returns the cached breaker of id, loading it on a miss.
func (g *BreakerGate) view(ctx context.Context, id string) (breaker.Breaker, error) {
	g.mu.Lock()
	b, ok := g.views[id]
	g.mu.Unlock()
	if ok {
		return b, nil
	}
	m, err := g.store.LoadBreakers(ctx, []string{id})
	if err != nil {
		return breaker.Breaker{}, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if cur, ok := g.views[id]; ok {
		return cur, nil
	}
	b, ok = m[id]
	if !ok {
		// No row (an endpoint created before breakers existed is migrated
		// with one, so this is a deleted endpoint): treat as closed.
		b = breaker.Breaker{State: breaker.StateClosed, Generation: 1}
	}
	g.setViewLocked(id, b)
	return b, nil
}

// observe updates the view with a breaker as stored by this process and
// reports the transition it made, if any.
func (g *BreakerGate) observe(id string, after breaker.Breaker, t *breaker.Transition) {
	g.mu.Lock()
	if cur, ok := g.views[id]; !ok || cur.Generation <= after.Generation {
		g.setViewLocked(id, after)
	}
	g.mu.Unlock()
	if t != nil {
		if t.To == breaker.StateOpen {
			g.mu.Lock()
			g.recentOpens[id] = t.At
			g.mu.Unlock()
		}
		g.logTransition(id, *t)
	}
}

// observeEpisode records, in breaker_open_duration_seconds, how long the
// episode a trial just closed kept the endpoint's breaker away from closed:
// from the open that left closed to now, re-opens after failed trials
// included. Only the process whose trial closed the breaker records it, so
// the fleet observes every close once; an operator's reset is not a
// recovery and is not observed.
func (g *BreakerGate) observeEpisode(ctx context.Context, id, class string, shadow bool, closedAt time.Time) {
	if g.metrics == nil {
		return
	}
	start, err := g.store.EpisodeStart(ctx, id, shadow)
	if err != nil {
		g.logger.Warn("breaker_episode_unknown", slog.String("endpoint", id), slog.String("error", err.Error()))
		return
	}
	if d := closedAt.Sub(start); d >= 0 {
		g.metrics.OpenDuration.WithLabelValues(class).Observe(d.Seconds())
	}
}

func (g *BreakerGate) setViewLocked(id string, b breaker.Breaker) {
	b.Window = breaker.Window{}
	b.TrialsInFlight = 0
	prev, had := g.views[id]
	g.views[id] = b
	if g.metrics != nil && (!had || prev.State != b.State) {
		g.metrics.setState(id, b.State)
	}
}

// count adds an admitted delivery's outcome to this process's tally.
func (g *BreakerGate) count(id string, gen int64, cfg breaker.Config, enforce bool, out Outcome) {
	o, ok := toOutcome(out.Class)
	if !ok || (o != breaker.OutcomeSuccess && o != breaker.OutcomeFailure) {
		return
	}
	bucket := breaker.BucketStart(cfg, out.At).UnixNano()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.active[id] = out.At
	k := tallyKey{id, gen}
	t := g.pending[k]
	if t == nil {
		t = &tally{cfg: cfg, enforce: enforce, buckets: map[int64]*[2]int{}, since: out.At}
		g.pending[k] = t
	}
	n := t.buckets[bucket]
	if n == nil {
		n = &[2]int{}
		t.buckets[bucket] = n
	}
	if o == breaker.OutcomeSuccess {
		n[0]++
	} else {
		n[1]++
		t.failures++
		if out.ErrorClass != ErrNone {
			t.transport++
		}
	}
	t.run.Add(o)
}

// Run flushes every FlushInterval and reloads the view every
// RefreshInterval until ctx ends, then flushes once more.
func (g *BreakerGate) Run(ctx context.Context) {
	flush := time.NewTicker(g.cfg.FlushInterval)
	defer flush.Stop()
	refresh := time.NewTicker(g.cfg.RefreshInterval)
	defer refresh.Stop()
	pruneTick := time.NewTicker(30 * time.Second)
	defer pruneTick.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			g.Flush(fctx)
			cancel()
			return
		case <-flush.C:
			g.flush(ctx, g.successHold())
			g.CheckFleet()
		case <-refresh.C:
			if err := g.Load(ctx); err != nil && ctx.Err() == nil {
				g.logger.Warn("breaker_refresh", slog.String("error", err.Error()))
			}
		case <-pruneTick.C:
			g.prune(ctx)
			g.mu.Lock()
			now := g.now()
			for id, at := range g.active {
				if now.Sub(at) > fleetActiveWindow {
					delete(g.active, id)
				}
			}
			for id, at := range g.busyUntil {
				if now.After(at) {
					delete(g.busyUntil, id)
				}
			}
			g.mu.Unlock()
		}
	}
}

// maxSuccessHold bounds how long a tally of successes alone waits.
const maxSuccessHold = time.Second

// successHold is how long a tally of successes alone may wait for the
// next flush: none alone, (Live - 1) flush intervals in a fleet. Every
// dispatcher of a fleet delivers to every busy endpoint, so each wrote a
// row per endpoint at every flush, the fleet Live times as many as one
// dispatcher; the rate a breaker reads is then short of at most a hold's
// successes of the others' (a few hundred milliseconds of a window of
// seconds to minutes), never of a failure. Consecutive-failure breakers
// take every success at once: a success resets their count.
func (g *BreakerGate) successHold() time.Duration {
	if g.cfg.Live == nil {
		return 0
	}
	n := g.cfg.Live()
	if n <= 1 {
		return 0
	}
	return min(g.cfg.FlushInterval*time.Duration(n-1), maxSuccessHold)
}

// Flush sends every tally of this process to Postgres and evaluates every
// endpoint that saw a failure on the shared evidence.
func (g *BreakerGate) Flush(ctx context.Context) { g.flush(ctx, 0) }

// flush is Flush when a tally is due: one with a failure, of a
// consecutive-failure breaker, or counting for hold or longer. The
// tallies not yet due ride along in the same statement (a later flush
// would cost one more); with none due, all wait. So a dispatcher of a
// fleet whose traffic all succeeds writes its tallies once a hold, not
// at every interval as some endpoint's tally comes due.
func (g *BreakerGate) flush(ctx context.Context, hold time.Duration) {
	g.mu.Lock()
	pending := g.pending
	if hold > 0 && !anyDue(pending, g.now(), hold) {
		g.mu.Unlock()
		return
	}
	g.pending = map[tallyKey]*tally{}
	g.mu.Unlock()
	if len(pending) == 0 {
		return
	}
	var (
		counts    []store.OutcomeCount
		runs      []store.RunCount
		want      []store.EvidenceRequest
		cfgs      = map[string]breaker.Config{}
		shadow    = map[string]bool{}
		transport = map[string]float64{}
	)
	for k, t := range pending {
		for start, n := range t.buckets {
			counts = append(counts, store.OutcomeCount{
				EndpointID: k.endpoint, Generation: k.generation, BucketStart: time.Unix(0, start).UTC(), Window: t.cfg.Window,
				Successes: n[0], Failures: n[1], Shard: g.cfg.Shard,
			})
		}
		if t.cfg.Trip == breaker.TripConsecutive {
			runs = append(runs, store.RunCount{EndpointID: k.endpoint, Generation: k.generation, Run: t.run})
		}
		if t.failures > 0 {
			if _, dup := cfgs[k.endpoint]; !dup {
				want = append(want, store.EvidenceRequest{EndpointID: k.endpoint, Window: t.cfg.Window})
			}
			cfgs[k.endpoint] = t.cfg
			shadow[k.endpoint] = !t.enforce
			transport[k.endpoint] = float64(t.transport) / float64(t.failures)
		}
	}
	evs, err := g.store.FlushOutcomes(ctx, counts, runs, want)
	if err != nil {
		if ctx.Err() == nil {
			g.logger.Warn("breaker_flush", slog.String("error", err.Error()), slog.Int("counts", len(counts)))
		}
		g.carryOver(pending)
		return
	}
	for _, ev := range evs {
		g.evaluate(ctx, ev, cfgs[ev.EndpointID], shadow[ev.EndpointID], transport[ev.EndpointID])
	}
}

// anyDue reports whether a tally of pending must be written at now:
// one with a failure, of a consecutive-failure breaker (a success resets
// its count), or counting for hold or longer.
func anyDue(pending map[tallyKey]*tally, now time.Time, hold time.Duration) bool {
	for _, t := range pending {
		if t.failures > 0 || t.cfg.Trip == breaker.TripConsecutive || now.Sub(t.since) >= hold {
			return true
		}
	}
	return false
}

// maxCarriedTallies bounds the tallies a failed flush hands to the next:
// past it (a long database outage with traffic to very many endpoints) the
// surplus is dropped and logged. Each tally holds at most the buckets of one
// window span, so the carried evidence is bounded too.
const maxCarriedTallies = 10000

// carryOver merges the tallies of a failed flush into those counted since,
// as if counted first: bucket counts add up, runs chain. Buckets that left
// their window's span are dropped (no flush would read them). A flush whose
// commit went through unacknowledged is counted twice; evidence a little
// too strong for one window is the lesser harm than losing it on every
// hiccup.
func (g *BreakerGate) carryOver(failed map[tallyKey]*tally) {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	dropped := 0
	for k, old := range failed {
		oldest := breaker.BucketStart(old.cfg, now.Add(-breaker.BucketSpan(old.cfg.Window))).UnixNano()
		for start := range old.buckets {
			if start < oldest {
				delete(old.buckets, start)
			}
		}
		cur := g.pending[k]
		if cur == nil {
			if len(g.pending) >= maxCarriedTallies {
				dropped++
				continue
			}
			g.pending[k] = old
			continue
		}
		for start, n := range old.buckets {
			if c := cur.buckets[start]; c != nil {
				c[0] += n[0]
				c[1] += n[1]
			} else {
				cur.buckets[start] = n
			}
		}
		cur.run = old.run.Then(cur.run)
		cur.failures += old.failures
		cur.transport += old.transport
	}
	if dropped > 0 {
		g.logger.Warn("breaker_tallies_dropped", slog.Int("tallies", dropped), slog.Int("max", maxCarriedTallies))
	}
}

// evaluate runs the pure breaker on an endpoint's shared evidence and
// commits a trip it decides on.
// transportShare is the fraction of this flush's failures of the endpoint
// that were transport errors.
func (g *BreakerGate) evaluate(ctx context.Context, ev store.Evidence, cfg breaker.Config, shadow bool, transportShare float64) {
	b := ev.Breaker
	b.Window = breaker.NewWindow(cfg)
	for _, bk := range ev.Buckets {
		b.Window.Add(bk.Start, bk.Successes, bk.Failures)
	}
	prev := b.Generation
	var res breaker.Result
	if ev.PriorRun != nil {
		res = b.ApplyRun(cfg, ev.Now, prev, *ev.PriorRun, g.rnd)
	} else {
		res = b.Evaluate(cfg, ev.Now, g.rnd)
	}
	if s := res.Suppressed; s != nil {
		g.logSuppressed(ev.EndpointID, cfg, *s, ev.Now)
	}
	if res.Transition == nil {
		g.observe(ev.EndpointID, ev.Breaker, nil)
		return
	}
	if res.Transition.To == breaker.StateOpen && transportShare >= 0.5 && g.fleetSuspect() {
		// Our own egress is the likelier culprit: do not take a customer
		// offline for it.
		if g.metrics != nil {
			g.metrics.TripSuppressed.WithLabelValues(SuppressedFleetSuspect).Inc()
		}
		g.logger.Warn("breaker_trip_suppressed", slog.String("reason", SuppressedFleetSuspect), slog.String("endpoint", ev.EndpointID),
			slog.Int("observations", res.Transition.Observations), slog.Float64("failure_rate", res.Transition.FailureRate))
		return
	}
	won, err := g.store.CommitTransition(ctx, ev.EndpointID, prev, b, *res.Transition, store.TransitionMeta{Actor: g.cfg.Actor, Shadow: shadow, Config: &cfg})
	if err != nil {
		g.logger.Error("breaker_transition_not_saved", slog.String("endpoint", ev.EndpointID), slog.String("error", err.Error()))
		return
	}
	if won {
		g.observe(ev.EndpointID, b, res.Transition)
		if shadow {
			g.logger.Info("breaker_shadow_transition", slog.String("endpoint", ev.EndpointID), slog.String("to", res.Transition.To.String()))
		}
	}
}

// prune deletes buckets of past generations and of endpoints that went
// quiet, older than the longest window any class uses, in bounded batches
// until none is left. An active endpoint's rows are its process's ring of
// slots, written over in place (store.TallySlots), never deleted.
func (g *BreakerGate) prune(ctx context.Context) {
	keep := time.Hour
	if mw, ok := g.configs.(interface{ MaxWindow() time.Duration }); ok {
		keep = breaker.BucketSpan(mw.MaxWindow())
	}
	for ctx.Err() == nil {
		n, err := g.store.PruneBuckets(ctx, keep, 10000)
		if err != nil {
			if ctx.Err() == nil {
				g.logger.Warn("breaker_prune", slog.String("error", err.Error()))
			}
			return
		}
		if n < 10000 {
			return
		}
	}
}

// fleetActiveWindow is how recently an endpoint must have had a delivery
// to count as active for the fleet guard.
const fleetActiveWindow = 5 * time.Minute

// fleetSuspect reports whether the fleet guard is raised.
func (g *BreakerGate) fleetSuspect() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.suspect
}

// CheckFleet raises or clears the fleet guard: breakers of more than
// FleetSuspectShare of the active endpoints opened within the last minute.
func (g *BreakerGate) CheckFleet() {
	if g.cfg.FleetSuspectShare <= 0 {
		return
	}
	g.mu.Lock()
	now := g.now()
	for id, at := range g.recentOpens {
		if now.Sub(at) > time.Minute {
			delete(g.recentOpens, id)
		}
	}
	opened, active := len(g.recentOpens), max(len(g.active), len(g.recentOpens))
	share := 0.0
	if active > 0 {
		share = float64(opened) / float64(active)
	}
	was := g.suspect
	g.suspect = opened >= g.cfg.FleetMinOpens && share > g.cfg.FleetSuspectShare
	now2 := g.suspect
	g.mu.Unlock()
	if was == now2 {
		return
	}
	if g.metrics != nil {
		v := 0.0
		if now2 {
			v = 1
		}
		g.metrics.FleetSuspect.Set(v)
	}
	if now2 {
		g.logger.Warn("breaker_fleet_suspect", slog.Float64("share", share), slog.Int("opened", opened), slog.Int("active", active),
			slog.String("action", "not opening breakers on transport errors until the share falls"))
	} else {
		g.logger.Info("breaker_fleet_suspect_cleared", slog.Float64("share", share), slog.Int("opened", opened), slog.Int("active", active))
	}
}

// logSuppressed logs a trip the min_throughput guard held back, once per
// endpoint per window, so that an operator can count the guard's work
// (grep -c 'breaker_trip_suppressed reason=min_throughput').
func (g *BreakerGate) logSuppressed(id string, cfg breaker.Config, s breaker.Suppression, now time.Time) {
	if g.metrics != nil {
		g.metrics.TripSuppressed.WithLabelValues(SuppressedMinThroughput).Inc()
	}
	g.mu.Lock()
	last, ok := g.suppressed[id]
	if ok && now.Sub(last) < cfg.Window {
		g.mu.Unlock()
		return
	}
	g.suppressed[id] = now
	g.mu.Unlock()
	g.logger.Info("breaker_trip_suppressed",
		slog.String("reason", SuppressedMinThroughput),
		slog.String("endpoint", id),
		slog.Int("observations", s.Observations),
		slog.Int("failures", s.Failures),
		slog.Float64("failure_rate", s.FailureRate),
		slog.Int("min_throughput", cfg.MinThroughput))
}

var transitionMessages = map[breaker.State]string{
	breaker.StateOpen:     "breaker_opened",
	breaker.StateHalfOpen: "breaker_half_open",
	breaker.StateClosed:   "breaker_closed",
	breaker.StateIsolated: "breaker_isolated",
}

func (g *BreakerGate) logTransition(id string, t breaker.Transition) {
	attrs := []any{
		slog.String("endpoint", id),
		slog.String("from", t.From.String()),
		slog.String("reason", t.Reason),
		slog.Float64("failure_rate", t.FailureRate),
		slog.Int("observations", t.Observations),
		slog.Int("failures", t.Failures),
		slog.Int64("generation", t.Generation),
	}
	if !t.OpenUntil.IsZero() {
		attrs = append(attrs, slog.Time("open_until", t.OpenUntil))
	}
	g.logger.Info(transitionMessages[t.To], attrs...)
	if g.metrics != nil && t.To == breaker.StateOpen {
		g.metrics.Opened.WithLabelValues(g.metrics.Labels.Label(id)).Inc()
	}
}

// toOutcome maps a classification to the breaker's outcome.
func toOutcome(c Classification) (breaker.Outcome, bool) {
	s, ok := c.BreakerOutcome()
	if !ok {
		return 0, false
	}
	o, err := breaker.ParseOutcome(s)
	return o, err == nil
}

// BreakerMetrics are the breaker's Prometheus series.
type BreakerMetrics struct {
	Labels         *EndpointLabels
	Opened         *prometheus.CounterVec
	State          *prometheus.GaugeVec
	TripSuppressed *prometheus.CounterVec
	Rejected       *prometheus.CounterVec
	FleetSuspect   prometheus.Gauge
	// OpenDuration is observed when a trial closes a breaker, by traffic
	// class: the time in open, whose median should stay close to
	// ClassOpenDuration.
	OpenDuration *prometheus.HistogramVec
	// ClassOpenDuration is each traffic class's configured open_duration
	// (the ClassBook sets it).
	ClassOpenDuration *prometheus.GaugeVec
	// TrialLeasesLost counts trials whose outcome came after their lease
	// had expired and been taken over by another trial.
	TrialLeasesLost prometheus.Counter
}

// Reasons a trip is held back, as breaker_trip_suppressed_total labels them.
const (
	SuppressedMinThroughput = "min_throughput"
	SuppressedFleetSuspect  = "fleet_suspect"
)

// NewBreakerMetrics creates and registers the breaker metrics on reg.
func NewBreakerMetrics(reg prometheus.Registerer, labels *EndpointLabels) *BreakerMetrics {
	m := &BreakerMetrics{
		Labels: labels,
		Opened: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "breaker_open_total",
			Help: "Transitions to open made by this process, by endpoint.",
		}, []string{"endpoint"}),
		State: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "breaker_state",
			Help: "1 for the state each endpoint's breaker is in (closed, open, half_open, isolated), 0 for the others.",
		}, []string{"endpoint", "state"}),
		TripSuppressed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "breaker_trip_suppressed_total",
			Help: "Trips held back by a guard, by reason (min_throughput: too few observations in the window; fleet_suspect: our own egress is suspect).",
		}, []string{"reason"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "breaker_rejected_total",
			Help: "Deliveries refused by an open, half-open or isolated breaker, by endpoint.",
		}, []string{"endpoint"}),
		FleetSuspect: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "breaker_fleet_suspect",
			Help: "1 while so many breakers opened within a minute that the dispatcher suspects its own egress and opens none on transport errors.",
		}),
		OpenDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "breaker_open_duration_seconds",
			Help: "Time from a breaker leaving closed to a trial closing it again (re-opens after failed trials included), observed by the dispatcher whose trial closed it, by traffic class. Operator resets are not observed.",
			// Around 1x and 3x of the classes' open durations (15s, 30s,
			// and 2s in tests), up to the backoff cap and beyond.
			Buckets: []float64{1, 2, 3, 5, 7.5, 10, 15, 20, 30, 40, 45, 60, 90, 120, 180, 240, 300, 450, 600, 900, 1800, 3600, 7200},
		}, []string{"class"}),
		ClassOpenDuration: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "breaker_class_open_duration_seconds",
			Help: "Each traffic class's configured open_duration (before jitter and backoff), by class.",
		}, []string{"class"}),
		TrialLeasesLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "breaker_trial_leases_lost_total",
			Help: "Half-open trials whose outcome came after their slot's lease had expired and another trial had taken the slot: not recorded for the breaker.",
		}),
	}
	m.TripSuppressed.WithLabelValues(SuppressedMinThroughput)
	m.TripSuppressed.WithLabelValues(SuppressedFleetSuspect)
	if reg != nil {
		reg.MustRegister(m.Opened, m.State, m.TripSuppressed, m.Rejected, m.FleetSuspect, m.OpenDuration, m.ClassOpenDuration, m.TrialLeasesLost)
	}
	return m
}

var allStates = []breaker.State{breaker.StateClosed, breaker.StateOpen, breaker.StateHalfOpen, breaker.StateIsolated}

func (m *BreakerMetrics) setState(id string, s breaker.State) {
	label := m.Labels.Label(id)
	if label == OtherEndpoint {
		return
	}
	for _, st := range allStates {
		v := 0.0
		if st == s {
			v = 1
		}
		m.State.WithLabelValues(label, st.String()).Set(v)
	}
}
