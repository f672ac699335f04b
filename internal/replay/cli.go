package replay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/config"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/trafficclass"
)

const replaySynopsis = `usage: dispatcher replay [flags]

  Replays request outcomes, in virtual time, through the dispatcher's own
  circuit breaker and reports what a config would have done, per phase and
  in total: requests, sent, rejected, blocked_healthy, wasted, opens,
  first_open_s, time_open_s and suppressed.

  input   --trace FILE.csv (header ts,outcome[,phase]; ts in seconds), or
          --from-db --endpoint ID --since T --until T (the delivery log)
  config  --class NAME (a stored traffic class) and/or the breaker flags;
          unset ones keep the class's values, or the breaker defaults
  sweep   --sweep ranks a grid of rate configs (--rates, --windows, --mins)
          over --quiet FILE and/or --incident FILE, or with --from-db over
          --quiet-since/--quiet-until and --incident-since/--incident-until,
          and prints the winner as a PUT /v1/traffic-classes/{name} body`

const traceSynopsis = `usage: dispatcher trace synth [flags] > trace.csv

  Writes a synthetic CSV trace (ts,outcome,phase) from phases, each
  name:duration:failure probability, one after the other from t=0:

    dispatcher trace synth --rps 100 --phase base:30s:0.02 \
      --phase outage:10s:1 --phase base:20s:0.02 --phase degraded:20s:0.2`

// Main runs `dispatcher replay` with args (the flags after "replay"). Bad
// flags and bad input (a malformed trace, an invalid config) are
// *config.UsageError naming the flag or the line; --help returns
// config.ErrHelp after printing the flags on stdout. Reports go to stdout;
// the progress bar goes to stderr.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return command{getenv: getenv, stdout: stdout, stderr: stderr, now: time.Now, terminal: isTerminal(stderr)}.replay(ctx, args)
}

// TraceMain runs `dispatcher trace` with args (the words after "trace"):
// only "synth", which writes a synthetic trace to stdout.
func TraceMain(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return command{getenv: getenv, stdout: stdout, stderr: stderr, now: time.Now, terminal: isTerminal(stderr)}.trace(ctx, args)
}

// command is one run of a replay or trace command with its surroundings
// injected: the environment, the output streams, the clock the progress bar
// reads and whether stderr is a terminal.
type command struct {
	getenv   func(string) string
	stdout   io.Writer
	stderr   io.Writer
	now      func() time.Time
	terminal bool
}

// value is a flag.Value of type T that remembers whether it was set on the
// command line.
type value[T any] struct {
	v     T
	set   bool
	parse func(string) (T, error)
	show  func(T) string
}

// Set parses s into the value and marks it set.
func (x *value[T]) Set(s string) error {
	v, err := x.parse(s)
	if err != nil {
		return err
	}
	x.v, x.set = v, true
	return nil
}

// String formats the value for help text.
func (x *value[T]) String() string {
	if x == nil || x.show == nil {
		return ""
	}
	return x.show(x.v)
}

// applyTo stores the value in dst when its flag was given.
func (x *value[T]) applyTo(dst *T) {
	if x.set {
		*dst = x.v
	}
}

func newValue[T any](parse func(string) (T, error), show func(T) string) *value[T] {
	return &value[T]{parse: parse, show: show}
}

// bind binds v to --name with no environment twin and default def, and
// forgets that binding the default set it.
func bind[T any](fs *config.FlagSet, v *value[T], name, def, usage string) *value[T] {
	fs.Var(v, name, "", def, usage)
	v.set = false
	return v
}

func parseFloat(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, errors.New("must be a number")
	}
	return f, nil
}

func parseInt(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, errors.New("must be an integer")
	}
	return n, nil
}

func parseUint(s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, errors.New("must be a non-negative integer")
	}
	return n, nil
}

func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("must be a Go duration such as 500ms, 15s or 5m")
	}
	return d, nil
}

func parseString(s string) (string, error) { return s, nil }

func showFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// breakerFlags are the flags named after the breaker config.
type breakerFlags struct {
	trip                *value[string]
	failureRate         *value[float64]
	window              *value[time.Duration]
	minThroughput       *value[int]
	consecutive         *value[int]
	open                *value[time.Duration]
	openJitter          *value[float64]
	jitter              *value[float64]
	openBackoff         *value[float64]
	maxOpen             *value[time.Duration]
	halfOpenTrials      *value[int]
	halfOpenConcurrency *value[int]
}

func bindBreakerFlags(fs *config.FlagSet) *breakerFlags {
	d := breaker.DefaultConfig()
	dur := trafficclass.FormatDuration
	str := func(s string) string { return s }
	return &breakerFlags{
		trip:                bind(fs, newValue(parseString, str), "trip", string(d.Trip), "trip condition: rate or consecutive (trip)"),
		failureRate:         bind(fs, newValue(parseFloat, showFloat), "failure-rate", showFloat(d.FailureRateThreshold), "failure fraction that trips a rate breaker (failure_rate_threshold)"),
		window:              bind(fs, newValue(parseDuration, dur), "window", dur(d.Window), "rolling window of a rate breaker (window)"),
		minThroughput:       bind(fs, newValue(parseInt, strconv.Itoa), "min-throughput", strconv.Itoa(d.MinThroughput), "observations the window needs before its rate can trip (min_throughput)"),
		consecutive:         bind(fs, newValue(parseInt, strconv.Itoa), "consecutive", strconv.Itoa(d.ConsecutiveFailures), "failures in a row that trip a consecutive breaker (consecutive_failures)"),
		open:                bind(fs, newValue(parseDuration, dur), "open", dur(d.OpenDuration), "how long the breaker stays open before a trial (open_duration)"),
		openJitter:          bind(fs, newValue(parseFloat, showFloat), "open-jitter", showFloat(d.OpenJitter), "largest fraction of the open duration added at random (open_jitter)"),
		jitter:              bind(fs, newValue(parseFloat, showFloat), "jitter", showFloat(d.OpenJitter), "synonym of --open-jitter"),
		openBackoff:         bind(fs, newValue(parseFloat, showFloat), "open-backoff", showFloat(d.OpenBackoff), "open duration multiplier per repeated open; 1 is off (open_backoff)"),
		maxOpen:             bind(fs, newValue(parseDuration, dur), "max-open", dur(d.MaxOpenDuration), "cap of the backed-off open duration (max_open_duration)"),
		halfOpenTrials:      bind(fs, newValue(parseInt, strconv.Itoa), "half-open-trials", strconv.Itoa(d.HalfOpenTrials), "consecutive trial successes that close the breaker (half_open_trials)"),
		halfOpenConcurrency: bind(fs, newValue(parseInt, strconv.Itoa), "half-open-concurrency", strconv.Itoa(d.HalfOpenConcurrency), "trials at once; trials never overlap in a replay (half_open_concurrency)"),
	}
}

// flagOfField names the flag of each breaker config field.
var flagOfField = map[string]string{
	"trip":                   "trip",
	"failure_rate_threshold": "failure-rate",
	"window":                 "window",
	"min_throughput":         "min-throughput",
	"consecutive_failures":   "consecutive",
	"open_duration":          "open",
	"open_jitter":            "open-jitter",
	"open_backoff":           "open-backoff",
	"max_open_duration":      "max-open",
	"half_open_trials":       "half-open-trials",
	"half_open_concurrency":  "half-open-concurrency",
}

// apply returns base with every flag that was set applied, validated. An
// invalid field is a UsageError naming its flag.
func (f *breakerFlags) apply(base breaker.Config) (breaker.Config, error) {
	c := base
	if f.jitter.set && f.openJitter.set && f.jitter.v != f.openJitter.v {
		return breaker.Config{}, &config.UsageError{Msg: "--jitter and --open-jitter disagree: --jitter is a synonym, give one"}
	}
	if f.trip.set {
		c.Trip = breaker.Trip(f.trip.v)
	}
	f.failureRate.applyTo(&c.FailureRateThreshold)
	f.window.applyTo(&c.Window)
	f.minThroughput.applyTo(&c.MinThroughput)
	f.consecutive.applyTo(&c.ConsecutiveFailures)
	f.open.applyTo(&c.OpenDuration)
	f.openJitter.applyTo(&c.OpenJitter)
	f.jitter.applyTo(&c.OpenJitter)
	f.openBackoff.applyTo(&c.OpenBackoff)
	f.maxOpen.applyTo(&c.MaxOpenDuration)
	f.halfOpenTrials.applyTo(&c.HalfOpenTrials)
	f.halfOpenConcurrency.applyTo(&c.HalfOpenConcurrency)
	if err := c.Validate(); err != nil {
		var fields breaker.FieldErrors
		if !errors.As(err, &fields) {
			return breaker.Config{}, &config.UsageError{Msg: "breaker config: " + err.Error()}
		}
		msgs := make([]string, len(fields))
		for i, fe := range fields {
			msgs[i] = fmt.Sprintf("--%s (%s): %s", flagOfField[fe.Field], fe.Field, fe.Message)
		}
		return breaker.Config{}, &config.UsageError{Msg: strings.Join(msgs, "; ")}
	}
	return c, nil
}

// timeFlag is an optional RFC 3339 instant.
func timeFlag(fs *config.FlagSet, name, usage string) *value[time.Time] {
	parse := func(s string) (time.Time, error) {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return time.Time{}, errors.New("must be an RFC 3339 time such as 2026-01-02T15:04:05Z")
		}
		return t, nil
	}
	return bind(fs, newValue(parse, func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.Format(time.RFC3339Nano)
	}), name, "", usage)
}

// rangeFlags is a --from-db time range.
type rangeFlags struct {
	since, until *value[time.Time]
	sinceName    string
	untilName    string
}

// get returns the range, requiring both ends and since < until; ok is false
// when neither end was given.
func (r rangeFlags) get() (since, until time.Time, ok bool, err error) {
	switch {
	case !r.since.set && !r.until.set:
		return time.Time{}, time.Time{}, false, nil
	case !r.since.set:
		return time.Time{}, time.Time{}, false, &config.UsageError{Msg: fmt.Sprintf("--%s needs --%s", r.untilName, r.sinceName)}
	case !r.until.set:
		return time.Time{}, time.Time{}, false, &config.UsageError{Msg: fmt.Sprintf("--%s needs --%s", r.sinceName, r.untilName)}
	case !r.since.v.Before(r.until.v):
		return time.Time{}, time.Time{}, false, &config.UsageError{Msg: fmt.Sprintf("--%s must be before --%s", r.sinceName, r.untilName)}
	}
	return r.since.v, r.until.v, true, nil
}

func (c command) replay(ctx context.Context, args []string) error {
	fs := config.New("dispatcher replay", replaySynopsis, c.getenv, c.stdout)
	var (
		tracePath   = fs.String("trace", "", "", "CSV trace to replay: header ts,outcome[,phase], ts in seconds, rows in time order")
		fromDB      = fs.Bool("from-db", "", false, "replay the delivery log of --endpoint from the database instead of a file")
		endpoint    = fs.String("endpoint", "", "", "endpoint id whose delivery log --from-db reads")
		rng         = rangeFlags{since: timeFlag(fs, "since", "start of the --from-db range, RFC 3339, inclusive"), until: timeFlag(fs, "until", "end of the --from-db range, RFC 3339, exclusive"), sinceName: "since", untilName: "until"}
		databaseURL = fs.String("database-url", "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "Postgres connection URL (for --from-db and --class)")
		className   = fs.String("class", "", "", "stored traffic class whose breaker config to replay; breaker flags override its fields")
		bf          = bindBreakerFlags(fs)
		seed        = bind(fs, newValue(parseUint, func(n uint64) string { return strconv.FormatUint(n, 10) }), "seed", strconv.Itoa(DefaultSeed), "seed of the open-jitter draws: the same seed gives the same replay")
		asJSON      = fs.Bool("json", "", false, "print the report as JSON")
		events      = fs.Bool("events", "", false, "also print every transition as it happens")
		sweep       = fs.Bool("sweep", "", false, "rank a grid of rate configs instead of replaying one")
		quietPath   = fs.String("quiet", "", "", "sweep: CSV trace of normal traffic, where every open is a false trip")
		incPath     = fs.String("incident", "", "", "sweep: CSV trace of an incident, perhaps after a lead-in (see --incident-phase)")
		incPhase    = fs.String("incident-phase", "", "", "sweep: phase of the --incident trace where the incident starts; earlier rows are a lead-in (default: the whole trace)")
		quietRange  = rangeFlags{since: timeFlag(fs, "quiet-since", "sweep --from-db: start of the quiet range"), until: timeFlag(fs, "quiet-until", "sweep --from-db: end of the quiet range"), sinceName: "quiet-since", untilName: "quiet-until"}
		incRange    = rangeFlags{since: timeFlag(fs, "incident-since", "sweep --from-db: start of the incident (the window is filled from the log before it)"), until: timeFlag(fs, "incident-until", "sweep --from-db: end of the incident range"), sinceName: "incident-since", untilName: "incident-until"}
		def         = DefaultGrid()
		rates       = fs.String("rates", "", joinFloats(def.Rates), "sweep: failure_rate_threshold values, comma-separated")
		windows     = fs.String("windows", "", joinDurations(def.Windows), "sweep: window values, comma-separated Go durations (or seconds)")
		mins        = fs.String("mins", "", joinInts(def.Mins), "sweep: min_throughput values, comma-separated")
		name        = fs.String("name", "", "tuned", "sweep: name of the recommended traffic class")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(fs.Args()) > 0 {
		return &config.UsageError{Msg: fmt.Sprintf("unexpected argument %q", fs.Args()[0])}
	}

	// Everything that needs neither the database nor a file is checked
	// first, so a typo costs no connection.
	base := breaker.DefaultConfig()
	if *className == "" {
		if _, err := bf.apply(base); err != nil {
			return err
		}
	}
	since, until, haveRange, err := rng.get()
	if err != nil {
		return err
	}
	var grid Grid
	if *sweep {
		if grid, err = parseGrid(*rates, *windows, *mins); err != nil {
			return err
		}
		if err := classFor(*name, base).Validate(); err != nil {
			return &config.UsageError{Msg: fmt.Sprintf("--name: %q is not a valid traffic class name: %v", *name, err)}
		}
		switch {
		case *events:
			return &config.UsageError{Msg: "--events cannot be combined with --sweep"}
		case *tracePath != "":
			return &config.UsageError{Msg: "--sweep takes --quiet and --incident, not --trace"}
		case haveRange:
			return &config.UsageError{Msg: "--sweep takes --quiet-since/--quiet-until and --incident-since/--incident-until, not --since/--until"}
		}
	} else {
		switch {
		case *quietPath != "" || *incPath != "" || *incPhase != "" || quietRange.since.set || quietRange.until.set || incRange.since.set || incRange.until.set:
			return &config.UsageError{Msg: "--quiet, --incident and their ranges need --sweep"}
		case *fromDB && *tracePath != "":
			return &config.UsageError{Msg: "give --trace or --from-db, not both"}
		case !*fromDB && *tracePath == "":
			return &config.UsageError{Msg: "give --trace FILE.csv or --from-db --endpoint ID --since T --until T"}
		case *fromDB && (*endpoint == "" || !haveRange):
			return &config.UsageError{Msg: "--from-db needs --endpoint, --since and --until"}
		case !*fromDB && (*endpoint != "" || haveRange):
			return &config.UsageError{Msg: "--endpoint, --since and --until need --from-db"}
		}
	}

	var st *store.Store
	if *fromDB || *className != "" {
		pool, err := store.OpenPool(ctx, store.PoolConfig{URL: *databaseURL, MaxConns: 2, ApplicationName: "hookd-replay"})
		if err != nil {
			return err
		}
		defer pool.Close()
		st = store.New(pool, nil)
	}
	if *className != "" {
		class, err := st.GetClass(ctx, *className)
		if errors.Is(err, store.ErrNotFound) {
			return &config.UsageError{Msg: fmt.Sprintf("--class: no traffic class is called %q", *className)}
		}
		if err != nil {
			return err
		}
		base = class.Breaker
	}
	cfg, err := bf.apply(base)
	if err != nil {
		return err
	}

	out := bufio.NewWriterSize(c.stdout, 64<<10)
	if *sweep {
		err = c.runSweep(ctx, out, st, sweepInput{
			fromDB: *fromDB, endpoint: *endpoint, quietPath: *quietPath, incidentPath: *incPath, incidentPhase: *incPhase,
			quietRange: quietRange, incidentRange: incRange,
		}, grid.Configs(cfg), seed.v, *asJSON, *name)
	} else {
		var rows []Row
		if *fromDB {
			rows, err = LoadAttempts(ctx, st, *endpoint, since, until)
		} else {
			rows, err = readTrace("trace", *tracePath)
		}
		if err != nil {
			return err
		}
		err = c.runOne(out, cfg, rows, seed.v, *asJSON, *events, *fromDB)
	}
	if ferr := out.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("write report: %w", ferr)
	}
	return err
}

// runOne replays rows through cfg and writes the report, with the
// transitions first when events is set.
func (c command) runOne(out *bufio.Writer, cfg breaker.Config, rows []Row, seed uint64, asJSON, events, absolute bool) error {
	bar := newProgressBar(c.stderr, c.terminal, c.now, "replay", int64(len(rows)))
	opts := Options{Seed: seed, Progress: bar.Add}
	var collected []Event
	if events {
		collected = []Event{}
		if !asJSON {
			fmt.Fprintf(out, "transitions of %s (seed %d):\n", DescribeConfig(cfg), seed)
		}
		opts.OnEvent = func(e Event) {
			if asJSON {
				collected = append(collected, e)
				return
			}
			fmt.Fprintln(out, FormatEvent(e, absolute))
		}
	}
	report, err := Replay(cfg, rows, opts)
	bar.Finish()
	if err != nil {
		return err
	}
	if asJSON {
		return WriteJSON(out, report, collected)
	}
	if events {
		fmt.Fprintln(out)
	}
	return WriteText(out, report, seed)
}

// sweepInput says where a sweep's two traces come from.
type sweepInput struct {
	fromDB                    bool
	endpoint                  string
	quietPath, incidentPath   string
	incidentPhase             string
	quietRange, incidentRange rangeFlags
}

// Phases of an incident read from the delivery log.
const (
	// PhaseLeadIn labels the rows before --incident-since, read so that the
	// window is as full at the incident's start as it was in production.
	PhaseLeadIn = "lead-in"
	// PhaseIncident labels the rows from --incident-since on.
	PhaseIncident = "incident"
)

func (c command) runSweep(ctx context.Context, out *bufio.Writer, st *store.Store, in sweepInput, configs []breaker.Config, seed uint64, asJSON bool, name string) error {
	var quiet, incident []Row
	incidentPhase := in.incidentPhase
	if in.fromDB {
		if in.quietPath != "" || in.incidentPath != "" || in.incidentPhase != "" {
			return &config.UsageError{Msg: "--sweep --from-db takes time ranges, not --quiet, --incident or --incident-phase"}
		}
		if in.endpoint == "" {
			return &config.UsageError{Msg: "--sweep --from-db needs --endpoint"}
		}
		since, until, ok, err := in.quietRange.get()
		if err != nil {
			return err
		}
		if ok {
			rows, err := LoadAttempts(ctx, st, in.endpoint, since, until)
			if err != nil {
				return err
			}
			quiet = nonNil(rows)
		}
		if since, until, ok, err = in.incidentRange.get(); err != nil {
			return err
		}
		if ok {
			var lead time.Duration
			for _, c := range configs {
				lead = max(lead, c.Window)
			}
			rows, err := LoadAttempts(ctx, st, in.endpoint, since.Add(-lead), until)
			if err != nil {
				return err
			}
			start := time.Duration(since.UnixNano())
			for i := range rows {
				rows[i].Phase = PhaseIncident
				if rows[i].TS < start {
					rows[i].Phase = PhaseLeadIn
				}
			}
			incident, incidentPhase = nonNil(rows), PhaseIncident
		}
	} else {
		if in.quietRange.since.set || in.quietRange.until.set || in.incidentRange.since.set || in.incidentRange.until.set {
			return &config.UsageError{Msg: "--quiet-since, --quiet-until, --incident-since and --incident-until need --from-db"}
		}
		var err error
		if in.quietPath != "" {
			if quiet, err = readTrace("quiet", in.quietPath); err != nil {
				return err
			}
			quiet = nonNil(quiet)
		}
		if in.incidentPath != "" {
			if incident, err = readTrace("incident", in.incidentPath); err != nil {
				return err
			}
			incident = nonNil(incident)
		}
	}
	if quiet == nil && incident == nil {
		return &config.UsageError{Msg: "--sweep needs --quiet FILE and/or --incident FILE (or their --from-db ranges)"}
	}
	if in.incidentPhase != "" && !slices.ContainsFunc(incident, func(r Row) bool { return r.Phase == in.incidentPhase }) {
		return &config.UsageError{Msg: fmt.Sprintf("--incident-phase: the --incident trace has no phase %q", in.incidentPhase)}
	}
	bar := newProgressBar(c.stderr, c.terminal, c.now, "sweep", int64(len(configs))*int64(len(quiet)+len(incident)))
	ranked, err := Sweep(configs, quiet, incident, SweepOptions{Seed: seed, IncidentPhase: incidentPhase, Progress: bar.Add})
	bar.Finish()
	if err != nil {
		return err
	}
	if asJSON {
		return WriteSweepJSON(out, ranked, name)
	}
	return WriteSweepText(out, ranked, name, seed)
}

// nonNil returns rows, or an empty slice for nil: a trace that was given
// but holds no rows is still given.
func nonNil(rows []Row) []Row {
	if rows == nil {
		return []Row{}
	}
	return rows
}

// readTrace parses the trace file at path, given with --flag. A malformed
// line is a UsageError naming the flag, the file and the line.
func readTrace(flagName, path string) ([]Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open --%s: %w", flagName, err)
	}
	defer f.Close()
	rows, err := ParseTrace(f)
	var te *TraceError
	if errors.As(err, &te) {
		return nil, &config.UsageError{Msg: fmt.Sprintf("--%s %s: %v", flagName, path, err)}
	}
	if err != nil {
		return nil, fmt.Errorf("read --%s %s: %w", flagName, path, err)
	}
	return rows, nil
}

// parseGrid parses the --rates, --windows and --mins lists.
func parseGrid(rates, windows, mins string) (Grid, error) {
	var g Grid
	for _, s := range splitList(rates) {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || !(f > 0 && f <= 1) {
			return Grid{}, &config.UsageError{Msg: fmt.Sprintf("--rates: %q must be a failure rate in (0, 1]", s)}
		}
		g.Rates = append(g.Rates, f)
	}
	for _, s := range splitList(windows) {
		d, err := time.ParseDuration(s)
		if err != nil {
			secs, ferr := strconv.ParseFloat(s, 64)
			if ferr != nil || !(secs > 0) || secs > 1e9 {
				return Grid{}, &config.UsageError{Msg: fmt.Sprintf("--windows: %q must be a Go duration such as 30s, or seconds", s)}
			}
			d = time.Duration(secs * float64(time.Second))
		}
		if d < breaker.MinWindow {
			return Grid{}, &config.UsageError{Msg: fmt.Sprintf("--windows: %q must be at least %s", s, breaker.MinWindow)}
		}
		g.Windows = append(g.Windows, d)
	}
	for _, s := range splitList(mins) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return Grid{}, &config.UsageError{Msg: fmt.Sprintf("--mins: %q must be an integer of at least 1", s)}
		}
		g.Mins = append(g.Mins, n)
	}
	switch {
	case len(g.Rates) == 0:
		return Grid{}, &config.UsageError{Msg: "--rates: at least one rate is required"}
	case len(g.Windows) == 0:
		return Grid{}, &config.UsageError{Msg: "--windows: at least one window is required"}
	case len(g.Mins) == 0:
		return Grid{}, &config.UsageError{Msg: "--mins: at least one minimum is required"}
	}
	return g, nil
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func joinFloats(fs []float64) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = showFloat(f)
	}
	return strings.Join(parts, ",")
}

func joinDurations(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = trafficclass.FormatDuration(d)
	}
	return strings.Join(parts, ",")
}

func joinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

// phaseList is the repeatable --phase flag.
type phaseList []Phase

// Set parses one --phase and appends it.
func (l *phaseList) Set(s string) error {
	p, err := ParsePhase(s)
	if err != nil {
		return err
	}
	*l = append(*l, p)
	return nil
}

// String lists the phases in the form ParsePhase reads.
func (l *phaseList) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(*l))
	for i, p := range *l {
		parts[i] = p.String()
	}
	return strings.Join(parts, " ")
}

func (c command) trace(_ context.Context, args []string) error {
	if len(args) == 0 || args[0] != "synth" {
		if len(args) > 0 && (args[0] == "--help" || args[0] == "-help" || args[0] == "-h") {
			fmt.Fprintln(c.stdout, traceSynopsis)
			return config.ErrHelp
		}
		got := "nothing"
		if len(args) > 0 {
			got = fmt.Sprintf("%q", args[0])
		}
		return &config.UsageError{Msg: fmt.Sprintf("dispatcher trace: want the synth command, got %s", got)}
	}
	fs := config.New("dispatcher trace synth", traceSynopsis, c.getenv, c.stdout)
	var (
		rps     = fs.Float("rps", "", 100, "requests per second")
		phases  phaseList
		seed    = bind(fs, newValue(parseUint, func(n uint64) string { return strconv.FormatUint(n, 10) }), "seed", strconv.Itoa(DefaultSeed), "seed of the outcome and spacing draws: the same seed gives the same trace")
		spacing = fs.String("spacing", "", string(SpacingFixed), "fixed (exactly 1/rps apart) or poisson (exponential gaps)")
	)
	fs.Var(&phases, "phase", "", "", "a phase as name:duration:failure probability, such as outage:10s:1; repeat in order")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if len(fs.Args()) > 0 {
		return &config.UsageError{Msg: fmt.Sprintf("unexpected argument %q", fs.Args()[0])}
	}
	switch {
	case !(*rps > 0) || *rps > 1e7:
		return &config.UsageError{Msg: "--rps: must be a number above 0 and at most 10000000"}
	case len(phases) == 0:
		return &config.UsageError{Msg: "--phase: at least one phase is required, such as --phase base:30s:0.02"}
	case *spacing != string(SpacingFixed) && *spacing != string(SpacingPoisson):
		return &config.UsageError{Msg: fmt.Sprintf("--spacing: %q must be fixed or poisson", *spacing)}
	}
	rows, err := Synth(SynthConfig{RPS: *rps, Phases: phases, Spacing: Spacing(*spacing), Seed: seed.v})
	if err != nil {
		return &config.UsageError{Msg: "trace synth: " + err.Error()}
	}
	return WriteTrace(c.stdout, rows)
}
