package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/hookd/hookd/internal/config"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/replay"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/telemetry"
	"github.com/hookd/hookd/internal/trafficclass"
)

const synopsis = `usage: dispatcher [run|migrate] [flags]
       dispatcher replay [flags]
       dispatcher trace synth [flags]

  run      deliver queued webhooks (the default); migrates first unless --no-migrate
  migrate  apply hookd's and River's migrations, then exit
  replay   replay recorded or synthetic outcomes through the breaker offline,
           or sweep configs over them (dispatcher replay --help)
  trace    write a synthetic trace for replay (dispatcher trace synth --help)`

// settings are the dispatcher's flags, each with an environment twin.
type settings struct {
	databaseURL       *string
	metricsAddr       *string
	workers           *int
	requestTimeout    *time.Duration
	retrySchedule     *string
	maxPerEndpoint    *int
	shutdownGrace     *time.Duration
	noMigrate         *bool
	dbMaxConns        *int
	fetchCooldown     *time.Duration
	fetchPollInterval *time.Duration
	jobRetention      *time.Duration
	rescueAfter       *time.Duration
	metricsEndpoints  *int
	queueMetricsEvery *time.Duration
	breakers          *bool
	breakerFlush      *time.Duration
	trialPoolSize     *int
	fleetShare        *float64
	reclassifyEvery   *time.Duration
	opsWebhookURL     *string
	opsWebhookSecret  *string
	allowPrivate      *bool
	logFormat         *string
	logLevel          *string
}

// newFlagSet binds every setting. Tests use it to check that deployment
// manifests name real flags.
func newFlagSet(getenv func(string) string, out io.Writer) (*config.FlagSet, *settings) {
	fs := config.New("dispatcher", synopsis, getenv, out)
	return fs, &settings{
		databaseURL:       fs.String("database-url", "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "Postgres connection URL"),
		metricsAddr:       fs.String("metrics-addr", "METRICS_ADDR", "127.0.0.1:9090", "address serving /metrics, /healthz and /readyz"),
		workers:           fs.Int("workers", "WORKERS", 100, "deliveries in flight at once in this process"),
		requestTimeout:    fs.Duration("request-timeout", "REQUEST_TIMEOUT", 15*time.Second, "timeout of one delivery attempt"),
		retrySchedule:     fs.String("retry-schedule", "RETRY_SCHEDULE", delivery.DefaultSchedule.String(), "delay before each attempt, comma-separated (full jitter)"),
		maxPerEndpoint:    fs.Int("max-per-endpoint", "MAX_PER_ENDPOINT", 10, "attempts in flight to one endpoint in this process; excess deliveries are snoozed"),
		shutdownGrace:     fs.Duration("shutdown-grace", "SHUTDOWN_GRACE", 30*time.Second, "how long in-flight deliveries get to finish on SIGTERM"),
		noMigrate:         fs.Bool("no-migrate", "NO_MIGRATE", false, "do not apply migrations on start"),
		dbMaxConns:        fs.Int("db-max-conns", "DB_MAX_CONNS", 30, "Postgres pool size"),
		fetchCooldown:     fs.Duration("fetch-cooldown", "FETCH_COOLDOWN", 5*time.Millisecond, "least time between River job fetches"),
		fetchPollInterval: fs.Duration("fetch-poll-interval", "FETCH_POLL_INTERVAL", 250*time.Millisecond, "River's fallback poll interval"),
		jobRetention:      fs.Duration("completed-job-retention", "COMPLETED_JOB_RETENTION", time.Hour, "how long River keeps completed jobs (attempts live on in delivery_attempts)"),
		rescueAfter:       fs.Duration("rescue-stuck-after", "RESCUE_STUCK_AFTER", 0, "when a running job of a dead process is retried; 0 = request timeout + 60s"),
		metricsEndpoints:  fs.Int("metrics-endpoint-cap", "METRICS_ENDPOINT_CAP", 1000, "most endpoints with their own metric series; the rest share endpoint=\"_other\" (0 = no cap)"),
		queueMetricsEvery: fs.Duration("queue-metrics-interval", "QUEUE_METRICS_INTERVAL", 15*time.Second, "how often the deliver queue's depth and backlog age are measured (two index queries; every dispatcher exports the same fleet-wide figures)"),
		breakers:          fs.Bool("breakers", "BREAKERS", true, "run every delivery through its endpoint's circuit breaker"),
		breakerFlush:      fs.Duration("breaker-flush-interval", "BREAKER_FLUSH_INTERVAL", 100*time.Millisecond, "how often counted outcomes go to the shared breaker window and trips are evaluated"),
		trialPoolSize:     fs.Int("trial-pool-size", "TRIAL_POOL_SIZE", 8, "connections for half-open trials (each trial holds one for its request)"),
		fleetShare:        fs.Float("fleet-suspect-share", "BREAKER_FLEET_SUSPECT_SHARE", 0.3, "share of active endpoints opening within a minute above which no breaker opens on transport errors (our egress is suspect); 0 disables"),
		reclassifyEvery:   fs.Duration("reclassify-interval", "RECLASSIFY_INTERVAL", trafficclass.ReclassifyInterval, "how often every auto endpoint's traffic class is re-evaluated from its delivery log (once fleet-wide)"),
		opsWebhookURL:     fs.String("operational-webhook-url", "OPERATIONAL_WEBHOOK_URL", "", "where endpoint.disabled events are sent (Standard Webhooks format); empty sends none"),
		opsWebhookSecret:  fs.String("operational-webhook-secret", "OPERATIONAL_WEBHOOK_SECRET", "", "whsec_ secret signing operational webhooks (required with the URL)"),
		allowPrivate:      fs.Bool("allow-private-targets", "ALLOW_PRIVATE_TARGETS", false, "also deliver to loopback, private, link-local and other non-public addresses (development and tests; by default every dialed address is checked)"),
		logFormat:         fs.String("log-format", "LOG_FORMAT", "text", "log format: text or json"),
		logLevel:          fs.String("log-level", "LOG_LEVEL", "info", "log level: debug, info, warn or error"),
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "replay":
			return replay.Main(ctx, args[1:], getenv, stdout, stderr)
		case "trace":
			return replay.TraceMain(ctx, args[1:], getenv, stdout, stderr)
		}
	}
	cmd := "run"
	if len(args) > 0 && (args[0] == "run" || args[0] == "migrate") {
		cmd, args = args[0], args[1:]
	}
	fs, set := newFlagSet(getenv, stdout)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(fs.Args()) > 0 {
		return &config.UsageError{Msg: fmt.Sprintf("unexpected argument %q", fs.Args()[0])}
	}
	schedule, err := delivery.ParseSchedule(*set.retrySchedule)
	if err != nil {
		return config.Invalid("retry-schedule", "RETRY_SCHEDULE", "%v", err)
	}
	switch {
	case *set.workers < 1 || *set.workers > 10000:
		return config.Invalid("workers", "WORKERS", "must be from 1 to 10000")
	case *set.requestTimeout < 100*time.Millisecond || *set.requestTimeout > 5*time.Minute:
		return config.Invalid("request-timeout", "REQUEST_TIMEOUT", "must be from 100ms to 5m")
	case *set.maxPerEndpoint < 1:
		return config.Invalid("max-per-endpoint", "MAX_PER_ENDPOINT", "must be at least 1")
	case *set.shutdownGrace <= 0:
		return config.Invalid("shutdown-grace", "SHUTDOWN_GRACE", "must be positive")
	case *set.dbMaxConns < 4:
		return config.Invalid("db-max-conns", "DB_MAX_CONNS", "must be at least 4")
	case *set.fetchCooldown < time.Millisecond:
		return config.Invalid("fetch-cooldown", "FETCH_COOLDOWN", "must be at least 1ms")
	case *set.fetchPollInterval < *set.fetchCooldown:
		return config.Invalid("fetch-poll-interval", "FETCH_POLL_INTERVAL", "must be at least the fetch cooldown")
	case *set.jobRetention < time.Minute:
		return config.Invalid("completed-job-retention", "COMPLETED_JOB_RETENTION", "must be at least 1m")
	case *set.rescueAfter < 0:
		return config.Invalid("rescue-stuck-after", "RESCUE_STUCK_AFTER", "must not be negative")
	case *set.metricsEndpoints < 0:
		return config.Invalid("metrics-endpoint-cap", "METRICS_ENDPOINT_CAP", "must not be negative")
	case *set.queueMetricsEvery < time.Second:
		return config.Invalid("queue-metrics-interval", "QUEUE_METRICS_INTERVAL", "must be at least 1s")
	case *set.breakerFlush < 10*time.Millisecond || *set.breakerFlush > 10*time.Second:
		return config.Invalid("breaker-flush-interval", "BREAKER_FLUSH_INTERVAL", "must be from 10ms to 10s")
	case *set.fleetShare < 0 || *set.fleetShare >= 1:
		return config.Invalid("fleet-suspect-share", "BREAKER_FLEET_SUSPECT_SHARE", "must be in [0, 1)")
	case *set.reclassifyEvery < time.Minute:
		return config.Invalid("reclassify-interval", "RECLASSIFY_INTERVAL", "must be at least 1m")
	case *set.trialPoolSize < 1 || *set.trialPoolSize > 1000:
		return config.Invalid("trial-pool-size", "TRIAL_POOL_SIZE", "must be from 1 to 1000")
	}
	var opsSecret delivery.Secret
	if *set.opsWebhookURL != "" {
		if opsSecret, err = delivery.ParseSecret(*set.opsWebhookSecret); err != nil {
			return config.Invalid("operational-webhook-secret", "OPERATIONAL_WEBHOOK_SECRET", "%v (required with --operational-webhook-url)", err)
		}
	}
	jobTimeout := *set.requestTimeout + delivery.JobTimeoutMargin
	rescueAfter := *set.rescueAfter
	if rescueAfter == 0 {
		rescueAfter = *set.requestTimeout + 60*time.Second
	}
	if rescueAfter <= jobTimeout {
		return config.Invalid("rescue-stuck-after", "RESCUE_STUCK_AFTER", "must exceed the request timeout + %s (%s)", delivery.JobTimeoutMargin, jobTimeout)
	}
	logger, err := config.NewLogger(stderr, *set.logFormat, *set.logLevel)
	if err != nil {
		return err
	}

	pool, err := store.OpenPool(ctx, store.PoolConfig{URL: *set.databaseURL, MaxConns: int32(*set.dbMaxConns), ApplicationName: "hookd-dispatcher"})
	if err != nil {
		return err
	}
	defer pool.Close()
	if cmd == "migrate" || !*set.noMigrate {
		if err := store.Migrate(ctx, pool, logger); err != nil {
			return err
		}
		if cmd == "migrate" {
			fmt.Fprintln(stdout, "migrations are current")
			return nil
		}
	}

	st := store.New(pool, logger)
	clock := store.NewDBClock(pool)
	if err := clock.Sync(ctx); err != nil {
		return err
	}
	bg, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBackground()
	go clock.Run(bg, 10*time.Second)

	reg := prometheus.NewRegistry()
	telemetry.RegisterRuntime(reg)
	metrics := delivery.NewDispatcherMetrics(reg, &delivery.EndpointLabels{Max: *set.metricsEndpoints})
	go metrics.Queue.Poll(bg, st, *set.queueMetricsEvery, logger)

	cache := delivery.NewEndpointCache(st, 30*time.Second, clock.Now)
	listener := store.NewListener(*set.databaseURL, logger)
	listener.Handle(store.EndpointChannel, cache.Invalidate)
	listener.OnReconnect(cache.InvalidateAll)

	classes := delivery.NewClassBook(st, logger)
	classes.OpenDurations = metrics.Breaker.ClassOpenDuration
	if err := classes.Load(ctx); err != nil {
		return err
	}
	listener.Handle(store.ClassChannel, classes.HandleNotice)
	// A class changed while the listener was away sent a NOTIFY nobody heard.
	listener.OnReconnect(func() { classes.HandleNotice("") })

	autoDisables := &delivery.AutoDisables{Logger: logger, Disabled: metrics.AutoDisabled}
	ledger := delivery.NewLedger(st, logger, delivery.LedgerConfig{AfterDisable: autoDisables.InTx, OnDisabled: autoDisables.After})
	go ledger.Run(bg)

	// Deliveries refused by an open breaker are parked without a job; the
	// unparker gives them one back when the breaker lets traffic through.
	// Its enqueuer gets the River client once that exists.
	enq := &delivery.Enqueuer{}
	unparker := delivery.NewUnparker(st, enq, 2*time.Second, logger, metrics.Delivery)

	var gate delivery.Gate = delivery.OpenGate{}
	gateCtx, stopGate := context.WithCancel(bg)
	defer stopGate()
	gateDone := make(chan struct{})
	if *set.breakers {
		trials, err := st.OpenTrialPool(ctx, *set.databaseURL, int32(*set.trialPoolSize), *set.requestTimeout+10*time.Second, "hookd-trials/"+actor())
		if err != nil {
			return err
		}
		defer trials.Close()
		bgate := delivery.NewBreakerGate(delivery.BreakerGateConfig{
			FlushInterval:     *set.breakerFlush,
			Actor:             actor(),
			FleetSuspectShare: *set.fleetShare,
			OnChange:          unparker.Kick,
		}, st, trials, classes, clock.Now, rand.Float64, logger, metrics.Breaker)
		listener.Handle(store.BreakerChannel, bgate.HandleNotice)
		listener.OnReconnect(func() {
			if err := bgate.Load(gateCtx); err != nil {
				logger.Warn("breaker_reload", slog.String("error", err.Error()))
			}
		})
		// LISTEN first, then load: a transition between the two is then
		// seen twice rather than missed.
		go listener.Run(bg)
		select {
		case <-listener.Ready():
		case <-ctx.Done():
			return nil
		case <-time.After(30 * time.Second):
			return errors.New("listen for breaker transitions: not ready after 30s")
		}
		if err := bgate.Load(ctx); err != nil {
			return err
		}
		go func() {
			defer close(gateDone)
			bgate.Run(gateCtx)
		}()
		gate = bgate
	} else {
		go listener.Run(bg)
		close(gateDone)
	}

	// The SSRF guard vets every address a delivery dials, after DNS.
	senderCfg := delivery.SenderConfig{Timeout: *set.requestTimeout, DialControl: delivery.GuardDial}
	if *set.allowPrivate {
		senderCfg.DialControl = nil
		logger.Warn("ssrf_guard_off", slog.String("reason", "--allow-private-targets: deliveries may reach loopback and private addresses"))
	}
	worker := delivery.NewWorker(delivery.WorkerConfig{
		Schedule:       schedule,
		MaxPerEndpoint: *set.maxPerEndpoint,
		Park:           *set.breakers,
	}, delivery.WorkerDeps{
		Endpoints:  cache,
		Deliveries: st,
		Ledger:     ledger,
		Gate:       gate,
		AuthRules:  classes,
		Sender:     delivery.NewSender(senderCfg),
		Metrics:    metrics.Delivery,
		Logger:     logger,
		Now:        clock.Now,
		Rand:       rand.Float64,
	})
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	river.AddWorker(workers, &delivery.ReclassifyWorker{Store: st, Logger: logger})
	// The operational webhook URL is the operator's own setting, often an
	// internal service, so its sender is not guarded.
	river.AddWorker(workers, &delivery.OperationalWorker{
		URL: *set.opsWebhookURL, Secret: opsSecret, Now: clock.Now,
		Sender: delivery.NewSender(delivery.SenderConfig{Timeout: *set.requestTimeout}),
	})
	riverLogger := slog.New(minLevel{Handler: logger.Handler(), min: slog.LevelWarn})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:                      riverLogger,
		Workers:                     workers,
		Queues:                      map[string]river.QueueConfig{delivery.QueueDeliver: {MaxWorkers: *set.workers}, river.QueueDefault: {MaxWorkers: 10}},
		FetchCooldown:               *set.fetchCooldown,
		FetchPollInterval:           *set.fetchPollInterval,
		CompletedJobRetentionPeriod: *set.jobRetention,
		JobTimeout:                  jobTimeout,
		RescueStuckJobsAfter:        rescueAfter,
		SoftStopTimeout:             *set.shutdownGrace,
		PeriodicJobs: []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(*set.reclassifyEvery),
			func() (river.JobArgs, *river.InsertOpts) { return delivery.ReclassifyArgs{}, nil }, nil)},
	})
	if err != nil {
		return fmt.Errorf("river client: %w", err)
	}
	if *set.opsWebhookURL != "" {
		autoDisables.Client = client
	}
	enq.Client = client

	metricsSrv, metricsLn, err := serveMetrics(*set.metricsAddr, reg, st, logger)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "dispatcher metrics on http://%s/metrics\n", metricsLn.Addr())

	if err := client.Start(ctx); err != nil {
		return fmt.Errorf("start river: %w", err)
	}
	unparkDone := make(chan struct{})
	go func() {
		defer close(unparkDone)
		if *set.breakers {
			unparker.Run(gateCtx)
		}
	}()
	logger.Info("dispatcher_started", slog.Int("workers", *set.workers), slog.String("retry_schedule", schedule.String()))
	<-ctx.Done()
	logger.Info("dispatcher_stopping", slog.Duration("grace", *set.shutdownGrace))
	// Cancelling Start's context began River's soft stop: no new fetches,
	// in-flight jobs get SoftStopTimeout before their contexts are cancelled.
	<-client.Stopped()
	stopGate()
	<-gateDone
	<-unparkDone
	ledger.Stop()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = metricsSrv.Shutdown(sctx)
	logger.Info("dispatcher_stopped")
	return nil
}

// actor names this process in the breaker transition history.
func actor() string {
	host, err := os.Hostname()
	if err != nil {
		host = "dispatcher"
	}
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}

// serveMetrics serves /metrics, /healthz (alive) and /readyz (database
// reachable).
func serveMetrics(addr string, reg *prometheus.Registry, st *store.Store, logger *slog.Logger) (*http.Server, net.Listener, error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", telemetry.Handler(reg))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`+"\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := st.Ping(ctx); err != nil {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"type":"https://hookd.dev/problems/unavailable","title":"Service Unavailable","status":503,"detail":"the database is unavailable"}`+"\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ready"}`+"\n")
	})
	return telemetry.Serve(addr, mux, logger)
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
