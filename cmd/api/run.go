package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"golang.org/x/sync/errgroup"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/config"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/telemetry"
)

const synopsis = `usage: api [serve|migrate] [flags]
       api token create|list|revoke [flags]

  serve    serve the REST API (the default); migrates first unless --no-migrate
  migrate  apply hookd's and River's migrations, then exit
  token    manage stored API tokens (api token --help)`

// settings are the api's flags, each with an environment twin.
type settings struct {
	databaseURL     *string
	apiToken        *string
	sessionKey      *string
	listenAddr      *string
	metricsAddr     *string
	maxPayloadBytes *int64
	noMigrate       *bool
	dbMaxConns      *int
	shutdownTimeout *time.Duration
	rateLimit       *int
	rateWindow      *time.Duration
	allowPrivate    *bool
	logFormat       *string
	logLevel        *string
}

// newFlagSet binds every setting. Tests use it to check that deployment
// manifests name real flags.
func newFlagSet(getenv func(string) string, out io.Writer) (*config.FlagSet, *settings) {
	fs := config.New("api", synopsis, getenv, out)
	return fs, &settings{
		databaseURL:     fs.String("database-url", "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "Postgres connection URL"),
		apiToken:        fs.String("api-token", "API_TOKEN", "", "bootstrap admin bearer token for /v1 (audit name \"bootstrap\"); empty accepts stored tokens only (api token create)"),
		sessionKey:      fs.String("session-key", "SESSION_KEY", "", "key signing dashboard session cookies, at least 32 bytes; random per process when empty (sessions then end on restart and are not shared between replicas)"),
		listenAddr:      fs.String("listen-addr", "LISTEN_ADDR", "127.0.0.1:8080", "address the API listens on"),
		metricsAddr:     fs.String("metrics-addr", "METRICS_ADDR", "127.0.0.1:9091", "address serving /metrics, apart from the API's listener (it needs no token)"),
		maxPayloadBytes: fs.Int64("max-payload-bytes", "MAX_PAYLOAD_BYTES", api.DefaultMaxPayloadBytes, "largest accepted message payload in bytes"),
		noMigrate:       fs.Bool("no-migrate", "NO_MIGRATE", false, "do not apply migrations on start"),
		dbMaxConns:      fs.Int("db-max-conns", "DB_MAX_CONNS", 20, "Postgres pool size"),
		shutdownTimeout: fs.Duration("shutdown-timeout", "SHUTDOWN_TIMEOUT", 10*time.Second, "how long in-flight requests get to finish on SIGTERM"),
		rateLimit:       fs.Int("rate-limit", "RATE_LIMIT", api.DefaultRateLimit, "requests per second one API token may make, averaged over --rate-window (requests without a valid token count per client IP); 0 disables"),
		rateWindow:      fs.Duration("rate-window", "RATE_WINDOW", api.DefaultRateWindow, "sliding window of the rate limit: a token may make rate-limit x rate-window requests in any such window, so a longer window allows bigger bursts"),
		allowPrivate:    fs.Bool("allow-private-targets", "ALLOW_PRIVATE_TARGETS", false, "also register endpoints on loopback, private, link-local and other non-public addresses (development and tests)"),
		logFormat:       fs.String("log-format", "LOG_FORMAT", "text", "log format: text or json"),
		logLevel:        fs.String("log-level", "LOG_LEVEL", "info", "log level: debug, info, warn or error"),
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "token" {
		return runToken(ctx, args[1:], getenv, stdout, stderr)
	}
	cmd := "serve"
	if len(args) > 0 && (args[0] == "serve" || args[0] == "migrate") {
		cmd, args = args[0], args[1:]
	}
	fs, set := newFlagSet(getenv, stdout)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(fs.Args()) > 0 {
		return &config.UsageError{Msg: fmt.Sprintf("unexpected argument %q", fs.Args()[0])}
	}
	switch {
	case *set.maxPayloadBytes < 1 || *set.maxPayloadBytes > 64<<20:
		return config.Invalid("max-payload-bytes", "MAX_PAYLOAD_BYTES", "must be from 1 to 67108864")
	case *set.dbMaxConns < 2:
		return config.Invalid("db-max-conns", "DB_MAX_CONNS", "must be at least 2")
	case *set.shutdownTimeout <= 0:
		return config.Invalid("shutdown-timeout", "SHUTDOWN_TIMEOUT", "must be positive")
	case *set.sessionKey != "" && len(*set.sessionKey) < api.MinSessionKeyBytes:
		return config.Invalid("session-key", "SESSION_KEY", "must be at least %d bytes (or empty for a random key)", api.MinSessionKeyBytes)
	case *set.rateLimit < 0:
		return config.Invalid("rate-limit", "RATE_LIMIT", "must not be negative (0 disables the limit)")
	case *set.rateWindow < time.Second || *set.rateWindow > time.Hour:
		return config.Invalid("rate-window", "RATE_WINDOW", "must be from 1s to 1h")
	}
	logger, err := config.NewLogger(stderr, *set.logFormat, *set.logLevel)
	if err != nil {
		return err
	}

	pool, err := store.OpenPool(ctx, store.PoolConfig{URL: *set.databaseURL, MaxConns: int32(*set.dbMaxConns), ApplicationName: "hookd-api"})
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

	if *set.apiToken == "" {
		logger.Warn("no_bootstrap_token", slog.String("reason", "API_TOKEN is empty: only stored tokens (api token create) are accepted"))
	}
	if *set.allowPrivate {
		logger.Warn("ssrf_guard_off", slog.String("reason", "--allow-private-targets: endpoints may point at loopback and private addresses"))
	}
	riverClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: logger})
	if err != nil {
		return fmt.Errorf("river client: %w", err)
	}
	tracing, err := telemetry.NewTracing(ctx, getenv, "hookd-api")
	if err != nil {
		return err
	}
	defer shutdownTracing(tracing, logger)
	st := store.New(pool, logger)
	handler := api.NewServer(api.Deps{
		Tracing:             tracing,
		Store:               st,
		Enqueuer:            &delivery.Enqueuer{Client: riverClient},
		Logger:              logger,
		Token:               *set.apiToken,
		SessionKey:          []byte(*set.sessionKey),
		RateLimit:           *set.rateLimit,
		RateWindow:          *set.rateWindow,
		AllowPrivateTargets: *set.allowPrivate,
		MaxPayloadBytes:     *set.maxPayloadBytes,
		Now:                 time.Now,
		Rand:                rand.Reader,
		Ready: func(ctx context.Context) error {
			ok, err := store.MigrationsCurrent(ctx, pool)
			if err != nil {
				return err
			}
			if !ok {
				return errors.New("pending migrations")
			}
			return nil
		},
	})

	if *set.sessionKey == "" {
		logger.Info("dashboard_session_key_random", slog.String("effect", "dashboard sessions end on restart and are not shared between replicas; set SESSION_KEY to keep them"))
	}

	// /metrics has a listener of its own: it needs no token, and the
	// API's listener is the one exposed to clients.
	reg := prometheus.NewRegistry()
	handler = registerMetrics(reg).Wrap(handler)
	metricsMux := http.NewServeMux()
	metricsMux.Handle("GET /metrics", telemetry.Handler(reg))
	metricsLn, err := net.Listen("tcp", *set.metricsAddr)
	if err != nil {
		return fmt.Errorf("listen for metrics: %w", err)
	}
	defer metricsLn.Close()
	metricsSrv := &http.Server{Handler: metricsMux, ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(stdout, "api metrics on http://%s/metrics\n", metricsLn.Addr())

	ln, err := net.Listen("tcp", *set.listenAddr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	logger.Info("api_listening", slog.String("addr", ln.Addr().String()))
	fmt.Fprintf(stdout, "api listening on http://%s\n", ln.Addr())

	// Both servers stop together: when ctx ends (a signal) or either fails.
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		<-gctx.Done()
		logger.Info("api_stopping")
		return nil
	})
	g.Go(func() error { return telemetry.RunServer(gctx, srv, ln, *set.shutdownTimeout) })
	g.Go(func() error { return telemetry.RunServer(gctx, metricsSrv, metricsLn, *set.shutdownTimeout) })
	err = g.Wait()
	logger.Info("api_stopped")
	return err
}

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

// registerMetrics registers every series the api exports on reg (the
// generated table in docs/observability.md lists them).
func registerMetrics(reg prometheus.Registerer) *telemetry.HTTPMetrics {
	telemetry.RegisterRuntime(reg)
	return telemetry.NewHTTPMetrics(reg)
}
