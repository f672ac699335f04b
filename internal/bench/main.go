// Command bench is hookd's benchmark suite. It measures the dispatcher
// against the ceiling of the queue it stands on, bare River on the same
// machine in the same run, and publishes the figures.
//
// It starts a private PostgreSQL cluster (initdb into a temporary
// directory, its own port on 127.0.0.1, pg_stat_statements preloaded),
// builds the api and dispatcher binaries and starts them against a fresh
// database per scenario, points every endpoint at a signature-verifying
// receiver in this process, runs each scenario (S0 to S6, see
// docs/benchmarks.md), prints a table, and writes the results as JSON. The
// cluster is stopped and removed at the end, also on an error or an
// interrupt.
//
//	go run ./internal/bench           # the full suite (make bench), under 10 minutes; writes bench-results.json
//	go run ./internal/bench -smoke    # every scenario in a tiny form (make bench-smoke), under a minute
//
// It exits non-zero only when a scenario fails to run; a missed target is
// reported as "missed".
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hookd/hookd/internal/delivery"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the command line.
type options struct {
	smoke        bool
	out          string
	only         []string
	pgBin        string
	payloadBytes int
	print        string
	args         []string
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := options{args: args}
	var only string
	fs.BoolVar(&o.smoke, "smoke", false, "run every scenario in a tiny form (CI); prints the tables and writes no results unless -out is given")
	fs.StringVar(&o.out, "out", "", "where to write the JSON results (default: bench-results.json at the module root; with -smoke none)")
	fs.StringVar(&only, "only", "", "comma-separated scenarios to run (s0,s1,s1rate,s2,s3,s4,s5,s6); default all")
	fs.StringVar(&o.print, "print", "", "print the tables of a results file (such as bench-results.json) and exit; runs nothing")
	fs.IntVar(&o.payloadBytes, "payload-bytes", defaultPayloadSize, "size of every message payload (the scenarios' targets are for 1 KB; other sizes are for experiments)")
	fs.StringVar(&o.pgBin, "pg-bin", os.Getenv("PG_BIN"), "directory of PostgreSQL's server programs (default: the newest /usr/lib/postgresql/*/bin)")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.payloadBytes < 32 || o.payloadBytes > 1<<20 {
		return options{}, errors.New("-payload-bytes: must be from 32 to 1048576")
	}
	if only != "" {
		for _, s := range strings.Split(only, ",") {
			s = strings.TrimSpace(s)
			if !slices.ContainsFunc(scenarios, func(sc scenario) bool { return sc.name == s }) {
				return options{}, fmt.Errorf("-only: unknown scenario %q", s)
			}
			o.only = append(o.only, s)
		}
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts, err := parseOptions(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "bench:", err)
		return 2
	}
	if opts.print != "" {
		res, err := readResults(opts.print)
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		printReport(stdout, res)
		return 0
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	started := time.Now()
	b, err := newBench(ctx, opts, logger)
	if err != nil {
		logger.Error("bench_setup", slog.String("error", err.Error()))
		return 1
	}
	defer b.close()

	res := b.runAll(ctx)
	res.DurationS = round1(time.Since(started).Seconds())
	evaluate(res)
	printReport(stdout, res)

	if ctx.Err() != nil {
		logger.Error("bench_interrupted", slog.String("note", "no results written"))
		return 1
	}
	out := opts.out
	if out == "" && !opts.smoke {
		out = filepath.Join(b.root, "bench-results.json")
	}
	if out == "" {
		fmt.Fprintf(stdout, "\nsmoke run: %.0fs; no results file (give -out to write one)\n", res.DurationS)
	} else {
		if err := writeResults(out, res); err != nil {
			logger.Error("bench_results", slog.String("error", err.Error()))
			return 1
		}
		fmt.Fprintf(stdout, "\nresults: %s (%.0fs)\n", out, res.DurationS)
	}
	for _, s := range res.Scenarios {
		if s.Error != "" {
			return 1
		}
	}
	return 0
}

func readResults(path string) (*results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read results: %w", err)
	}
	var res results
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("decode results: %w", err)
	}
	return &res, nil
}

func writeResults(path string, res *results) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return nil
}

// riverSettings are the River client settings S0's bare client shares with
// every dispatcher the bench starts (passed to it through their
// environment twins), so S0 is the ceiling of exactly that configuration.
type riverSettings struct {
	Workers           int    `json:"workers"`
	DBMaxConns        int    `json:"db_max_conns"`
	FetchCooldown     string `json:"fetch_cooldown"`
	FetchPollInterval string `json:"fetch_poll_interval"`
	JobRetention      string `json:"completed_job_retention"`
}

// defaultRiver is the dispatcher's defaults (cmd/dispatcher/run.go).
var defaultRiver = riverSettings{Workers: 100, DBMaxConns: 30, FetchCooldown: "5ms", FetchPollInterval: "250ms", JobRetention: "1h"}

// env returns the settings as dispatcher environment variables.
func (r riverSettings) env() map[string]string {
	return map[string]string{
		"WORKERS":                 fmt.Sprint(r.Workers),
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

	fanTenants   int // S1, S2, S3, S4: tenants x 10 endpoints
	warmup       time.Duration
	s1Measure    time.Duration
	rateTenants  int
	rate         float64 // S1 latency run: messages/s offered
	rateDuration time.Duration
	s2Measure    time.Duration
	s3Measure    time.Duration
	s3HotRate    float64
	s4Measure    time.Duration
	s5Healthy    time.Duration
	s5Fail       time.Duration
	s5Recover    time.Duration
	s6Tenants    int
	s6Measure    time.Duration
}

var fullPlan = plan{
	drain: 15 * time.Second, maxOutstanding: 1000, posters: 16,
	s0Jobs:     200_000,
	fanTenants: 100, warmup: 3 * time.Second, s1Measure: 15 * time.Second,
	rateTenants: 1000, rate: 2000, rateDuration: 2 * time.Minute,
	s2Measure: 10 * time.Second,
	s3Measure: 2 * time.Minute, s3HotRate: 400,
	s4Measure: 20 * time.Second,
	s5Healthy: 3 * time.Second, s5Fail: 8 * time.Second, s5Recover: 8 * time.Second,
	s6Tenants: 1000, s6Measure: 35 * time.Second,
}

var smokePlan = plan{
	drain: 5 * time.Second, maxOutstanding: 500, posters: 8,
	s0Jobs:     10_000,
	fanTenants: 10, warmup: 400 * time.Millisecond, s1Measure: 1500 * time.Millisecond,
	rateTenants: 100, rate: 300, rateDuration: 2 * time.Second,
	s2Measure: time.Second,
	s3Measure: 2 * time.Second, s3HotRate: 100,
	s4Measure: 2500 * time.Millisecond,
	s5Healthy: 500 * time.Millisecond, s5Fail: 2500 * time.Millisecond, s5Recover: 2500 * time.Millisecond,
	s6Tenants: 50, s6Measure: 2 * time.Second,
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
}

// newBench finds the module root, builds the binaries and starts the
// private cluster.
func newBench(ctx context.Context, opts options, logger *slog.Logger) (_ *bench, err error) {
	b := &bench{opts: opts, plan: fullPlan, river: defaultRiver, logger: logger}
	if opts.smoke {
		b.plan = smokePlan
	}
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
	pgBin := opts.pgBin
	if pgBin == "" {
		if pgBin, err = findPGBin(); err != nil {
			return nil, err
		}
	}
	if b.pg, err = startCluster(ctx, pgBin, b.scratch, logger); err != nil {
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

func numCPU() int { return runtime.NumCPU() }
