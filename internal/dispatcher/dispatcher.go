// Package dispatcher runs hookd's delivery process: a River client whose
// deliver worker signs and sends each queued webhook, and the loops around
// it (the attempt ledger, the breaker gate, the unparker, the LISTEN
// connection, the database clock, the queue metrics, the tuning of traffic
// classes and the metrics server).
// New checks the Config and wires what needs no I/O; Run connects, starts
// every part under one errgroup and returns once every goroutine it started
// has returned.
package dispatcher

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"google.golang.org/api/option"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/destination"
	"github.com/hookd/hookd/internal/retention"
	"github.com/hookd/hookd/internal/secretbox"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/telemetry"
	"github.com/hookd/hookd/internal/tuning"
)

// Deps are the dispatcher's collaborators.
type Deps struct {
	// Pool is the dispatcher's connection pool, migrated; required. The
	// caller closes it after Run returns.
	Pool *pgxpool.Pool
	// DirectURL is where what needs a session of its own connects: the
	// LISTEN connection, the session advisory locks (tuning and partition
	// maintenance) and the ledger's connections. Empty:
	// Pool's own connection string. Behind a pooler in transaction mode
	// (Config.PollOnly) it must reach PostgreSQL itself.
	DirectURL string
	// Logger receives the dispatcher's logs; nil discards.
	Logger *slog.Logger
	// Stdout gets one line naming the metrics URL once it listens
	// ("dispatcher metrics on http://127.0.0.1:9090/metrics"); nil
	// discards.
	Stdout io.Writer
	// Keyring opens endpoint signing secrets sealed at rest; nil reads
	// them as plain text.
	Keyring *secretbox.Keyring
	// Tracing makes a span per delivery attempt, joined to the trace its
	// job carries; nil (or tracing off) makes none.
	Tracing *telemetry.Tracing
	// PubSubOptions replace the Pub/Sub client's connection and
	// credentials for pubsub endpoints (a test server); nil in
	// production.
	PubSubOptions []option.ClientOption
}

// Timings of the loops that have no setting of their own.
const (
	clockSyncInterval = 10 * time.Second
	// endpointCacheTTL is the safety net under NOTIFY: a change reaches
	// every dispatcher by its notification (or, after the listener was
	// away, by the reconnect's drop of every entry), so the TTL only bounds
	// an entry the cache never heard of changing. Each dispatcher reloads
	// each endpoint it delivers to once per TTL: at 30 s, with 1,000
	// endpoints, that was about 10 loads a second per dispatcher, the
	// fleet's multiplied by its size.
	endpointCacheTTL = 5 * time.Minute
	// endpointWarmMax is the most endpoints a dispatcher loads at its
	// start (delivery.EndpointCache.Warm); those past it load when used.
	endpointWarmMax = 20000
	// destinationIdle closes a destination's pooled connection unused
	// this long (endpoints whose type is not http).
	destinationIdle = 5 * time.Minute
	unparkInterval  = 2 * time.Second
	// fetchTurn is how long each dispatcher's turn to fetch deliveries
	// lasts (delivery.FetchPacer): the api's default notification
	// interval, so that a turn sees about one notification.
	fetchTurn = delivery.DefaultNotifyInterval
	// defaultQueuePoll is the least time between polls of River's default
	// queue, which holds the periodic reclassification and the earlier
	// operational webhook jobs: nothing waits on its latency, and its
	// inserts (the periodic job, a retry made due) are announced by
	// notification. Polled every FetchPollInterval it cost each
	// dispatcher four fetches a second, a fleet of n 4 x n.
	defaultQueuePoll  = 10 * time.Second
	listenReadyWithin = 30 * time.Second
	// fleetStaleBeats heartbeats (Config.FleetHeartbeat) bound how long
	// the fleet's count of dispatchers lags a dispatcher killed without a
	// clean stop: it stops counting after them, and the survivors see it
	// at their next heartbeat. A join or a leave is notified, and seen at
	// once.
	fleetStaleBeats = 3
	// metricsShutdown bounds how long open scrapes may run on after the
	// deliveries have stopped.
	metricsShutdown = 5 * time.Second
)

// Dispatcher is one delivery process. Run it once.
type Dispatcher struct {
	cfg     Config
	r       resolved
	url     string // where sessions connect (Deps.DirectURL)
	logger  *slog.Logger
	stdout  io.Writer
	tracing *telemetry.Tracing

	reg          *prometheus.Registry
	metrics      Metrics
	store        *store.Store
	clock        *store.DBClock
	cache        *delivery.EndpointCache
	listener     *store.Listener
	classes      *delivery.ClassBook
	autoDisables *delivery.AutoDisables
	ledger       *delivery.Ledger
	// enq gets the River client in Run; the unparker, the operational
	// webhooks and the ledger (the next delivery of a FIFO queue) insert
	// jobs through it.
	enq      *delivery.Enqueuer
	unparker *delivery.Unparker
	// fleet counts the live dispatchers (dispatcher_fleet_size).
	fleet *delivery.Fleet
	// fleetID names this process in the fleet table and as River's client.
	fleetID string
	// heldRuns are the jobs River runs here (store.HeldRuns).
	heldRuns *store.HeldRuns
	// maintainer keeps storage bounded (partitions, retention); one
	// dispatcher of the fleet works at a time.
	maintainer *retention.Maintainer
	// tuner tunes traffic classes from their logs; one dispatcher of the
	// fleet leads it at a time.
	tuner *tuning.Tuner
	// senders are closed once River has stopped: their idle keep-alive
	// connections would otherwise hold goroutines past Run.
	senders []*delivery.Sender
	// destinations holds one publisher, and so one connection, per
	// destination of the endpoints whose type is not http; closed as Run
	// ends, once River has stopped.
	destinations *destination.Pool

	ran atomic.Bool
}

// New checks cfg and wires the parts that need no I/O; a bad Config gives a
// *ConfigError naming the field.
func New(cfg Config, deps Deps) (*Dispatcher, error) {
	r, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	if deps.Pool == nil {
		return nil, errors.New("dispatcher: Deps.Pool is required")
	}
	if cfg.PollOnly && deps.DirectURL == "" {
		return nil, errors.New("dispatcher: Config.PollOnly (a pool behind a pooler) needs Deps.DirectURL for what needs a session")
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Stdout == nil {
		deps.Stdout = io.Discard
	}
	if cfg.Actor == "" {
		cfg.Actor = hostActor()
	}
	clock := store.NewDBClock(deps.Pool)
	enq := &delivery.Enqueuer{}
	d := &Dispatcher{
		cfg:     cfg,
		r:       r,
		url:     cmp.Or(deps.DirectURL, deps.Pool.Config().ConnString()),
		logger:  deps.Logger,
		stdout:  deps.Stdout,
		tracing: deps.Tracing,
		reg:     prometheus.NewRegistry(),
		// The ledger, the breaker gate and its trials emit operational
		// events through the store; its list of operational endpoints is
		// dropped on every endpoint notification.
		store: store.New(deps.Pool, deps.Logger, store.WithKeyring(deps.Keyring),
			store.WithOperationalEvents(store.OperationalEventsConfig{Enqueuer: enq, CacheTTL: endpointCacheTTL, Now: clock.Now})),
		clock: clock,
		enq:   enq,
	}
	d.metrics = RegisterMetrics(d.reg, cfg.MetricsEndpointCap)
	// A publish dials through the SSRF guard, as a request does.
	destDeps := destination.Deps{Logger: d.logger, Now: d.clock.Now, DialControl: delivery.GuardDial,
		ErrBlocked: delivery.ErrBlockedTarget, PubSubOptions: deps.PubSubOptions}
	if cfg.AllowPrivateTargets {
		destDeps.DialControl = nil
	}
	d.destinations = destination.NewPool(destination.PoolConfig{IdleTimeout: destinationIdle, DialTimeout: cfg.RequestTimeout}, destDeps)

	d.cache = delivery.NewEndpointCache(d.store, endpointCacheTTL, d.clock.Now)
	d.listener = store.NewListener(d.url, d.logger)
	d.listener.Handle(store.EndpointChannel, func(id string) {
		d.cache.Invalidate(id)
		d.store.InvalidateOperational()
		// An enable's held deliveries start going now, not at the next
		// periodic pass.
		d.unparker.Kick(id)
	})
	d.listener.OnReconnect(d.cache.InvalidateAll)
	// Another dispatcher joined or left: heartbeat now, to take this
	// one's new share of the fetch turns and the unparker's endpoints.
	// After the listener was away, the fleet may have changed unheard.
	d.listener.Handle(store.FleetChannel, func(id string) {
		if id != d.fleetID {
			d.fleet.Kick()
		}
	})
	d.listener.OnReconnect(func() { d.fleet.Kick() })
	d.listener.OnReconnect(d.store.InvalidateOperational)

	d.classes = delivery.NewClassBook(d.store, d.logger)
	d.classes.OpenDurations = d.metrics.Breaker.ClassOpenDuration
	d.listener.Handle(store.ClassChannel, d.classes.HandleNotice)
	// A class changed while the listener was away sent a NOTIFY nobody heard.
	d.listener.OnReconnect(func() { d.classes.HandleNotice("") })

	d.autoDisables = &delivery.AutoDisables{Logger: d.logger, Disabled: d.metrics.AutoDisabled}
	d.ledger = delivery.NewLedger(d.store, d.logger, delivery.LedgerConfig{OnDisabled: d.autoDisables.After, Queue: enq,
		WriteTimeout: cfg.LedgerWriteTimeout, OnRetry: d.metrics.Delivery.LedgerRetries.Inc,
		Fleet: func() int { return d.fleet.Live() }})
	// Deliveries refused by an open breaker or queued again by a recovery
	// are parked without a job, and so are those waiting in a FIFO queue;
	// the unparker gives them one back when the breaker lets traffic
	// through (a FIFO queue's one at a time), and releases an enabled
	// endpoint's held deliveries.
	d.unparker = delivery.NewUnparker(d.store, d.enq, unparkInterval, d.logger, d.metrics.Delivery)
	// The most connections this process opens to the server: its pool,
	// the ledger's and the listener's.
	// Behind a pooler the pool's connections go to the pooler, whose own
	// server connections the operator budgets (docs/scaling.md), and the
	// session locks have connections of their own.
	conns := int(deps.Pool.Config().MaxConns) + LedgerConns + 1
	if cfg.PollOnly {
		conns = LedgerConns + 1 + store.SessionPoolConns
	}
	// The fleet ID is also the River client's, so the heartbeat that
	// finds this process gone knows its running jobs (attempted_by).
	d.fleetID = cfg.Actor + "/" + randomSuffix()
	// The runs River holds, so the heartbeat can release those whose
	// fetch's answer was lost.
	d.heldRuns = store.NewHeldRuns(d.clock.Now)
	heartbeat := cfg.FleetHeartbeat
	d.fleet = delivery.NewFleet(delivery.FleetConfig{
		ID: d.fleetID, Connections: conns, Interval: heartbeat, Stale: fleetStaleBeats * heartbeat, Now: time.Now,
		Held: d.heldRuns.IDs, DBNow: d.clock.Now, Doubted: d.heldRuns.Doubted,
	}, d.store, d.logger, delivery.FleetMetrics{Size: d.metrics.Delivery.FleetSize,
		Connections: d.metrics.Delivery.FleetConnections, MaxConnections: d.metrics.Delivery.ServerConnections,
		Rescued: d.metrics.Delivery.FleetRescued, Released: d.metrics.Delivery.FleetLostRunsReleased})
	// The periodic unpark pass is split among the fleet by endpoint.
	d.unparker.SetShare(d.fleet.Share)
	d.maintainer = retention.New(r.retention, retention.Deps{
		Store: d.store, Now: d.clock.Now, Logger: d.logger,
		Metrics: d.metrics.Retention,
	})
	d.tuner = tuning.New(tuning.Config{
		Interval: cfg.TuneInterval, Window: min(cfg.TuneWindow, cfg.Retention), Shadow: cfg.TuneShadow,
		// An attempt is logged when the ledger writes it, after it ends:
		// the request timeout (a class's endpoints with longer ones of
		// their own add the difference), the ledger's write timeout, and a
		// flush.
		Lag: cfg.RequestTimeout + cfg.LedgerWriteTimeout + 5*time.Second, Timeout: cfg.RequestTimeout,
		Pace: tuning.DefaultPace, Actor: cfg.Actor,
	}, tuning.Deps{Store: d.store, Now: d.clock.Now, Logger: d.logger, Metrics: d.metrics.Tuning})
	return d, nil
}

// Run delivers until ctx ends, then stops in order: River stops fetching and
// gives in-flight deliveries ShutdownGrace before cancelling them; then the
// ledger writes what it holds, the breaker gate flushes its last outcomes
// and the metrics server closes. Run returns once every goroutine it started
// has returned: nil after ctx ended, or the error that stopped it early.
func (d *Dispatcher) Run(ctx context.Context) error {
	if !d.ran.CompareAndSwap(false, true) {
		return errors.New("dispatcher: Run called twice")
	}
	err := d.run(ctx)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// Stopped while starting, as asked.
		return nil
	}
	return err
}

// LedgerConns is the connections the ledger keeps open for itself,
// beyond the pool (--db-max-conns): one for the batch being written, one
// for the next, whose records wait meanwhile.
const LedgerConns = 2

func (d *Dispatcher) run(ctx context.Context) (err error) {
	if err := d.clock.Sync(ctx); err != nil {
		return err
	}
	if err := d.classes.Load(ctx); err != nil {
		return err
	}
	if u := d.cfg.OperationalWebhookURL; u != "" {
		// The flag is a shortcut for one operational endpoint receiving
		// every event; each start makes sure it exists with this secret.
		e, created, err := d.store.EnsureOperationalEndpoint(ctx, u, d.cfg.OperationalWebhookSecret)
		if err != nil {
			return fmt.Errorf("register operational endpoint: %w", err)
		}
		d.logger.Info("operational_endpoint_registered", slog.String("endpoint", e.ID), slog.Bool("created", created))
	}
	// The ledger writes through connections of its own, opened now: a
	// record of an attempt that was sent never waits behind the rest of
	// the process's work for one, nor meets a server with none left.
	ledgerPool, err := store.OpenPool(ctx, store.PoolConfig{URL: d.url, MaxConns: LedgerConns, MinConns: LedgerConns,
		ApplicationName: "hookd-ledger/" + d.cfg.Actor})
	if err != nil {
		return fmt.Errorf("open the ledger's connections: %w", err)
	}
	defer ledgerPool.Close()
	d.store.UseLedgerPool(ledgerPool)
	defer d.store.UseLedgerPool(nil)
	if d.cfg.PollOnly {
		// Behind a pooler the session advisory locks need sessions that
		// last: connections of their own, opened as a lock is taken.
		sessions, err := store.OpenPool(ctx, store.PoolConfig{URL: d.url, MaxConns: store.SessionPoolConns,
			ApplicationName: "hookd-locks/" + d.cfg.Actor})
		if err != nil {
			return fmt.Errorf("open the session locks' connections: %w", err)
		}
		defer sessions.Close()
		d.store.UseSessionPool(sessions)
		defer d.store.UseSessionPool(nil)
	}
	ln, err := net.Listen("tcp", d.cfg.MetricsAddr)
	if err != nil {
		return fmt.Errorf("listen for metrics: %w", err)
	}

	// The loops outlive River's soft stop, since in-flight deliveries still
	// record attempts, count breaker outcomes and read the clock: they end
	// when River has stopped, or all at once when one of them fails.
	loopCtx, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	g, gctx := errgroup.WithContext(loopCtx)
	defer func() {
		stopLoops()
		if werr := g.Wait(); err == nil {
			err = werr
		}
		d.logger.Info("dispatcher_stopped")
	}()

	d.serveMetrics(g, gctx, ln)
	fmt.Fprintf(d.stdout, "dispatcher metrics on http://%s/metrics\n", ln.Addr())
	g.Go(func() error { d.clock.Run(gctx, clockSyncInterval); return nil })
	g.Go(func() error { d.metrics.Queue.Poll(gctx, d.store, d.cfg.QueueMetricsInterval, d.logger); return nil })
	g.Go(func() error { d.maintainer.Run(gctx); return nil })
	g.Go(func() error { d.tuner.Run(gctx); return nil })
	// Closes idle destinations' connections; every one once the loops
	// end, after River has stopped.
	g.Go(func() error { return d.destinations.Run(gctx) })
	// The first heartbeat comes before any delivery, so the fleet counts
	// this dispatcher from its first delivery on; a dispatcher that would
	// take the fleet past the server's connections does not start.
	if err := d.fleet.Join(ctx); errors.Is(err, delivery.ErrFleetConnections) {
		return err
	} else if err != nil {
		d.logger.Warn("fleet_heartbeat", slog.String("error", err.Error()))
	}
	g.Go(func() error { d.fleet.Run(gctx); return nil })
	// A dispatcher that joined between this one's first heartbeat and its
	// LISTEN was not heard: one more heartbeat once LISTEN is in place
	// counts it (after a reconnect, OnReconnect does the same).
	g.Go(func() error {
		select {
		case <-d.listener.Ready():
			d.fleet.Kick()
		case <-gctx.Done():
		}
		return nil
	})
	// The ledger's last flush must not be cancelled: Stop makes Run write
	// what it holds and return.
	g.Go(func() error { d.ledger.Run(context.WithoutCancel(gctx)); return nil })
	g.Go(func() error { <-gctx.Done(); d.ledger.Stop(); return nil })

	var gate delivery.Gate = delivery.OpenGate{}
	if d.cfg.Breakers {
		bgate := delivery.NewBreakerGate(delivery.BreakerGateConfig{
			FlushInterval:     d.cfg.BreakerFlushInterval,
			Actor:             d.cfg.Actor,
			Shard:             d.fleetID,
			FleetSuspectShare: d.cfg.FleetSuspectShare,
			OnChange:          d.unparker.Kick,
			RequestTimeout:    d.cfg.RequestTimeout,
			Live:              d.fleet.Live,
		}, d.store, d.store.TrialLeases(), d.classes, d.clock.Now, rand.Float64, d.logger, d.metrics.Breaker)
		d.listener.Handle(store.BreakerChannel, bgate.HandleNotice)
		d.listener.OnReconnect(func() {
			if err := bgate.Load(gctx); err != nil && gctx.Err() == nil {
				d.logger.Warn("breaker_reload", slog.String("error", err.Error()))
			}
		})
		// LISTEN first, then load: a transition between the two is then
		// seen twice rather than missed.
		g.Go(func() error { d.listener.Run(gctx); return nil })
		ready := time.NewTimer(listenReadyWithin)
		defer ready.Stop()
		select {
		case <-d.listener.Ready():
		case <-ctx.Done():
			return nil
		case <-gctx.Done():
			return nil // the failed loop's error is Run's
		case <-ready.C:
			return fmt.Errorf("listen for breaker transitions: not ready after %s", listenReadyWithin)
		}
		if err := bgate.Load(ctx); err != nil {
			return err
		}
		g.Go(func() error { bgate.Run(gctx); return nil })
		gate = bgate
	} else {
		g.Go(func() error { d.listener.Run(gctx); return nil })
	}

	// The endpoints are in memory before the first fetch, a thousand per
	// statement, and after LISTEN (a change in between drops its entry):
	// loaded as messages came, a dispatcher made about a statement per
	// tenant and reached its full rate only once it had seen them all.
	warmStart := time.Now()
	if n, err := d.cache.Warm(ctx, d.store, endpointWarmMax); err != nil {
		d.logger.Warn("endpoint_cache_warm", slog.Int("endpoints", n), slog.String("error", err.Error()))
	} else {
		d.logger.Info("endpoint_cache_warm", slog.Int("endpoints", n), slog.Duration("took", time.Since(warmStart)))
	}
	client, err := d.newRiverClient(gate)
	if err != nil {
		return err
	}
	// Cancelling Start's context begins River's soft stop: no new fetches,
	// and in-flight jobs get SoftStopTimeout before their contexts are
	// cancelled. A failed loop stops River as the end of ctx does.
	riverCtx, stopRiver := context.WithCancel(ctx)
	defer stopRiver()
	if err := client.Start(riverCtx); err != nil {
		return fmt.Errorf("start river: %w", err)
	}
	// Without breakers nothing is parked by one, but an enabled endpoint's
	// held deliveries and a recovery's are still released by the
	// unparker, and FIFO queues wait without jobs all the same: its pass
	// moves one whose head something other than the ledger made final.
	g.Go(func() error { d.unparker.Run(gctx); return nil })
	// river_client is the id River records in a running job's
	// attempted_by: which process holds which job.
	d.logger.Info("dispatcher_started", slog.Int("workers", d.cfg.Workers), slog.Int("max_jobs", d.r.maxJobs), slog.String("retry_schedule", d.r.schedule.String()),
		slog.String("river_client", client.ID()))
	select {
	case <-ctx.Done():
	case <-gctx.Done():
	}
	d.logger.Info("dispatcher_stopping", slog.Duration("grace", d.cfg.ShutdownGrace))
	stopRiver()
	<-client.Stopped()
	for _, s := range d.senders {
		s.CloseIdle()
	}
	return nil
}

// newRiverClient builds the River client running the deliver, reclassify
// and operational webhook workers behind gate, and hands it to the parts
// that insert jobs.
func (d *Dispatcher) newRiverClient(gate delivery.Gate) (*river.Client[pgx.Tx], error) {
	// The SSRF guard vets every address a delivery dials, after DNS.
	senderCfg := delivery.SenderConfig{Timeout: d.cfg.RequestTimeout, DialControl: delivery.GuardDial}
	var tracer trace.Tracer
	var propagator propagation.TextMapPropagator
	if d.tracing.Enabled() {
		tracer = d.tracing.Provider.Tracer(delivery.TracerName)
		propagator = d.tracing.Propagator
		if d.cfg.PropagateTrace {
			// Receivers see the attempt's span as their parent.
			senderCfg.Propagator = propagator
		}
	}
	if d.cfg.AllowPrivateTargets {
		senderCfg.DialControl = nil
		d.logger.Warn("ssrf_guard_off", slog.String("reason", "--allow-private-targets: deliveries may reach loopback and private addresses"))
	}
	sender := delivery.NewSender(senderCfg)
	// Operational endpoints are the operator's own services, often
	// internal ones, so their sender is not guarded.
	opsSender := delivery.NewSender(delivery.SenderConfig{Timeout: d.cfg.RequestTimeout, Propagator: senderCfg.Propagator})
	d.senders = []*delivery.Sender{sender, opsSender}
	worker := delivery.NewWorker(delivery.WorkerConfig{
		Schedule:       d.r.schedule,
		MaxPerEndpoint: d.cfg.MaxPerEndpoint,
		MaxInFlight:    d.cfg.Workers,
		MaxPerHost:     d.cfg.MaxPerHost,
		// Before River can rescue a job (RescueStuckAfter exceeds the
		// request timeout + JobTimeoutMargin): a run frozen past the
		// rescue sends nothing when it wakes.
		SendDeadline:     d.r.rescueAfter - delivery.JobTimeoutMargin,
		Park:             d.cfg.Breakers,
		PayloadRetention: d.r.retention.PayloadRetention,
		Retention:        d.r.retention.Retention,
	}, delivery.WorkerDeps{
		Endpoints:         d.cache,
		Deliveries:        d.store,
		Ledger:            d.ledger,
		Gate:              gate,
		AuthRules:         d.classes,
		Sender:            sender,
		OperationalSender: opsSender,
		Publisher:         d.destinations,
		Metrics:           d.metrics.Delivery,
		Logger:            d.logger,
		Now:               d.clock.Now,
		Rand:              rand.Float64,
		Lease:             d.fleet,
		RateSlots:         d.store,
		Tracer:            tracer,
		Propagator:        propagator,
	})
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	river.AddWorker(workers, &delivery.MessageWorker{Worker: worker, HandOffs: d.store, Queue: d.enq})
	river.AddWorker(workers, &delivery.ReclassifyWorker{Store: d.store, Logger: d.logger})
	// Jobs of the earlier operational webhook kind still queued finish.
	river.AddWorker(workers, &delivery.OperationalWorker{
		URL: d.cfg.OperationalWebhookURL, Secret: d.r.opsSecret, Now: d.clock.Now, Sender: opsSender,
	})
	// The fenced driver keeps a run that outlived its lease (the job
	// rescued and run again elsewhere) from writing its outcome over the
	// live run's.
	fenced, withheld := d.metrics.Delivery.FleetOutcomesFenced, d.metrics.Delivery.FleetRunsWithheld
	fullFetches, windowedFetches := d.metrics.Delivery.QueueFetches.WithLabelValues("full"), d.metrics.Delivery.QueueFetches.WithLabelValues("windowed")
	// The fleet's dispatchers take turns to fetch deliveries
	// (delivery.FetchPacer).
	driver := store.NewFencedDriver(d.store.Pool(), store.FencedDriverConfig{
		Stale:    func(n int) { fenced.Add(float64(n)) },
		Held:     d.heldRuns,
		Withheld: func(n int) { withheld.Add(float64(n)) },
		Pace:     delivery.NewFetchPacer(delivery.QueueDeliver, fetchTurn, d.cfg.FetchPollInterval, d.fleet.Share, d.clock.Now),
		// Each fetch starts where the last left the queue, so a long
		// transaction's dead entries are not walked by every fetch.
		Window: &store.FetchWindowConfig{Queue: delivery.QueueDeliver, Now: d.clock.Now, Fetched: func(full bool, _ int) {
			if full {
				fullFetches.Inc()
			} else {
				windowedFetches.Inc()
			}
		}},
	})
	client, err := river.NewClient(driver, &river.Config{
		ID:                          d.fleetID,
		Middleware:                  []rivertype.Middleware{&store.RunFence{}},
		Logger:                      slog.New(minLevel{Handler: d.logger.Handler(), min: slog.LevelWarn}),
		Workers:                     workers,
		Queues:                      map[string]river.QueueConfig{delivery.QueueDeliver: {MaxWorkers: d.r.maxJobs}, river.QueueDefault: {MaxWorkers: 10, FetchPollInterval: max(d.cfg.FetchPollInterval, defaultQueuePoll)}},
		FetchCooldown:               d.cfg.FetchCooldown,
		FetchPollInterval:           d.cfg.FetchPollInterval,
		CompletedJobRetentionPeriod: d.cfg.CompletedJobRetention,
		ReindexerIndexNames:         store.RiverReindexIndexes(),
		JobTimeout:                  d.r.jobTimeout,
		RescueStuckJobsAfter:        d.r.rescueAfter,
		SoftStopTimeout:             d.cfg.ShutdownGrace,
		// Behind a pooler in transaction mode a LISTEN would stay on a
		// server connection serving others: River polls for jobs every
		// FetchPollInterval instead.
		PollOnly: d.cfg.PollOnly,
		PeriodicJobs: []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(d.cfg.ReclassifyInterval),
			func() (river.JobArgs, *river.InsertOpts) { return delivery.ReclassifyArgs{}, nil }, nil)},
	})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	d.enq.Client = client
	return client, nil
}

// randomSuffix tells apart processes that share an actor name.
func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = crand.Read(b) // never fails
	return hex.EncodeToString(b)
}

// hostActor names this process in the breaker transition history.
func hostActor() string {
	host, err := os.Hostname()
	if err != nil {
		host = "dispatcher"
	}
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}

// serveMetrics serves /metrics, /healthz (alive) and /readyz (database
// reachable) on ln until gctx ends, then shuts the server down.
func (d *Dispatcher) serveMetrics(g *errgroup.Group, gctx context.Context, ln net.Listener) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", telemetry.Handler(d.reg))
	if d.cfg.Pprof {
		telemetry.RegisterPprof(mux)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`+"\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := d.store.Ping(ctx); err != nil {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"type":"https://hookd.dev/problems/unavailable","title":"Service Unavailable","status":503,"detail":"the database is unavailable"}`+"\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ready"}`+"\n")
	})
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(d.logger.Handler(), slog.LevelWarn),
	}
	g.Go(func() error { return telemetry.RunServer(gctx, srv, ln, metricsShutdown) })
}

// minLevel raises a handler's threshold: River logs every retry at info,
// which the delivery log already records.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{Handler: h.Handler.WithAttrs(as), min: h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{Handler: h.Handler.WithGroup(name), min: h.min}
}

// Metrics are every series a dispatcher exports.
type Metrics struct {
	*delivery.DispatcherMetrics
	// Retention is the partition maintainer's.
	Retention *retention.Metrics
	// Tuning is the tuning leader's.
	Tuning *tuning.Metrics
}

// RegisterMetrics registers every series a dispatcher exports on reg (the
// docs' series table is generated from it); endpointCap bounds the distinct
// endpoint label values.
func RegisterMetrics(reg prometheus.Registerer, endpointCap int) Metrics {
	telemetry.RegisterRuntime(reg)
	dm := delivery.NewDispatcherMetrics(reg, &delivery.EndpointLabels{Max: endpointCap})
	return Metrics{DispatcherMetrics: dm, Retention: retention.NewMetrics(reg, dm.Delivery.Expired), Tuning: tuning.NewMetrics(reg)}
}
