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
	"github.com/hookd/hookd/internal/retention"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/telemetry"
)

const synopsis = `usage: api [serve|migrate] [flags]
       api token create|list|revoke [flags]
       api secrets rotate-key [flags]

  serve    serve the REST API (the default); migrates first unless --no-migrate
  migrate  apply hookd's and River's migrations, then exit
  token    manage stored API tokens (api token --help)
  secrets  reseal endpoint signing secrets under a new key (api secrets --help)`

// settings are the api's flags, each with an environment twin.
type settings struct {
	database        *config.Database
	apiToken        *string
	sessionKey      *string
	replicas        *int
	secretKeys      *config.SecretKeys
	frameAncestors  *string
	listenAddr      *string
	metricsAddr     *string
	maxPayloadBytes *int64
	noMigrate       *bool
	dbMaxConns      *int
	shutdownTimeout *time.Duration
	rateLimit       *int
	rateWindow      *time.Duration
	trustedProxies  *string
	allowPrivate    *bool
	pprof           *bool
	maxRecover      *time.Duration
	retention       *time.Duration
	riverUI         *bool
	strictTypes     *bool
	notifyInterval  *time.Duration
	logFormat       *string
	logLevel        *string
}

// newFlagSet binds every setting. Tests use it to check that deployment
// manifests name real flags.
func newFlagSet(getenv func(string) string, out io.Writer) (*config.FlagSet, *settings) {
	fs := config.New("api", synopsis, getenv, out)
	return fs, &settings{
		database:        config.BindDatabase(fs, "", "migrations, which hold a session lock (required with --db-pooled); the api runs no tuning pass, which the dispatchers' tuning leader does"),
		apiToken:        fs.String("api-token", "API_TOKEN", "", "bootstrap admin bearer token for /v1 (audit name \"bootstrap\"); empty accepts stored tokens only (api token create)"),
		sessionKey:      fs.String("session-key", "SESSION_KEY", "", "secret the keys of dashboard session cookies and of CSRF tokens (the dashboard's and the portal's) are derived from, at least 32 bytes; when empty they are derived from --secret-key, and with neither drawn at random per process (sessions then end on restart and are not shared between replicas)"),
		replicas:        fs.Int("replicas", "REPLICAS", 1, "how many api processes serve this deployment (its replicas behind one address); above 1, --session-key or --secret-key is required, so that each replica verifies the session cookies and CSRF tokens the others issued"),
		secretKeys:      config.BindSecretKeys(fs),
		frameAncestors:  fs.String("portal-frame-ancestors", "PORTAL_FRAME_ANCESTORS", api.DefaultPortalFrameAncestors, "CSP frame-ancestors of the tenant portal: 'none', or the space-separated origins (and 'self') allowed to embed it in an iframe; anything else makes its cookie SameSite=None; Secure, so embedding needs https"),
		listenAddr:      fs.String("listen-addr", "LISTEN_ADDR", "127.0.0.1:8080", "address the API listens on"),
		metricsAddr:     fs.String("metrics-addr", "METRICS_ADDR", "127.0.0.1:9091", "address serving /metrics, apart from the API's listener (it needs no token)"),
		maxPayloadBytes: fs.Int64("max-payload-bytes", "MAX_PAYLOAD_BYTES", api.DefaultMaxPayloadBytes, "largest accepted message payload in bytes"),
		noMigrate:       fs.Bool("no-migrate", "NO_MIGRATE", false, "do not apply migrations on start"),
		dbMaxConns:      fs.Int("db-max-conns", "DB_MAX_CONNS", 0, "Postgres pool size; 0: 2 per core (GOMAXPROCS), at least 8, at most 20"),
		shutdownTimeout: fs.Duration("shutdown-timeout", "SHUTDOWN_TIMEOUT", 10*time.Second, "how long in-flight requests get to finish on SIGTERM"),
		rateLimit:       fs.Int("rate-limit", "RATE_LIMIT", api.DefaultRateLimit, "requests per second one API token may make, averaged over --rate-window (requests without a valid token count per client IP); 0 disables"),
		rateWindow:      fs.Duration("rate-window", "RATE_WINDOW", api.DefaultRateWindow, "sliding window of the rate limit: a token may make rate-limit x rate-window requests in any such window, so a longer window allows bigger bursts"),
		trustedProxies:  fs.String("trusted-proxies", "TRUSTED_PROXIES", "", "comma-separated CIDR prefixes of reverse proxies: a request without a valid token from one of them is rate-limited by the right-most address of X-Forwarded-For that is not a trusted proxy; empty trusts none (the peer is the client)"),
		allowPrivate:    fs.Bool("allow-private-targets", "ALLOW_PRIVATE_TARGETS", false, "also register endpoints on loopback, private, link-local and other non-public addresses (development and tests)"),
		pprof:           fs.Bool("pprof", "PPROF", false, "also serve Go's runtime profiles (/debug/pprof/) on the metrics listener, which needs no token"),
		maxRecover:      fs.Duration("max-recover-window", "MAX_RECOVER_WINDOW", api.DefaultMaxRecoverWindow, "how far back POST /v1/endpoints/{id}/recover may reach: its since may be at most this long ago"),
		retention:       fs.Duration("retention", "RETENTION", retention.DefaultRetention, "the dispatchers' --retention (give both processes the same RETENTION): an endpoint's retry_schedule must add up to no more"),
		riverUI:         fs.Bool("riverui", "RIVERUI", false, "serve River's own UI (riverqueue.com/riverui) under /riverui, to admin dashboard sessions only; off answers 404 there"),
		strictTypes:     fs.Bool("strict-event-types", "STRICT_EVENT_TYPES", false, "refuse (422) messages whose event type is not registered in the catalogue (/v1/event-types) or is archived, and payloads that do not match their type's JSON Schema"),
		notifyInterval:  fs.Duration("queue-notify-interval", "QUEUE_NOTIFY_INTERVAL", delivery.DefaultNotifyInterval, "least time between the notifications that tell dispatchers new deliveries are queued (one per interval at most, sent in a message's transaction); a dispatcher finds jobs queued meanwhile at the next notification or its --fetch-poll-interval, so this bounds the wait before a quiet queue's delivery starts"),
		logFormat:       fs.String("log-format", "LOG_FORMAT", "text", "log format: text or json"),
		logLevel:        fs.String("log-level", "LOG_LEVEL", "info", "log level: debug, info, warn or error"),
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "token" {
		return runToken(ctx, args[1:], getenv, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "secrets" {
		return runSecrets(ctx, args[1:], getenv, stdout, stderr)
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
	case *set.dbMaxConns != 0 && *set.dbMaxConns < 2:
		return config.Invalid("db-max-conns", "DB_MAX_CONNS", "must be 0 (from the cores) or at least 2")
	case *set.shutdownTimeout <= 0:
		return config.Invalid("shutdown-timeout", "SHUTDOWN_TIMEOUT", "must be positive")
	case *set.sessionKey != "" && len(*set.sessionKey) < api.MinSessionKeyBytes:
		return config.Invalid("session-key", "SESSION_KEY", "must be at least %d bytes (or empty for a random key)", api.MinSessionKeyBytes)
	case *set.replicas < 1:
		return config.Invalid("replicas", "REPLICAS", "must be at least 1")
	case api.ValidateFrameAncestors(*set.frameAncestors) != nil:
		return config.Invalid("portal-frame-ancestors", "PORTAL_FRAME_ANCESTORS", "%v", api.ValidateFrameAncestors(*set.frameAncestors))
	case *set.rateLimit < 0:
		return config.Invalid("rate-limit", "RATE_LIMIT", "must not be negative (0 disables the limit)")
	case *set.rateWindow < time.Second || *set.rateWindow > time.Hour:
		return config.Invalid("rate-window", "RATE_WINDOW", "must be from 1s to 1h")
	case *set.notifyInterval < time.Millisecond || *set.notifyInterval > time.Minute:
		return config.Invalid("queue-notify-interval", "QUEUE_NOTIFY_INTERVAL", "must be from 1ms to 1m, got %s", *set.notifyInterval)
	case *set.maxRecover <= 0:
		return config.Invalid("max-recover-window", "MAX_RECOVER_WINDOW", "must be positive")
	case *set.retention <= 0:
		return config.Invalid("retention", "RETENTION", "must be positive")
	}
	migrate := cmd == "migrate" || !*set.noMigrate
	if err := set.database.Check("migrations"); err != nil {
		return err
	}
	trusted, err := api.ParseTrustedProxies(*set.trustedProxies)
	if err != nil {
		return config.Invalid("trusted-proxies", "TRUSTED_PROXIES", "%v", err)
	}
	keyring, err := set.secretKeys.Keyring()
	if err != nil {
		return err
	}
	sessionSecret, sessionSource, err := sessionSecret(set)
	if err != nil {
		return err
	}
	logger, err := config.NewLogger(stderr, *set.logFormat, *set.logLevel)
	if err != nil {
		return err
	}

	pool, err := store.OpenMigrated(ctx, set.database.PoolConfig(config.APIPoolSize(*set.dbMaxConns), "hookd-api"), migrate, logger)
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

	if *set.apiToken == "" {
		logger.Warn("no_bootstrap_token", slog.String("reason", "API_TOKEN is empty: only stored tokens (api token create) are accepted"))
	}
	if *set.allowPrivate {
		logger.Warn("ssrf_guard_off", slog.String("reason", "--allow-private-targets: endpoints may point at loopback and private addresses"))
	}
	// An insert-only client: FetchCooldown only spaces its insert
	// notifications (River's default, 100 ms, made a quiet queue's
	// deliveries wait up to that long for a dispatcher's fetch).
	riverClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: logger,
		FetchCooldown: *set.notifyInterval, FetchPollInterval: max(*set.notifyInterval, time.Second)})
	if err != nil {
		return fmt.Errorf("river client: %w", err)
	}
	tracing, err := telemetry.NewTracing(ctx, getenv, "hookd-api")
	if err != nil {
		return err
	}
	defer shutdownTracing(tracing, logger)
	enq := &delivery.Enqueuer{Client: riverClient}
	// The api hears no endpoint notifications: the endpoint writes that
	// emit operational events read the operational endpoints in their
	// transaction (CacheTTL 0).
	st := store.New(pool, logger, store.WithKeyring(keyring), store.WithOperationalEvents(store.OperationalEventsConfig{Enqueuer: enq}))
	if err := st.CheckSecretsAtStart(ctx); err != nil {
		return err
	}
	// River's UI runs background queries until the servers stop.
	uiCtx, stopUI := context.WithCancel(ctx)
	defer stopUI()
	var riverUI http.Handler
	if *set.riverUI {
		if riverUI, err = api.NewRiverUI(uiCtx, riverClient, logger); err != nil {
			return err
		}
		logger.Info("riverui_enabled", slog.String("path", api.RiverUIPrefix))
	}
	handler := api.NewServer(api.Deps{
		Tracing:              tracing,
		Store:                st,
		Enqueuer:             enq,
		Logger:               logger,
		Token:                *set.apiToken,
		SessionKey:           sessionSecret,
		PortalFrameAncestors: *set.frameAncestors,
		RateLimit:            *set.rateLimit,
		RateWindow:           *set.rateWindow,
		TrustedProxies:       trusted,
		AllowPrivateTargets:  *set.allowPrivate,
		MaxPayloadBytes:      *set.maxPayloadBytes,
		MaxRecoverWindow:     *set.maxRecover,
		Retention:            *set.retention,
		RiverUI:              riverUI,
		StrictEventTypes:     *set.strictTypes,
		Now:                  time.Now,
		Rand:                 rand.Reader,
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

	if sessionSource == "" {
		logger.Warn("session_key_random", slog.String("effect", "neither SESSION_KEY nor SECRET_KEY is set: the keys of dashboard sessions and CSRF tokens are this process's own, so sessions end on restart and a dashboard or portal change fails on any other replica; set SESSION_KEY (or SECRET_KEY) on every replica"))
	} else {
		logger.Info("session_key", slog.String("derived_from", sessionSource))
	}

	// /metrics has a listener of its own: it needs no token, and the
	// API's listener is the one exposed to clients.
	reg := prometheus.NewRegistry()
	handler = registerMetrics(reg).Wrap(handler)
	metricsMux := http.NewServeMux()
	metricsMux.Handle("GET /metrics", telemetry.Handler(reg))
	if *set.pprof {
		telemetry.RegisterPprof(metricsMux)
	}
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

// sessionSecret is the secret the api derives its session and CSRF keys
// from, and the variable it came from: SESSION_KEY, else SECRET_KEY (the
// api's HKDF labels keep the derived keys apart from the sealing key),
// else none, for a random one per process, which more than one replica
// cannot share.
func sessionSecret(set *settings) ([]byte, string, error) {
	if *set.sessionKey != "" {
		return []byte(*set.sessionKey), "SESSION_KEY", nil
	}
	key, err := set.secretKeys.Primary()
	if err != nil {
		return nil, "", err
	}
	if key != nil {
		return key, "SECRET_KEY", nil
	}
	if *set.replicas > 1 {
		return nil, "", config.Invalid("replicas", "REPLICAS", "is %d, which needs --session-key (SESSION_KEY) or --secret-key (SECRET_KEY): "+
			"each replica would otherwise draw keys of its own, and a dashboard session or portal change made on one would fail on the others", *set.replicas)
	}
	return nil, "", nil
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
