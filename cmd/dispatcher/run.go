package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hookd/hookd/internal/config"
	"github.com/hookd/hookd/internal/dispatcher"
	"github.com/hookd/hookd/internal/replay"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/telemetry"
)

// tracingShutdown bounds the export of the last spans on exit.
const tracingShutdown = 5 * time.Second

// shutdownTracing exports the spans still buffered, within tracingShutdown.
func shutdownTracing(t *telemetry.Tracing, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), tracingShutdown)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		logger.Warn("tracing_shutdown", slog.String("error", err.Error()))
	}
}

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
	database          *config.Database
	metricsAddr       *string
	workers           *int
	maxJobs           *int
	pubsubEmulator    *string
	requestTimeout    *time.Duration
	retrySchedule     *string
	maxPerEndpoint    *int
	maxPerHost        *int
	shutdownGrace     *time.Duration
	noMigrate         *bool
	dbMaxConns        *int
	fetchCooldown     *time.Duration
	fetchPollInterval *time.Duration
	jobRetention      *time.Duration
	rescueAfter       *time.Duration
	ledgerTimeout     *time.Duration
	metricsEndpoints  *int
	queueMetricsEvery *time.Duration
	breakers          *bool
	breakerFlush      *time.Duration
	fleetHeartbeat    *time.Duration
	trialPoolSize     *int
	fleetShare        *float64
	reclassifyEvery   *time.Duration
	tuneEvery         *time.Duration
	tuneWindow        *time.Duration
	tuneShadow        *time.Duration
	opsWebhookURL     *string
	opsWebhookSecret  *string
	allowPrivate      *bool
	propagateTrace    *bool
	partitionInterval *time.Duration
	retention         *time.Duration
	payloadRetention  *time.Duration
	historyRetention  *time.Duration
	pprof             *bool
	logFormat         *string
	logLevel          *string
	secretKeys        *config.SecretKeys
}

// newFlagSet binds every setting, with dispatcher.DefaultConfig's defaults.
// Tests use it to check that deployment manifests name real flags.
func newFlagSet(getenv func(string) string, out io.Writer) (*config.FlagSet, *settings) {
	fs := config.New("dispatcher", synopsis, getenv, out)
	def := dispatcher.DefaultConfig()
	return fs, &settings{
		database: config.BindDatabase(fs, "; River polls for jobs every --fetch-poll-interval instead of LISTENing",
			"migrations, the LISTEN connection, the tuning and partition maintenance locks and the ledger's connections (required with --db-pooled)"),
		metricsAddr:       fs.String("metrics-addr", "METRICS_ADDR", def.MetricsAddr, "address serving /metrics, /healthz and /readyz"),
		workers:           fs.Int("workers", "WORKERS", def.Workers, "requests in flight at once in this process"),
		maxJobs:           fs.Int("max-jobs", "MAX_JOBS", def.MaxJobs, "delivery jobs River runs at once in this process (0: 3 x --workers); a job also waits for its payload, its turn and the ledger's commit, which hold no request"),
		requestTimeout:    fs.Duration("request-timeout", "REQUEST_TIMEOUT", def.RequestTimeout, "timeout of one delivery attempt"),
		retrySchedule:     fs.String("retry-schedule", "RETRY_SCHEDULE", def.RetrySchedule, "delay before each attempt, comma-separated (full jitter)"),
		maxPerEndpoint:    fs.Int("max-per-endpoint", "MAX_PER_ENDPOINT", def.MaxPerEndpoint, "attempts in flight to one endpoint in this process; excess deliveries are snoozed"),
		maxPerHost:        fs.Int("max-per-host", "MAX_PER_HOST", def.MaxPerHost, "requests in flight to one destination host:port in this process; excess deliveries wait their turn, within the start budget"),
		shutdownGrace:     fs.Duration("shutdown-grace", "SHUTDOWN_GRACE", def.ShutdownGrace, "how long in-flight deliveries get to finish on SIGTERM"),
		noMigrate:         fs.Bool("no-migrate", "NO_MIGRATE", false, "do not apply migrations on start"),
		dbMaxConns:        fs.Int("db-max-conns", "DB_MAX_CONNS", 0, "Postgres pool size; 0: 2 per core (GOMAXPROCS), at least 12, at most 20 (the ledger's 2 connections and the listener's come on top)"),
		fetchCooldown:     fs.Duration("fetch-cooldown", "FETCH_COOLDOWN", def.FetchCooldown, "least time between River job fetches"),
		fetchPollInterval: fs.Duration("fetch-poll-interval", "FETCH_POLL_INTERVAL", def.FetchPollInterval, "River's fallback poll interval"),
		jobRetention:      fs.Duration("completed-job-retention", "COMPLETED_JOB_RETENTION", def.CompletedJobRetention, "how long River keeps completed jobs (attempts live on in delivery_attempts)"),
		rescueAfter:       fs.Duration("rescue-stuck-after", "RESCUE_STUCK_AFTER", def.RescueStuckAfter, "when a running job of a dead process is retried; 0 = the longest attempt timeout (the request timeout, or an endpoint's own, at most 60s) + 60s; set by hand, it should exceed that timeout + 5s"),
		ledgerTimeout:     fs.Duration("ledger-write-timeout", "LEDGER_WRITE_TIMEOUT", def.LedgerWriteTimeout, "how long one ledger write (a batch of attempts and status updates) may wait for Postgres; past it the write fails and its deliveries retry"),
		metricsEndpoints:  fs.Int("metrics-endpoint-cap", "METRICS_ENDPOINT_CAP", def.MetricsEndpointCap, "most endpoints with their own metric series; the rest share endpoint=\"_other\" (0 = no cap)"),
		queueMetricsEvery: fs.Duration("queue-metrics-interval", "QUEUE_METRICS_INTERVAL", def.QueueMetricsInterval, "how often the deliver queue's depth and backlog age are measured (two index queries; every dispatcher exports the same fleet-wide figures)"),
		breakers:          fs.Bool("breakers", "BREAKERS", def.Breakers, "run every delivery through its endpoint's circuit breaker"),
		breakerFlush:      fs.Duration("breaker-flush-interval", "BREAKER_FLUSH_INTERVAL", def.BreakerFlushInterval, "how often counted outcomes go to the shared breaker window and trips are evaluated"),
		fleetHeartbeat:    fs.Duration("fleet-heartbeat", "FLEET_HEARTBEAT", def.FleetHeartbeat, "how often the dispatcher heartbeats in the fleet table; one silent for three heartbeats is gone and the others take its running jobs (give every dispatcher of a fleet the same)"),
		trialPoolSize:     fs.Int("trial-pool-size", "TRIAL_POOL_SIZE", 0, "deprecated and ignored (a warning is logged when set): half-open trials hold leases in PostgreSQL and use the main pool for short statements, with no connections of their own"),
		fleetShare:        fs.Float("fleet-suspect-share", "BREAKER_FLEET_SUSPECT_SHARE", def.FleetSuspectShare, "share of active endpoints opening within a minute above which no breaker opens on transport errors (our egress is suspect); 0 disables"),
		reclassifyEvery:   fs.Duration("reclassify-interval", "RECLASSIFY_INTERVAL", def.ReclassifyInterval, "how often every auto endpoint's traffic class is re-evaluated from its delivery log (once fleet-wide)"),
		tuneEvery:         fs.Duration("tune-interval", "TUNE_INTERVAL", def.TuneInterval, "how often each traffic class whose auto_tune is not off gets a tuning pass (by one dispatcher of the fleet)"),
		tuneWindow:        fs.Duration("tune-window", "TUNE_WINDOW", def.TuneWindow, "how much of the delivery log a periodic tuning pass reads, up to now (at most --retention)"),
		tuneShadow:        fs.Duration("tune-shadow", "TUNE_SHADOW", def.TuneShadow, "how long a tuning proposal of a class in auto_tune apply runs in shadow beside the live config before it is judged"),
		opsWebhookURL:     fs.String("operational-webhook-url", "OPERATIONAL_WEBHOOK_URL", def.OperationalWebhookURL, "registers at start an operational endpoint with this URL receiving every operational event (Standard Webhooks format); empty registers none"),
		opsWebhookSecret:  fs.String("operational-webhook-secret", "OPERATIONAL_WEBHOOK_SECRET", def.OperationalWebhookSecret, "whsec_ secret of that operational endpoint (required with the URL)"),
		pubsubEmulator:    fs.String("pubsub-emulator-host", "PUBSUB_EMULATOR_HOST", "", "host:port of a Pub/Sub emulator (Google's, or its Go test server) that every pubsub destination then publishes to, without credentials (development and tests; the variable Google's clients read)"),
		allowPrivate:      fs.Bool("allow-private-targets", "ALLOW_PRIVATE_TARGETS", def.AllowPrivateTargets, "also deliver to loopback, private, link-local and other non-public addresses (development and tests; by default every dialed address is checked)"),
		propagateTrace:    fs.Bool("propagate-trace", "PROPAGATE_TRACE", def.PropagateTrace, "send each attempt's W3C traceparent header to the receiver when tracing is on (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_TRACES_EXPORTER set), so its spans join hookd's trace"),
		partitionInterval: fs.Duration("partition-interval", "PARTITION_INTERVAL", def.PartitionInterval, "width of one time partition of messages, payloads, deliveries and attempts (at least 1m)"),
		retention:         fs.Duration("retention", "RETENTION", def.Retention, "how long messages, deliveries and attempts are kept; older ones are dropped a partition at a time, and a delivery not final by then becomes expired"),
		payloadRetention:  fs.Duration("payload-retention", "PAYLOAD_RETENTION", 0, "how long payloads are kept (0 = --retention); after it a message keeps its metadata, a retry is refused and an undelivered delivery becomes expired"),
		historyRetention:  fs.Duration("history-retention", "HISTORY_RETENTION", def.HistoryRetention, "how long breaker transitions, endpoint events and class changes are kept"),
		pprof:             fs.Bool("pprof", "PPROF", def.Pprof, "also serve Go's runtime profiles (/debug/pprof/) on the metrics listener, which needs no token"),
		logFormat:         fs.String("log-format", "LOG_FORMAT", "text", "log format: text or json"),
		logLevel:          fs.String("log-level", "LOG_LEVEL", "info", "log level: debug, info, warn or error"),
		secretKeys:        config.BindSecretKeys(fs),
	}
}

// config is the dispatcher's Config the flags give.
func (s *settings) config() dispatcher.Config {
	return dispatcher.Config{
		MetricsAddr:              *s.metricsAddr,
		Workers:                  *s.workers,
		MaxJobs:                  *s.maxJobs,
		RequestTimeout:           *s.requestTimeout,
		RetrySchedule:            *s.retrySchedule,
		MaxPerEndpoint:           *s.maxPerEndpoint,
		MaxPerHost:               *s.maxPerHost,
		ShutdownGrace:            *s.shutdownGrace,
		FetchCooldown:            *s.fetchCooldown,
		FetchPollInterval:        *s.fetchPollInterval,
		CompletedJobRetention:    *s.jobRetention,
		RescueStuckAfter:         *s.rescueAfter,
		LedgerWriteTimeout:       *s.ledgerTimeout,
		MetricsEndpointCap:       *s.metricsEndpoints,
		QueueMetricsInterval:     *s.queueMetricsEvery,
		Breakers:                 *s.breakers,
		BreakerFlushInterval:     *s.breakerFlush,
		FleetHeartbeat:           *s.fleetHeartbeat,
		FleetSuspectShare:        *s.fleetShare,
		ReclassifyInterval:       *s.reclassifyEvery,
		TuneInterval:             *s.tuneEvery,
		TuneWindow:               *s.tuneWindow,
		TuneShadow:               *s.tuneShadow,
		OperationalWebhookURL:    *s.opsWebhookURL,
		OperationalWebhookSecret: *s.opsWebhookSecret,
		AllowPrivateTargets:      *s.allowPrivate,
		PropagateTrace:           *s.propagateTrace,
		PartitionInterval:        *s.partitionInterval,
		Retention:                *s.retention,
		PayloadRetention:         *s.payloadRetention,
		HistoryRetention:         *s.historyRetention,
		Pprof:                    *s.pprof,
		PollOnly:                 s.database.Pooled(),
	}
}

// flagOf names the flag that sets each Config field, so that a field the
// dispatcher refuses is reported as the flag and environment variable the
// operator set.
var flagOf = map[string]string{
	"MetricsAddr":              "metrics-addr",
	"Workers":                  "workers",
	"MaxJobs":                  "max-jobs",
	"RequestTimeout":           "request-timeout",
	"RetrySchedule":            "retry-schedule",
	"MaxPerEndpoint":           "max-per-endpoint",
	"MaxPerHost":               "max-per-host",
	"ShutdownGrace":            "shutdown-grace",
	"FetchCooldown":            "fetch-cooldown",
	"FetchPollInterval":        "fetch-poll-interval",
	"CompletedJobRetention":    "completed-job-retention",
	"RescueStuckAfter":         "rescue-stuck-after",
	"LedgerWriteTimeout":       "ledger-write-timeout",
	"MetricsEndpointCap":       "metrics-endpoint-cap",
	"QueueMetricsInterval":     "queue-metrics-interval",
	"Breakers":                 "breakers",
	"BreakerFlushInterval":     "breaker-flush-interval",
	"FleetHeartbeat":           "fleet-heartbeat",
	"FleetSuspectShare":        "fleet-suspect-share",
	"ReclassifyInterval":       "reclassify-interval",
	"TuneInterval":             "tune-interval",
	"TuneWindow":               "tune-window",
	"TuneShadow":               "tune-shadow",
	"OperationalWebhookURL":    "operational-webhook-url",
	"OperationalWebhookSecret": "operational-webhook-secret",
	"AllowPrivateTargets":      "allow-private-targets",
	"PropagateTrace":           "propagate-trace",
	"PartitionInterval":        "partition-interval",
	"Retention":                "retention",
	"PayloadRetention":         "payload-retention",
	"HistoryRetention":         "history-retention",
	"Pprof":                    "pprof",
	"PollOnly":                 "db-pooled",
}

// asFlagError reports a *dispatcher.ConfigError as a usage error naming the
// flag and its environment twin.
func asFlagError(fs *config.FlagSet, err error) error {
	var ce *dispatcher.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	name, ok := flagOf[ce.Field]
	if !ok {
		return err
	}
	return config.Invalid(name, fs.Names()["--"+name], "%s", ce.Reason)
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
	cfg := set.config()
	if err := cfg.Validate(); err != nil {
		return asFlagError(fs, err)
	}
	if *set.dbMaxConns != 0 && *set.dbMaxConns < 4 {
		return config.Invalid("db-max-conns", "DB_MAX_CONNS", "must be 0 (from the cores) or at least 4")
	}
	needsDirect := "the LISTEN connection, the session locks and the ledger"
	if cmd == "migrate" {
		needsDirect = "migrations"
	}
	if err := set.database.Check(needsDirect); err != nil {
		return err
	}
	keyring, err := set.secretKeys.Keyring()
	if err != nil {
		return err
	}
	logger, err := config.NewLogger(stderr, *set.logFormat, *set.logLevel)
	if err != nil {
		return err
	}
	if *set.trialPoolSize != 0 {
		// Still accepted, so that a deployment setting it keeps starting.
		logger.Warn("flag_deprecated", slog.String("flag", "trial-pool-size"), slog.String("env", "TRIAL_POOL_SIZE"),
			slog.String("reason", "half-open trials hold leases in PostgreSQL and no connections of their own; the setting is ignored"))
	}

	pool, err := store.OpenMigrated(ctx, set.database.PoolConfig(config.DispatcherPoolSize(*set.dbMaxConns), "hookd-dispatcher"),
		cmd == "migrate" || !*set.noMigrate, logger)
	if err != nil {
		return err
	}
	defer pool.Close()
	if cmd == "migrate" {
		fmt.Fprintln(stdout, "migrations are current")
		return nil
	}
	if set.database.Pooled() {
		store.WarnRoleSettings(ctx, pool, logger)
	}
	tracing, err := telemetry.NewTracing(ctx, getenv, "hookd-dispatcher")
	if err != nil {
		return err
	}
	defer shutdownTracing(tracing, logger)
	if err := store.New(pool, logger, store.WithKeyring(keyring)).CheckSecretsAtStart(ctx); err != nil {
		return err
	}
	deps := dispatcher.Deps{Pool: pool, DirectURL: set.database.DirectURL(), Logger: logger, Stdout: stdout, Keyring: keyring, Tracing: tracing}
	if host := *set.pubsubEmulator; host != "" {
		logger.Warn("pubsub_emulator", slog.String("host", host), slog.String("reason", "--pubsub-emulator-host: every pubsub destination publishes to this emulator, without credentials"))
		deps.PubSubOptions = []option.ClientOption{option.WithEndpoint(host), option.WithoutAuthentication(),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))}
	}
	d, err := dispatcher.New(cfg, deps)
	if err != nil {
		return asFlagError(fs, err)
	}
	return d.Run(ctx)
}
