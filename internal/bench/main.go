// Command bench is hookd's benchmark suite. It measures the dispatcher
// against the ceiling of the queue it stands on, bare River on the same
// machine in the same run, and publishes the figures.
//
// It starts a private PostgreSQL cluster (initdb into a temporary
// directory, its own port on 127.0.0.1, pg_stat_statements preloaded),
// builds the api and dispatcher binaries and starts them against a fresh
// database per scenario, points every endpoint at a signature-verifying
// receiver in this process, runs each scenario (S0 to S10, see
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
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the command line.
type options struct {
	smoke bool
	// dbMaxConns overrides the dispatchers' pool size (0: their default).
	dbMaxConns int
	// maxJobs sets the dispatchers' MAX_JOBS (0: their default).
	maxJobs int
	// busyOK runs a full bench on a busy machine (machineBusy).
	busyOK       bool
	out          string
	only         []string
	pgBin        string
	payloadBytes int
	print        string
	profile      string
	// soakDuration and soakRate override the soak's 30 minutes and 20
	// messages/s when set (shorter runs to diagnose one series).
	soakDuration time.Duration
	soakRate     float64
	// monthAttempts overrides S8's 100 million attempts of history when
	// set (a smaller month to try the scenario first).
	monthAttempts int
	// pgSettings are extra postgresql.conf lines for the bench cluster
	// (experiments: what a server setting changes).
	pgSettings []string
	args       []string
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := options{args: args}
	var only string
	fs.BoolVar(&o.smoke, "smoke", false, "run every scenario in a tiny form (CI); prints the tables and writes no results unless -out is given")
	fs.IntVar(&o.dbMaxConns, "db-max-conns", 0, "the dispatchers' DB_MAX_CONNS (default: theirs, from the cores; for experiments)")
	fs.IntVar(&o.maxJobs, "max-jobs", 0, "the dispatchers' MAX_JOBS (default: theirs, 3 x WORKERS; for experiments)")
	fs.BoolVar(&o.busyOK, "busy-ok", false, "run even when the machine is busy at the start (load average above 1, or other processes using half a core): the figures are then not comparable with a quiet run's")
	fs.StringVar(&o.out, "out", "", "where to write the JSON results (default: bench-results.json at the module root; with -smoke none)")
	fs.StringVar(&only, "only", "", "comma-separated scenarios to run (s0,s0i,s1,s1rate,s2,s2s,s1trace,s3,s4,s4fifo,s1filter,s5,s6,s11,s7,s9,s10,s8,soak); default all but s8 and soak (make bench-month: s1,s8; make soak: soak)")
	fs.StringVar(&o.print, "print", "", "print the tables of a results file (such as bench-results.json) and exit; runs nothing")
	fs.IntVar(&o.payloadBytes, "payload-bytes", defaultPayloadSize, "size of every message payload (the scenarios' targets are for 1 KB; other sizes are for experiments)")
	fs.StringVar(&o.profile, "profile", "", "directory for a 20 s CPU profile of the api and the dispatcher under S1's closed loop and S1's top statements by total time with their WAL bytes (both processes then run with PPROF=true)")
	fs.DurationVar(&o.soakDuration, "soak-duration", 0, "how long the soak offers load (default 30m; 4s with -smoke)")
	fs.Float64Var(&o.soakRate, "soak-rate", 0, "messages/s the soak offers, each to 10 endpoints (default 20)")
	fs.IntVar(&o.monthAttempts, "month-attempts", 0, "attempts of history S8 loads (default 100000000; 12000 with -smoke), 40 to a message")
	fs.Func("pg-setting", "a PostgreSQL setting for the bench cluster as name=value, after the bench's own (repeatable; for experiments such as wal_compression=lz4)", func(v string) error {
		name, value, ok := strings.Cut(v, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" || value == "" || strings.ContainsAny(name+value, "\n'") {
			return fmt.Errorf("%q: want name=value (no quotes or newlines)", v)
		}
		o.pgSettings = append(o.pgSettings, fmt.Sprintf("%s = '%s'", name, value))
		return nil
	})
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
	if o.soakDuration < 0 || o.soakRate < 0 || o.monthAttempts < 0 {
		return options{}, errors.New("-soak-duration, -soak-rate, -month-attempts: must not be negative")
	}
	if o.profile != "" {
		if err := os.MkdirAll(o.profile, 0o755); err != nil {
			return options{}, fmt.Errorf("-profile: %w", err)
		}
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
	if !opts.smoke && !opts.busyOK {
		why, err := machineBusy(ctx)
		if err != nil {
			logger.Error("bench_setup", slog.String("error", err.Error()))
			return 1
		}
		if why != "" {
			fmt.Fprintf(stderr, "bench: the machine is busy (%s): its figures would not be comparable with a quiet run's; wait for it, or give -busy-ok\n", why)
			return 1
		}
	}
	load := recordLoad(10 * time.Second)
	started := time.Now()
	b, err := newBench(ctx, opts, logger)
	if err != nil {
		logger.Error("bench_setup", slog.String("error", err.Error()))
		return 1
	}
	defer b.close()

	res := b.runAll(ctx)
	res.DurationS = round1(time.Since(started).Seconds())
	res.Machine.LoadAvgMean, res.Machine.LoadAvgPeak = load.finish()
	res.Machine.BusyOK = opts.busyOK
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
	if printFailures(stdout, res) > 0 {
		return 1
	}
	return 0
}

// printFailures names again, last, the scenarios that failed to run, with
// their whole errors, and returns how many did: a CI log is often read
// from its tail, and the tables above it are long.
func printFailures(w io.Writer, res *results) int {
	n := 0
	for _, s := range res.Scenarios {
		if s.Error != "" {
			fmt.Fprintf(w, "scenario %s failed to run: %s\n", s.Name, strings.ReplaceAll(s.Error, "\n", "; "))
			n++
		}
	}
	return n
}
