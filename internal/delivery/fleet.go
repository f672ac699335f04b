package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookd/hookd/internal/store"
)

// Fleet heartbeats this dispatcher in the shared table with the database
// connections it may open, keeps the count of live dispatchers
// (dispatcher_fleet_size), and checks the live fleet's connections
// against what the server allows.
type Fleet struct {
	cfg     FleetConfig
	store   FleetStore
	logger  *slog.Logger
	metrics FleetMetrics

	live atomic.Int64
	// share is the shard (high 32 bits) of the live dispatchers (low).
	share atomic.Int64
	// beatSent is when (cfg.Now, as UnixNano) the last heartbeat that
	// succeeded was sent: the start of this process's lease.
	beatSent atomic.Int64
	// heldSince is when the lease's unbroken run began: the send of the
	// first successful heartbeat after it last lapsed (or of the first).
	heldSince atomic.Int64
	// pending are gone dispatchers some of whose running jobs the last
	// rescue skipped (locked by another session) or could not reach:
	// retried at each heartbeat that may rescue, until none is left.
	// Only beat uses it (heartbeats are sequential).
	pending map[string]bool
	// released is when (cfg.DBNow) the last release of lost runs ran;
	// troubled when the last heartbeat failed. Only beat uses them.
	released, troubled time.Time
	// joined is whether a heartbeat has put this process's row in the
	// table. Only beat uses it.
	joined bool
	// kick asks Run for a heartbeat now (Kick).
	kick chan struct{}
}

// The release of lost runs reads every running job of the queue (River's
// index holds an entry per state change until vacuum: thousands for a
// few hundred running), once per dispatcher. It runs only while runs may
// be lost: from a fetch whose answer was lost or late, or a heartbeat that
// failed (a fetch sent before a cut runs when the link comes back), for
// LostRunAge (until those runs may be taken) and LostRunDoubt more; and
// once per LostRunSweep whatever happened, for a lost answer nothing saw.
const (
	LostRunDoubt = 10 * time.Second
	LostRunSweep = 30 * time.Second
)

// FleetStore records heartbeats.
type FleetStore interface {
	Heartbeat(ctx context.Context, id string, connections int, stale time.Duration, rescue bool) (store.FleetBeat, error)
	LeaveFleet(ctx context.Context, id string) error
	RescueJobsOf(ctx context.Context, clients []string) (rescued, left int, err error)
	ReleaseLostRuns(ctx context.Context, client string, held []int64, readAt time.Time) (int, error)
}

var _ FleetStore = (*store.Store)(nil)

// FleetConfig tunes a Fleet.
type FleetConfig struct {
	// ID names this process in the table; unique per process.
	ID string
	// Connections is the most connections this process opens to the
	// database (its pools, the ledger's, the listener's).
	Connections int
	// Interval is the time between heartbeats.
	Interval time.Duration
	// Stale is how long a silent dispatcher still counts as live: past
	// it, the next heartbeat of another forgets it and makes its running
	// jobs available again (its ID is its River client's).
	Stale time.Duration
	// Now is this process's clock (monotonic), for its lease.
	Now func() time.Time
	// Held, if set, returns the jobs this process's River client runs
	// (store.HeldRuns.IDs): each heartbeat releases the others running
	// under its ID, whose fetch's answer was lost (store.ReleaseLostRuns).
	Held func() []int64
	// DBNow is the database's clock, for the release.
	DBNow func() time.Time
	// LeaveTimeout bounds the stop: the heartbeat under way is given this
	// long to come back, and the leave as long again. Zero: 2 s.
	LeaveTimeout time.Duration
	// Doubted returns when (DBNow) a fetch's answer was last lost or late
	// (store.HeldRuns.Doubted): the release runs only around such a
	// fetch, a failed heartbeat and once per LostRunSweep. Nil: at every
	// heartbeat.
	Doubted func() time.Time
}

// FleetMetrics are the fleet's gauges; nil fields are not set.
type FleetMetrics struct {
	// Size is the live dispatchers (dispatcher_fleet_size).
	Size prometheus.Gauge
	// Connections is the live fleet's registered connections.
	Connections prometheus.Gauge
	// MaxConnections is the server's connections for clients like hookd.
	MaxConnections prometheus.Gauge
	// Rescued counts the jobs of gone dispatchers made available again.
	Rescued prometheus.Counter
	// Released counts this process's lost runs made available again.
	Released prometheus.Counter
}

// NewFleet returns a Fleet counting only itself until its first heartbeat.
func NewFleet(cfg FleetConfig, st FleetStore, logger *slog.Logger, metrics FleetMetrics) *Fleet {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.LeaveTimeout <= 0 {
		cfg.LeaveTimeout = 2 * time.Second
	}
	f := &Fleet{cfg: cfg, store: st, logger: logger, metrics: metrics, pending: map[string]bool{}, kick: make(chan struct{}, 1)}
	f.set(store.FleetBeat{Live: 1})
	return f
}

// Live returns the live dispatchers at the last heartbeat, this one included.
func (f *Fleet) Live() int { return int(f.live.Load()) }

// Share returns this dispatcher's share of the fleet-wide work at the
// last heartbeat: shard of n (the live dispatchers). Between heartbeats
// that saw the fleet change, two dispatchers may take one shard (the work
// is safe to do twice) or none for a heartbeat.
func (f *Fleet) Share() (shard, n int) {
	v := f.share.Load()
	return int(v >> 32), int(uint32(v))
}

func (f *Fleet) set(b store.FleetBeat) {
	f.live.Store(int64(b.Live))
	if b.Live >= 1 && b.Rank >= 0 && b.Rank < b.Live {
		f.share.Store(int64(b.Rank)<<32 | int64(b.Live))
	}
	if f.metrics.Size != nil {
		f.metrics.Size.Set(float64(b.Live))
	}
	if f.metrics.Connections != nil && b.Connections > 0 {
		f.metrics.Connections.Set(float64(b.Connections))
	}
	if f.metrics.MaxConnections != nil && b.MaxConnections > 0 {
		f.metrics.MaxConnections.Set(float64(b.MaxConnections))
	}
}

// ErrFleetConnections is Join's error when the live fleet, this
// dispatcher included, may open more connections than the server allows.
var ErrFleetConnections = fmt.Errorf("the dispatchers' connections exceed the server's")

// leaseMargin is how long before the others may take this process's jobs
// (Stale after its last heartbeat, on the database's clock) it stops
// starting requests: a heartbeat's row is written after it was sent, so
// counting from the send is on the safe side; the margin covers the
// clocks' drift over one Stale and a request's start.
const leaseMargin = time.Second

// Holds reports whether this process still holds its lease: its last
// successful heartbeat was sent less than Stale less a margin ago, so no
// other dispatcher can have taken its jobs. A process that does not (its
// heartbeats fail, or it was frozen) starts no request: its jobs may be
// another's by now.
func (f *Fleet) Holds() bool {
	sent := f.beatSent.Load()
	return sent != 0 && f.cfg.Now().Sub(time.Unix(0, sent)) < f.cfg.Stale-leaseMargin
}

// HoldsSince reports whether this process holds its lease (Holds) and
// has held it without a break since t. A run that began before a break
// starts no request, whatever the lease is now: while the lease was
// lapsed the fleet may have given its job to another dispatcher, which
// may have sent its deliveries since.
func (f *Fleet) HoldsSince(t time.Time) bool {
	return f.Holds() && !time.Unix(0, f.heldSince.Load()).After(t)
}

// beat sends one heartbeat and, for the dispatchers it found gone, makes
// their running jobs available again.
func (f *Fleet) beat(ctx context.Context) (store.FleetBeat, error) {
	// Only once this process's own lease has held without a break for
	// Stale (it was alive and connected for as long as another must be
	// silent to be gone) does it take the jobs of others gone silent:
	// after an outage of the database they are all silent, and alive, and
	// each one's first heartbeats back come at slightly different times.
	sent := f.cfg.Now()
	held := f.Holds()
	rescue := held && sent.Sub(time.Unix(0, f.heldSince.Load())) >= f.cfg.Stale
	b, err := f.store.Heartbeat(ctx, f.cfg.ID, f.cfg.Connections, f.cfg.Stale, rescue)
	if err != nil {
		if f.cfg.DBNow != nil {
			f.troubled = f.cfg.DBNow()
		}
		return b, err
	}
	switch {
	case b.Joined && f.joined:
		// Another dispatcher's heartbeat forgot this one (silent past
		// Stale on the database's clock) before this one put its row
		// back: the jobs it ran then may have been rescued, and be sent
		// by another. A lease anew from now: no run begun before starts
		// a request.
		f.heldSince.Store(f.cfg.Now().UnixNano())
		f.logger.Warn("fleet_forgotten", slog.String("id", f.cfg.ID))
	case !held || !f.Holds():
		// The lease had lapsed when this heartbeat was sent, or lapsed
		// while it was on its way (the database frozen or unreachable
		// meanwhile): it starts a lease anew from its send, not one held
		// throughout.
		f.heldSince.Store(sent.UnixNano())
	}
	f.joined = true
	f.beatSent.Store(sent.UnixNano())
	f.set(b)
	f.releaseLost(ctx)
	// The gone ones' rows are deleted by the heartbeat that finds them:
	// those whose jobs were not all rescued are retried from pending.
	gone := b.Gone
	if rescue {
		gone = slices.Concat(slices.Sorted(maps.Keys(f.pending)), gone)
	}
	if len(gone) == 0 {
		return b, nil
	}
	n, left, err := f.store.RescueJobsOf(ctx, gone)
	for _, id := range gone {
		if err != nil || left > 0 {
			f.pending[id] = true
		} else {
			delete(f.pending, id)
		}
	}
	if err != nil {
		// Retried at the next heartbeat that may rescue; River's
		// rescuer is the last resort.
		f.logger.Warn("fleet_rescue", slog.Any("gone", gone), slog.String("error", err.Error()))
		return b, nil
	}
	f.logger.Info("fleet_rescued", slog.Any("gone", gone), slog.Int("jobs", n), slog.Int("left", left))
	if f.metrics.Rescued != nil {
		f.metrics.Rescued.Add(float64(n))
	}
	return b, nil
}

// releaseLost makes available again the jobs running under this
// process's ID that it does not run: fetched by a fetch whose answer was
// lost. Nobody else takes them (this process is alive); River's rescuer
// would, after RESCUE_STUCK_AFTER.
func (f *Fleet) releaseLost(ctx context.Context) {
	if f.cfg.Held == nil || f.cfg.DBNow == nil {
		return
	}
	if !f.releaseDue(f.cfg.DBNow()) {
		return
	}
	held := f.cfg.Held()
	readAt := f.cfg.DBNow()
	n, err := f.store.ReleaseLostRuns(ctx, f.cfg.ID, held, readAt)
	if err != nil {
		// The next heartbeat tries again.
		f.logger.Warn("fleet_release_lost_runs", slog.String("error", err.Error()))
		return
	}
	f.released = readAt
	if n == 0 {
		return
	}
	f.logger.Warn("fleet_lost_runs_released", slog.Int("jobs", n))
	if f.metrics.Released != nil {
		f.metrics.Released.Add(float64(n))
	}
}

// releaseDue reports whether runs may be lost at now (the database's
// clock): see LostRunDoubt.
func (f *Fleet) releaseDue(now time.Time) bool {
	if f.cfg.Doubted == nil || f.released.IsZero() || now.Sub(f.released) >= LostRunSweep {
		return true
	}
	for _, at := range []time.Time{f.cfg.Doubted(), f.troubled} {
		if !at.IsZero() && now.Sub(at) <= store.LostRunAge+LostRunDoubt {
			return true
		}
	}
	return false
}

// Join records the first heartbeat and checks that the live fleet, this
// dispatcher included, fits the server's connections: past them, the
// server refuses a connection when all are busy, and an attempt that was
// sent may wait for its record. It leaves the fleet again when it does
// not fit.
func (f *Fleet) Join(ctx context.Context) error {
	b, err := f.beat(ctx)
	if err != nil {
		return err
	}
	if b.MaxConnections > 0 && b.Connections > b.MaxConnections {
		if err := f.store.LeaveFleet(context.WithoutCancel(ctx), f.cfg.ID); err != nil {
			f.logger.Warn("fleet_leave", slog.String("error", err.Error()))
		}
		return fmt.Errorf("%w: %d live dispatchers with this one may open %d connections (this one %d), and the server allows %d (max_connections less superuser_reserved_connections); lower --db-max-conns, raise max_connections, or put a pooler in front (docs/scaling.md)",
			ErrFleetConnections, b.Live, b.Connections, f.cfg.Connections, b.MaxConnections)
	}
	return nil
}

// Beat records one heartbeat and refreshes the count; a failed one keeps
// the last count. A fleet grown past the server's connections is logged.
func (f *Fleet) Beat(ctx context.Context) error {
	b, err := f.beat(ctx)
	if err != nil {
		return err
	}
	if b.MaxConnections > 0 && b.Connections > b.MaxConnections {
		f.logger.Warn("fleet_connections_exceed_server", slog.Int("dispatchers", b.Live),
			slog.Int("connections", b.Connections), slog.Int("server_connections", b.MaxConnections))
	}
	return nil
}

// Run heartbeats every Interval until ctx ends, then deletes this
// dispatcher's row so the others stop counting it at their next heartbeat.
func (f *Fleet) Run(ctx context.Context) {
	tick := time.NewTicker(f.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			leave, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.LeaveTimeout)
			defer cancel()
			if err := f.store.LeaveFleet(leave, f.cfg.ID); err != nil {
				f.logger.Warn("fleet_leave", slog.String("error", err.Error()))
			}
			return
		case <-tick.C:
		case <-f.kick:
		}
		if err := f.beatThroughStop(ctx); err != nil && ctx.Err() == nil {
			f.logger.Warn("fleet_heartbeat", slog.String("error", err.Error()))
		}
	}
}

// beatThroughStop is Beat, finished rather than cut when ctx ends while
// it is under way (for LeaveTimeout at most): a heartbeat cut short may
// still reach the server after the leave's delete and put this
// dispatcher's row back, and the others would count it until it went
// stale. A panic in the heartbeat is its error: the next one is tried at
// the next interval, and the process goes on.
func (f *Fleet) beatThroughStop(ctx context.Context) error {
	beatCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("fleet heartbeat: panic: %v", p)
			}
		}()
		done <- f.Beat(beatCtx)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	giveUp := time.NewTimer(f.cfg.LeaveTimeout)
	defer giveUp.Stop()
	select {
	case err := <-done:
		return err
	case <-giveUp.C:
		cancel()
		return <-done
	}
}

// Kick asks Run for a heartbeat now: another dispatcher joined or left
// the fleet (store.FleetChannel), and this one's share of the fetch turns
// and the unparker's endpoints follows from the live fleet, which it
// would otherwise learn at its next heartbeat, up to Interval later. A
// dispatcher added to a loaded fleet found nothing to fetch until then.
// Kicks while one is pending are one.
func (f *Fleet) Kick() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}
