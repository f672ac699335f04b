package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hookd/hookd/internal/config"
	"github.com/hookd/hookd/internal/delivery"
)

// riverSettings are the River client settings S0's bare client shares with
// every dispatcher the bench starts (passed to it through their
// environment twins), so S0 is the ceiling of exactly that configuration.
type riverSettings struct {
	Workers           int    `json:"workers"`
	MaxJobs           int    `json:"max_jobs"`
	DBMaxConns        int    `json:"db_max_conns"`
	FetchCooldown     string `json:"fetch_cooldown"`
	FetchPollInterval string `json:"fetch_poll_interval"`
	JobRetention      string `json:"completed_job_retention"`
}

// defaultRiver is the dispatcher's defaults (dispatcher.DefaultConfig and
// cmd/dispatcher's --db-max-conns, from this machine's cores; MAX_JOBS is
// dispatcher.JobsPerWorker x WORKERS).
var defaultRiver = riverSettings{Workers: 100, MaxJobs: 300, DBMaxConns: config.DispatcherPoolSize(0), FetchCooldown: "5ms", FetchPollInterval: "250ms", JobRetention: "1h"}

// env returns the settings as dispatcher environment variables.
func (r riverSettings) env() map[string]string {
	return map[string]string{
		"WORKERS":                 fmt.Sprint(r.Workers),
		"MAX_JOBS":                fmt.Sprint(r.MaxJobs),
		"DB_MAX_CONNS":            fmt.Sprint(r.DBMaxConns),
		"FETCH_COOLDOWN":          r.FetchCooldown,
		"FETCH_POLL_INTERVAL":     r.FetchPollInterval,
		"COMPLETED_JOB_RETENTION": r.JobRetention,
	}
}

// plan sizes the scenarios: the full suite or the smoke form.
type plan struct {
	drain          time.Duration // longest wait for a backlog to drain
	maxOutstanding int64         // closed-loop bound on deliveries accepted and not yet delivered
	posters        int           // closed-loop concurrent posts

	s0Jobs int

	fanTenants      int // S1, S2, S3, S4: tenants x 10 endpoints
	warmup          time.Duration
	s1Measure       time.Duration
	rateTenants     int
	rate            float64 // S1 latency run: messages/s offered
	rateDuration    time.Duration
	lowRate         float64 // S1 latency run's first stage: messages/s offered
	lowRateDur      time.Duration
	s2Measure       time.Duration
	s2sPairs        int           // S2s: off/on pairs
	traceMeasure    time.Duration // S1 trace: each run's measured time
	tracePairs      int           // S1 trace: off/on pairs
	s3Measure       time.Duration
	s3HotRate       float64
	s4Measure       time.Duration
	s4fifoMeasure   time.Duration // S4fifo: each run's measured time
	s1filterMeasure time.Duration // S1filter: each run's measured time
	s5Healthy       time.Duration
	s5Fail          time.Duration
	s5Recover       time.Duration
	s6Tenants       int
	s6Measure       time.Duration
	s11Endpoints    int
	s11Rate         float64
	s11Measure      time.Duration
	s12Messages     int     // S12: messages per destination type's drain
	s7Rate          float64 // messages/s when S1 has not run first
	s7Duration      time.Duration
	s7Retention     time.Duration
	s7Interval      time.Duration
	s8Attempts      int // attempts of history: a message per 40 (10 deliveries of 4 attempts)
	s8AttemptReads  int
	s9Measure       time.Duration
	s9Rounds        int
	// s9OtherCores is how many cores the rest of the machine may use in
	// an S9 window before its round is set aside (runScaleRounds).
	s9OtherCores float64
	// S13: the offered rate, how long the transaction is held, and how
	// long the load goes on after it.
	s13Rate           float64
	s13Hold, s13After time.Duration
	// S10: the maintainer's downtime in one-minute intervals, the
	// messages seeded into each, the load before its restart and after
	// its catch-up, how long the catch-up may take, and the messages/s
	// offered when S1 has not run first.
	s10Intervals      int
	s10PerInterval    int
	s10Before         time.Duration
	s10After          time.Duration
	s10CatchUpTimeout time.Duration
	s10Rate           float64
	soakRate          float64
	soakDuration      time.Duration
	soakSample        time.Duration
	soakRetention     time.Duration
}

var fullPlan = plan{
	drain: 15 * time.Second, maxOutstanding: 1000, posters: 16,
	s0Jobs:     200_000,
	fanTenants: 100, warmup: 3 * time.Second, s1Measure: 15 * time.Second,
	rateTenants: 1000, rate: 2000, rateDuration: 2 * time.Minute, lowRate: 1000, lowRateDur: time.Minute,
	s2Measure: 10 * time.Second, s2sPairs: 4,
	traceMeasure: 10 * time.Second, tracePairs: 3,
	s3Measure: 2 * time.Minute, s3HotRate: 400,
	s4Measure: 20 * time.Second, s4fifoMeasure: 15 * time.Second, s1filterMeasure: 10 * time.Second,
	s5Healthy: 3 * time.Second, s5Fail: 8 * time.Second, s5Recover: 8 * time.Second,
	s6Tenants: 1000, s6Measure: 35 * time.Second,
	s11Endpoints: 10_000, s11Rate: 0.2, s11Measure: 30 * time.Second, s12Messages: 2_500,
	s7Rate: s7FallbackRate, s7Duration: 12 * time.Minute, s7Retention: 3 * time.Minute, s7Interval: time.Minute,
	s8Attempts: 100_000_000, s8AttemptReads: 300,
	soakRate: 20, soakDuration: 30 * time.Minute, soakSample: time.Minute, soakRetention: 5 * time.Minute,
	s9Measure: 10 * time.Second, s9Rounds: 5, s9OtherCores: scaleOtherCores,
	s13Rate: 1000, s13Hold: 10 * time.Minute, s13After: time.Minute,
	s10Intervals: 200, s10PerInterval: 250, s10Before: 20 * time.Second, s10After: 20 * time.Second, s10CatchUpTimeout: 3 * time.Minute, s10Rate: s7FallbackRate,
}

var smokePlan = plan{
	drain: 5 * time.Second, maxOutstanding: 500, posters: 8,
	s0Jobs:     10_000,
	fanTenants: 10, warmup: 400 * time.Millisecond, s1Measure: 1500 * time.Millisecond,
	rateTenants: 100, rate: 300, rateDuration: 2 * time.Second, lowRate: 150, lowRateDur: time.Second,
	s2Measure: time.Second, s2sPairs: 1,
	traceMeasure: time.Second, tracePairs: 1,
	s3Measure: 2 * time.Second, s3HotRate: 100,
	s4Measure: 2500 * time.Millisecond, s4fifoMeasure: 1500 * time.Millisecond, s1filterMeasure: time.Second,
	s5Healthy: 500 * time.Millisecond, s5Fail: 2500 * time.Millisecond, s5Recover: 2500 * time.Millisecond,
	s6Tenants: 50, s6Measure: 2 * time.Second,
	s11Endpoints: 300, s11Rate: 2, s11Measure: 1500 * time.Millisecond, s12Messages: 50,
	s7Rate: 20, s7Duration: 3 * time.Second, s7Retention: 2 * time.Minute, s7Interval: time.Minute,
	s8Attempts: 12_000, s8AttemptReads: 20,
	soakRate: 20, soakDuration: 4 * time.Second, soakSample: time.Second, soakRetention: 5 * time.Minute,
	// The smoke run checks that S9 runs, not its figures, and runs in
	// make test beside other work: no round is set aside.
	s9Measure: time.Second, s9Rounds: 1, s9OtherCores: math.Inf(1),
	s13Rate: 150, s13Hold: 3 * time.Second, s13After: 2 * time.Second,
	s10Intervals: 20, s10PerInterval: 60, s10Before: 2 * time.Second, s10After: 2 * time.Second, s10CatchUpTimeout: 40 * time.Second, s10Rate: 20,
}

// withSoak returns the plan with the soak's duration and rate, and S8's
// attempts of history, from the command line where given.
func (p plan) withSoak(o options) plan {
	if o.soakDuration > 0 {
		p.soakDuration = o.soakDuration
	}
	if o.soakRate > 0 {
		p.soakRate = o.soakRate
	}
	if o.monthAttempts > 0 {
		p.s8Attempts = o.monthAttempts
	}
	return p
}

// bench is one run of the suite.
type bench struct {
	opts    options
	plan    plan
	river   riverSettings
	logger  *slog.Logger
	root    string // module root
	scratch string // binaries, logs, the cluster
	secret  string // every endpoint's signing secret

	pg                    *cluster
	apiBin, dispatcherBin string

	// halfRate is S1's half-load message rate, which S4 offers too.
	halfRate float64
	// receivers are the receivers of the scenario running: its duplicates
	// are theirs.
	receivers []*receiver
}

// newBench finds the module root, builds the binaries and starts the
// private cluster.
func newBench(ctx context.Context, opts options, logger *slog.Logger) (_ *bench, err error) {
	b := &bench{opts: opts, plan: fullPlan, river: defaultRiver, logger: logger}
	if opts.maxJobs > 0 {
		b.river.MaxJobs = opts.maxJobs
	}
	if opts.dbMaxConns > 0 {
		b.river.DBMaxConns = opts.dbMaxConns
	}
	if opts.smoke {
		b.plan = smokePlan
	}
	b.plan = b.plan.withSoak(opts)
	if b.root, err = moduleRoot(); err != nil {
		return nil, err
	}
	if b.scratch, err = os.MkdirTemp("", "hookd-bench-"); err != nil {
		return nil, fmt.Errorf("create scratch dir: %w", err)
	}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	if b.secret, err = delivery.GenerateSecret(rand.Reader); err != nil {
		return nil, fmt.Errorf("generate secret: %w", err)
	}
	logger.Info("bench_build", slog.String("dir", b.scratch))
	if b.apiBin, b.dispatcherBin, err = buildBinaries(ctx, b.root, filepath.Join(b.scratch, "bin")); err != nil {
		return nil, err
	}
	var extra []string
	if slices.Contains(opts.only, "s8") {
		extra = slices.Clone(s8Settings)
	}
	extra = append(extra, opts.pgSettings...)
	if b.pg, err = startCluster(ctx, opts.pgBin, logger, extra...); err != nil {
		return nil, err
	}
	return b, nil
}

// close stops the cluster and removes the scratch directory.
func (b *bench) close() {
	if b.pg != nil {
		b.pg.stop()
		b.pg = nil
	}
	if b.scratch != "" {
		_ = os.RemoveAll(b.scratch)
		b.scratch = ""
	}
}

// moduleRoot returns the directory of go.mod, from the working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find module root: no go.mod above the working directory")
		}
		dir = parent
	}
}
