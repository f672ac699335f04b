package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
)

// stage is one scenario's running system: its database (cloned from the
// migrated template), the receiver, the api and the dispatchers, and the
// tracker of what the api accepted.
type stage struct {
	b     *bench
	name  string
	db    string
	oid   uint32
	pool  *pgxpool.Pool // the scenario database, as postgres: the bench's own queries
	clock *clock

	rcv         *receiver
	api         *proc
	moreAPIs    []*proc // further api processes (S9)
	client      *apiClient
	dispatchers []*proc
	started     int // dispatchers started in the stage, stopped ones included: each has a log of its own
	tracker     *tracker
}

// newStage creates a scenario's database and receiver and starts its api.
func (b *bench) newStage(ctx context.Context, name string, respond func(*deliverytest.Request) deliverytest.Response, watch ...string) (_ *stage, err error) {
	s := &stage{b: b, name: name, db: "bench_" + name, clock: newClock()}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.pool, s.oid, err = b.pg.createDatabase(ctx, s.db); err != nil {
		return nil, err
	}
	if s.rcv, err = newReceiver(s.clock, b.secret, respond, watch...); err != nil {
		return nil, err
	}
	b.receivers = append(b.receivers, s.rcv)
	if s.api, err = s.startAPI(ctx, name+"-api", nil); err != nil {
		return nil, err
	}
	s.client = newAPIClient(s.api.match(apiListeningRE)[1], 256)
	s.tracker = newTracker(s.clock, s.rcv, s.client, b.opts.payloadBytes)
	return s, nil
}

// startAPI starts an api process on the stage's database, with env on top
// of the bench's settings.
func (s *stage) startAPI(ctx context.Context, name string, env map[string]string) (*proc, error) {
	b := s.b
	e := map[string]string{
		"DATABASE_URL": b.pg.url(roleAPI, s.db),
		"API_TOKEN":    apiToken,
		"LISTEN_ADDR":  "127.0.0.1:0",
		"METRICS_ADDR": "127.0.0.1:0",
		"NO_MIGRATE":   "true",
		"LOG_LEVEL":    "warn",
		// The receiver is on loopback and the load generator posts as fast
		// as it can: lift the SSRF guard and the rate limit.
		"ALLOW_PRIVATE_TARGETS": "true",
		"RATE_LIMIT":            "0",
		"PPROF":                 fmt.Sprint(b.opts.profile != ""),
	}
	for k, v := range env {
		e[k] = v
	}
	return startProc(ctx, name, b.apiBin, filepath.Join(b.scratch, name+".log"), e, apiListeningRE, apiMetricsRE)
}

// restartAPI replaces the stage's api process by one started with env on
// top of the bench's settings; the load generator then posts to the new
// one. Call it between runs, with no load running.
func (s *stage) restartAPI(ctx context.Context, name string, env map[string]string) error {
	if err := s.stopAPI(); err != nil {
		return err
	}
	p, err := s.startAPI(ctx, name, env)
	if err != nil {
		return err
	}
	s.api = p
	s.client = newAPIClient(p.match(apiListeningRE)[1], 256)
	s.tracker.api = s.client
	return nil
}

// addAPI starts one more api process; the load generator posts to every
// api process in turn.
func (s *stage) addAPI(ctx context.Context) error {
	p, err := s.startAPI(ctx, fmt.Sprintf("%s-api-%d", s.name, len(s.moreAPIs)+2), nil)
	if err != nil {
		return err
	}
	s.moreAPIs = append(s.moreAPIs, p)
	s.tracker.moreAPIs = append(s.tracker.moreAPIs, newAPIClient(p.match(apiListeningRE)[1], 256))
	return nil
}

// startDispatcher starts one more dispatcher with the bench's River
// settings and env on top.
func (s *stage) startDispatcher(ctx context.Context, env map[string]string) (*proc, error) {
	s.started++
	name := fmt.Sprintf("%s-dispatcher-%d", s.name, s.started)
	e := s.b.river.env()
	e["DATABASE_URL"] = s.b.pg.url(roleDispatcher, s.db)
	e["METRICS_ADDR"] = "127.0.0.1:0"
	e["ALLOW_PRIVATE_TARGETS"] = "true"
	e["NO_MIGRATE"] = "true"
	e["SHUTDOWN_GRACE"] = "5s"
	e["PPROF"] = fmt.Sprint(s.b.opts.profile != "")
	for k, v := range env {
		e[k] = v
	}
	p, err := startProc(ctx, name, s.b.dispatcherBin, filepath.Join(s.b.scratch, name+".log"), e, dispatcherMetrics, dispatcherStarted)
	if err != nil {
		return nil, err
	}
	s.dispatchers = append(s.dispatchers, p)
	return p, nil
}

// stopAPI stops the stage's (first) api process, if it runs; restartAPI
// starts another.
func (s *stage) stopAPI() error {
	if s.api == nil {
		return nil
	}
	err := s.api.stop(10 * time.Second)
	name := s.api.name
	s.api = nil
	if err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	return nil
}

// stopDispatchers stops every dispatcher of the stage.
func (s *stage) stopDispatchers() error {
	var errs []error
	for _, d := range s.dispatchers {
		errs = append(errs, d.stop(15*time.Second))
	}
	s.dispatchers = nil
	return errors.Join(errs...)
}

// close stops everything the stage started and drops its database.
func (s *stage) close() {
	_ = s.stopDispatchers()
	for _, p := range s.moreAPIs {
		_ = p.stop(10 * time.Second)
	}
	if s.api != nil {
		_ = s.api.stop(10 * time.Second)
	}
	if s.rcv != nil {
		if err := s.rcv.close(); err != nil {
			s.b.logger.Warn("receiver_close", slog.String("scenario", s.name), slog.String("error", err.Error()))
		}
	}
	if s.pool != nil {
		s.pool.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.b.pg.dropDatabase(ctx, s.db); err != nil {
		s.b.logger.Warn("drop_database", slog.String("scenario", s.name), slog.String("error", err.Error()))
	}
}

// accepted returns the messages the api has accepted in the stage so far.
func (s *stage) accepted() int64 {
	if s.tracker == nil {
		return 0
	}
	var n int64
	for g := range maxGroups {
		n += s.tracker.messages[g].Load()
	}
	return n
}

// commits returns the transactions committed in the stage's database so
// far (pg_stat_database, every session).
func (s *stage) commits(ctx context.Context) (int64, error) {
	var n int64
	if err := s.b.pg.admin.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = $1`, s.db).Scan(&n); err != nil {
		return 0, fmt.Errorf("read pg_stat_database: %w", err)
	}
	return n, nil
}

// alive reports an error when the api or a dispatcher has exited.
func (s *stage) alive() error {
	procs := append(append([]*proc{s.api}, s.moreAPIs...), s.dispatchers...)
	for _, p := range procs {
		if p != nil && p.exited() {
			return fmt.Errorf("%s exited during the scenario: %v\n%s", p.name, p.err, tail(p.logPath, 20))
		}
	}
	return nil
}

// counterNames are the dispatcher counters every probe reports.
var counterNames = []string{"webhook_delivery_total", "webhook_delivery_concurrency_snoozed_total", "breaker_rejected_total"}

// metrics returns the sum of every series of each named metric over the
// stage's dispatchers' /metrics pages.
func (s *stage) metrics(ctx context.Context, names ...string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, d := range s.dispatchers {
		m, err := scrape(ctx, d.match(dispatcherMetrics)[1]+"/metrics", names)
		if err != nil {
			return nil, err
		}
		for k, v := range m {
			out[k] += v
		}
	}
	return out, nil
}
