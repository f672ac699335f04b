package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/config"
	"github.com/hookd/hookd/internal/replay"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
	"github.com/hookd/hookd/internal/trafficclass"
)

// cliBundle runs the replay and trace commands with files in a temporary
// directory and captured output.
type cliBundle struct {
	dir string
	env map[string]string
}

func setup(t *testing.T) *cliBundle {
	t.Helper()
	return &cliBundle{dir: t.TempDir(), env: map[string]string{}}
}

// file writes content to name in the bundle's directory and returns its
// path.
func (b *cliBundle) file(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(b.dir, name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func (b *cliBundle) getenv(k string) string { return b.env[k] }

// replay runs `dispatcher replay args...`.
func (b *cliBundle) replay(args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	err = replay.Main(context.Background(), args, b.getenv, &out, &errOut)
	return out.String(), errOut.String(), err
}

// trace runs `dispatcher trace args...`.
func (b *cliBundle) trace(args ...string) (stdout string, err error) {
	var out bytes.Buffer
	err = replay.TraceMain(context.Background(), args, b.getenv, &out, &bytes.Buffer{})
	return out.String(), err
}

// handBuilt is TestReplayHandBuiltRateTrace's trace as CSV.
const handBuilt = `ts,outcome,phase
0,failure,guard
1,failure,guard
2,failure,guard
3,failure,trip
4,failure,trip
5,success,trip
6,failure,trip
7,ignore,trip
9,failure,halfopen
12,success,halfopen
14,success,halfopen
14.5,auth_failure,halfopen
15,success,halfopen
16,failure,after
17,failure,after
18,failure,after
19,failure,after
20,success,after
21,success,after
`

// handBuiltFlags is rateConfig as flags.
var handBuiltFlags = []string{"--window", "30s", "--min-throughput", "5", "--open", "5s", "--jitter", "0", "--max-open", "1m", "--half-open-trials", "2"}

// TestReplayBadInput: every kind of bad input is a UsageError (exit 2)
// whose message names the flag or the line.
func TestReplayBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	good := b.file(t, "good.csv", "ts,outcome\n0,success\n")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unsorted ts", []string{"--trace", b.file(t, "unsorted.csv", "ts,outcome\n0,success\n2,failure\n1,success\n")},
			"--trace " + filepath.Join(b.dir, "unsorted.csv") + ": line 4: ts 1 is before the previous row's 2: rows are not in time order"},
		{"unknown outcome", []string{"--trace", b.file(t, "outcome.csv", "ts,outcome\n0,success\n1,timeout\n")},
			`line 3: outcome "timeout": must be success, failure, ignore or auth_failure`},
		{"missing header", []string{"--trace", b.file(t, "header.csv", "0,success\n")},
			`line 1: missing header "ts,outcome[,phase]": found "0,success"`},
		{"bad ts", []string{"--trace", b.file(t, "ts.csv", "ts,outcome\nsoon,success\n")},
			`line 2: ts "soon": must be a number of seconds such as 12.5`},
		{"bad duration", []string{"--trace", good, "--window", "10x"},
			`invalid value "10x" for flag -window: must be a Go duration such as 500ms, 15s or 5m`},
		{"bad open duration", []string{"--trace", good, "--open", "-5s"},
			"--open (open_duration): must be positive"},
		{"out-of-range fields name their flags", []string{"--trace", good, "--min-throughput", "0", "--failure-rate", "1.5", "--trip", "sometimes"},
			`--trip (trip): must be "rate" or "consecutive"; --failure-rate (failure_rate_threshold): must be in (0, 1]; --min-throughput (min_throughput): must be at least 1`},
		{"open longer than max open", []string{"--trace", good, "--open", "20m"},
			"--max-open (max_open_duration): must be at least open_duration"},
		{"jitter synonyms disagree", []string{"--trace", good, "--jitter", "0", "--open-jitter", "0.3"},
			"--jitter and --open-jitter disagree"},
		{"bad seed", []string{"--trace", good, "--seed", "-1"},
			`invalid value "-1" for flag -seed: must be a non-negative integer`},
		{"no input", nil, "give --trace FILE.csv or --from-db"},
		{"two inputs", []string{"--trace", good, "--from-db"}, "give --trace or --from-db, not both"},
		{"from-db without a range", []string{"--from-db", "--endpoint", "ep_1"}, "--from-db needs --endpoint, --since and --until"},
		{"bad time", []string{"--from-db", "--endpoint", "ep_1", "--since", "yesterday"}, `invalid value "yesterday" for flag -since: must be an RFC 3339 time`},
		{"backwards range", []string{"--from-db", "--endpoint", "ep_1", "--since", "2026-01-02T00:00:00Z", "--until", "2026-01-01T00:00:00Z"}, "--since must be before --until"},
		{"range without from-db", []string{"--trace", good, "--endpoint", "ep_1"}, "--endpoint, --since and --until need --from-db"},
		{"quiet without sweep", []string{"--trace", good, "--quiet", good}, "--quiet, --incident and their ranges need --sweep"},
		{"sweep without traces", []string{"--sweep"}, "--sweep needs --quiet FILE and/or --incident FILE"},
		{"sweep with events", []string{"--sweep", "--quiet", good, "--events"}, "--events cannot be combined with --sweep"},
		{"bad sweep rates", []string{"--sweep", "--quiet", good, "--rates", "0.5,2"}, `--rates: "2" must be a failure rate in (0, 1]`},
		{"bad sweep windows", []string{"--sweep", "--quiet", good, "--windows", "30s,forever"}, `--windows: "forever" must be a Go duration such as 30s, or seconds`},
		{"bad sweep mins", []string{"--sweep", "--quiet", good, "--mins", "0"}, `--mins: "0" must be an integer of at least 1`},
		{"bad class name", []string{"--sweep", "--quiet", good, "--name", "Tuned!"}, `--name: "Tuned!" is not a valid traffic class name`},
		{"missing incident phase", []string{"--sweep", "--incident", good, "--incident-phase", "outage"}, `--incident-phase: the --incident trace has no phase "outage"`},
		{"stray argument", []string{"--trace", good, "extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stdout, _, err := b.replay(tt.args...)
			var ue *config.UsageError
			require.True(t, errors.As(err, &ue), "want a UsageError (exit 2), got %v", err)
			require.Contains(t, err.Error(), tt.want)
			require.Empty(t, stdout)
		})
	}

	// A missing file is not a usage problem: exit 1.
	_, _, err := b.replay("--trace", filepath.Join(b.dir, "absent.csv"))
	var ue *config.UsageError
	require.Error(t, err)
	require.False(t, errors.As(err, &ue))
	require.Contains(t, err.Error(), "open --trace")
}

func TestReplayTextReport(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stdout, stderr, err := b.replay(append([]string{"--trace", b.file(t, "hand.csv", handBuilt)}, handBuiltFlags...)...)
	require.NoError(t, err)
	require.Empty(t, stderr, "no progress bar for a short replay")
	require.Equal(t, `breaker: trip=rate failure_rate_threshold=0.5 window=30s min_throughput=5 open_duration=5s open_jitter=0 open_backoff=1 max_open_duration=1m half_open_trials=2 half_open_concurrency=1 (seed 1)

phase     requests  sent  rejected  blocked_healthy  wasted  opens  first_open_s  time_open_s  suppressed
guard            3     3         0                0       3      0             -        0.000           3
trip             5     2         3                1       2      1         1.000        5.000           1
halfopen         5     4         1                1       1      1         0.000        6.000           0
after            6     5         1                1       4      1         4.000        1.000           4
total           19    14         5                3      10      3         4.000       12.000           8
`, stdout)
}

func TestReplayJSONReport(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stdout, _, err := b.replay(append([]string{"--trace", b.file(t, "hand.csv", handBuilt), "--json"}, handBuiltFlags...)...)
	require.NoError(t, err)
	var got struct {
		Config map[string]any            `json:"config"`
		Total  map[string]any            `json:"total"`
		Phases map[string]map[string]any `json:"phases"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &got))
	require.Equal(t, map[string]any{
		"trip": "rate", "failure_rate_threshold": 0.5, "window": "30s", "min_throughput": 5.0, "consecutive_failures": 5.0,
		"open_duration": "5s", "open_jitter": 0.0, "open_backoff": 1.0, "max_open_duration": "1m", "half_open_trials": 2.0,
		"half_open_concurrency": 1.0,
	}, got.Config)
	require.Equal(t, map[string]any{
		"requests": 19.0, "sent": 14.0, "rejected": 5.0, "blocked_healthy": 3.0, "wasted": 10.0, "opens": 3.0,
		"first_open_s": 4.0, "time_open_s": 12.0, "suppressed": 8.0,
	}, got.Total)
	require.Nil(t, got.Phases["guard"]["first_open_s"])
	require.Equal(t, 1.0, got.Phases["trip"]["first_open_s"])

	// The config's members are a traffic class's, so the config decodes
	// as one.
	class, err := trafficclass.Decode(append([]byte(`{"name":"x",`), mustMarshal(t, got.Config)[1:]...))
	require.NoError(t, err)
	require.Equal(t, rateConfig(), class.Breaker)

	// Phases come in first-appearance order, not sorted.
	_, phases, ok := strings.Cut(stdout, `"phases"`)
	require.True(t, ok)
	order := []int{
		strings.Index(phases, `"guard"`), strings.Index(phases, `"trip"`),
		strings.Index(phases, `"halfopen"`), strings.Index(phases, `"after"`),
	}
	require.IsIncreasing(t, order)
	require.NotContains(t, stdout, `"events"`)
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	return data
}

// TestReplayEvents prints each transition as it happens, one line per
// event, as a transcript.
func TestReplayEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	path := b.file(t, "hand.csv", handBuilt)
	stdout, _, err := b.replay(append([]string{"--trace", path, "--events"}, handBuiltFlags...)...)
	require.NoError(t, err)
	lines := strings.Split(stdout, "\n")
	require.Equal(t, "transitions of trip=rate failure_rate_threshold=0.5 window=30s min_throughput=5 open_duration=5s open_jitter=0 open_backoff=1 max_open_duration=1m half_open_trials=2 half_open_concurrency=1 (seed 1):", lines[0])
	require.Equal(t, []string{
		"t=4.000s   row 5       failure      closed    -> open       failure_rate          window 100.0% of 5      sent, open until t=9.000s",
		"t=9.000s   row 9       failure      open      -> half_open  open_elapsed          window 100.0% of 5      trial",
		"t=9.000s   row 9       failure      half_open -> open       trial_failed          window 100.0% of 5      trial, open until t=14.000s",
		"t=14.000s  row 11      success      open      -> half_open  open_elapsed          window 100.0% of 5      trial",
		"t=15.000s  row 13      success      half_open -> closed     trials_succeeded      window 100.0% of 5      trial",
		"t=20.000s  row 18      success      closed    -> open       failure_rate          window  80.0% of 5      sent, open until t=25.000s",
		"",
	}, lines[1:8])
	require.Contains(t, stdout, "\nphase     requests")

	stdout, _, err = b.replay(append([]string{"--trace", path, "--events", "--json"}, handBuiltFlags...)...)
	require.NoError(t, err)
	var got struct {
		Events []map[string]any `json:"events"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &got))
	require.Len(t, got.Events, 6)
	require.Equal(t, map[string]any{
		"t_s": 4.0, "row": 5.0, "phase": "trip", "outcome": "failure", "from": "closed", "to": "open", "reason": "failure_rate",
		"failure_rate": 1.0, "observations": 5.0, "failures": 5.0, "consecutive": 5.0, "open_until_s": 9.0, "became": "sent",
	}, got.Events[0])
}

// TestReplaySweep ranks the grid over a quiet and an incident trace and
// prints the winner as a PUT body that the API's decoder accepts.
func TestReplaySweep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var quiet, incident bytes.Buffer
	q, err := replay.Synth(replay.SynthConfig{RPS: 20, Phases: []replay.Phase{{Name: "quiet", Duration: 10 * time.Minute, FailureRate: 0.2}}, Spacing: replay.SpacingPoisson, Seed: 1})
	require.NoError(t, err)
	require.NoError(t, replay.WriteTrace(&quiet, q))
	inc, err := replay.Synth(replay.SynthConfig{RPS: 20, Phases: []replay.Phase{{Name: "lead-in", Duration: 2 * time.Minute, FailureRate: 0.02}, {Name: "down", Duration: 5 * time.Minute, FailureRate: 1}}, Spacing: replay.SpacingPoisson, Seed: 2})
	require.NoError(t, err)
	require.NoError(t, replay.WriteTrace(&incident, inc))
	args := []string{"--sweep", "--quiet", b.file(t, "quiet.csv", quiet.String()), "--incident", b.file(t, "incident.csv", incident.String()),
		"--incident-phase", "down", "--rates", "0.1,0.3,0.5", "--windows", "10,60s", "--mins", "10,50", "--name", "payments"}

	stdout, _, err := b.replay(args...)
	require.NoError(t, err)
	require.Contains(t, stdout, "sweep: 12 configs (seed 1)")
	require.Contains(t, stdout, `the incident starts at the first row of phase "down"`)
	require.Contains(t, stdout, "winner: failure_rate_threshold 0.3, window 10s, min_throughput 50")
	_, body, ok := strings.Cut(stdout, "PUT /v1/traffic-classes/payments\n")
	require.True(t, ok, stdout)
	class, err := trafficclass.Decode([]byte(body))
	require.NoError(t, err)
	require.Equal(t, "payments", class.Name)
	require.Equal(t, 0.3, class.Breaker.FailureRateThreshold)
	require.Equal(t, 10*time.Second, class.Breaker.Window)
	require.Equal(t, 50, class.Breaker.MinThroughput)

	stdout, _, err = b.replay(append(args, "--json")...)
	require.NoError(t, err)
	var got struct {
		Ranking []struct {
			Rank       int      `json:"rank"`
			FalseTrips *int     `json:"false_trips"`
			DetectionS *float64 `json:"detection_s"`
		} `json:"ranking"`
		Winner struct {
			Method string          `json:"method"`
			Path   string          `json:"path"`
			Body   json.RawMessage `json:"body"`
		} `json:"winner"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &got))
	require.Len(t, got.Ranking, 12)
	require.Equal(t, 0, *got.Ranking[0].FalseTrips)
	require.NotNil(t, got.Ranking[0].DetectionS)
	require.Equal(t, "PUT", got.Winner.Method)
	require.Equal(t, "/v1/traffic-classes/payments", got.Winner.Path)
	again, err := trafficclass.Decode(got.Winner.Body)
	require.NoError(t, err)
	require.Equal(t, class, again)
}

func TestTraceSynth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stdout, err := b.trace("synth", "--rps", "100", "--phase", "base:30s:0.02", "--phase", "outage:10s:1", "--phase", "base:20s:0.02", "--phase", "degraded:20s:0.2", "--seed", "7")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(stdout, "ts,outcome,phase\n0,"), stdout[:40])
	rows, err := replay.ParseTrace(strings.NewReader(stdout))
	require.NoError(t, err)
	want, err := replay.Synth(replay.SynthConfig{RPS: 100, Spacing: replay.SpacingFixed, Seed: 7, Phases: []replay.Phase{
		{Name: "base", Duration: 30 * time.Second, FailureRate: 0.02}, {Name: "outage", Duration: 10 * time.Second, FailureRate: 1},
		{Name: "base", Duration: 20 * time.Second, FailureRate: 0.02}, {Name: "degraded", Duration: 20 * time.Second, FailureRate: 0.2},
	}})
	require.NoError(t, err)
	require.Equal(t, want, rows)
	again, err := b.trace("synth", "--rps", "100", "--phase", "base:30s:0.02", "--phase", "outage:10s:1", "--phase", "base:20s:0.02", "--phase", "degraded:20s:0.2", "--seed", "7")
	require.NoError(t, err)
	require.Equal(t, stdout, again, "deterministic by seed")

	poisson, err := b.trace("synth", "--rps", "5", "--phase", "a:10s:0.5", "--spacing", "poisson")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(poisson, "ts,outcome,phase\n"))

	tests := []struct {
		args []string
		want string
	}{
		{nil, "dispatcher trace: want the synth command, got nothing"},
		{[]string{"synthesize"}, `dispatcher trace: want the synth command, got "synthesize"`},
		{[]string{"synth"}, "--phase: at least one phase is required"},
		{[]string{"synth", "--phase", "base:30s"}, `invalid value "base:30s" for flag -phase: phase "base:30s": want name:duration:failure probability`},
		{[]string{"synth", "--phase", "base:30:0.1"}, `duration "30" must be a positive Go duration`},
		{[]string{"synth", "--phase", "a:1s:0", "--rps", "0"}, "--rps: must be a number above 0"},
		{[]string{"synth", "--phase", "a:1s:0", "--spacing", "even"}, `--spacing: "even" must be fixed or poisson`},
		{[]string{"synth", "--phase", "a:1000h:0", "--rps", "1000"}, "trace synth: 3600000000 rows expected: at most 100000000"},
	}
	for _, tt := range tests {
		_, err := b.trace(tt.args...)
		var ue *config.UsageError
		require.True(t, errors.As(err, &ue), "%v: want a UsageError, got %v", tt.args, err)
		require.Contains(t, err.Error(), tt.want)
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stdout, _, err := b.replay("--help")
	require.ErrorIs(t, err, config.ErrHelp)
	require.Contains(t, stdout, "usage: dispatcher replay [flags]")
	for _, f := range []string{"--trace", "--from-db", "--class", "--trip", "--failure-rate", "--window", "--min-throughput", "--consecutive",
		"--open ", "--open-jitter", "--jitter", "--open-backoff", "--max-open", "--half-open-trials", "--half-open-concurrency", "--seed",
		"--json", "--events", "--sweep", "--quiet", "--incident", "--rates", "--windows", "--mins", "--name"} {
		require.Contains(t, stdout, "  "+f, f)
	}
	stdout, err = b.trace("synth", "--help")
	require.ErrorIs(t, err, config.ErrHelp)
	require.Contains(t, stdout, "usage: dispatcher trace synth")
	stdout, err = b.trace("--help")
	require.ErrorIs(t, err, config.ErrHelp)
	require.Contains(t, stdout, "usage: dispatcher trace synth")
}

// TestReplayFromDB replays an endpoint's delivery log under a stored
// traffic class: blocked attempts are skipped, other endpoints and times
// outside the range are not read, and equal times keep their log order.
func TestReplayFromDB(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	db := storetest.New(t)
	st := store.New(db.Pool, nil)
	b.env["DATABASE_URL"] = db.URL
	ep, err := st.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/hook", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	require.NoError(t, err)
	class := trafficclass.Default("tight")
	class.Breaker = rateConfig()
	_, err = st.CreateClass(ctx, class)
	require.NoError(t, err)

	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var attempts []store.Attempt
	add := func(endpoint string, at float64, classification string) {
		attempts = append(attempts, store.Attempt{
			DeliveryID: "dl_" + classification, MessageID: "msg_1", EndpointID: endpoint, AttemptNumber: 1,
			AttemptedAt: base.Add(time.Duration(at * float64(time.Second))), Classification: classification,
		})
	}
	add(ep.ID, -1, "failure") // before --since
	for i := range 5 {
		add(ep.ID, float64(i), "failure")
	}
	add(ep.ID, 4, "blocked") // never reached the endpoint
	add(ep.ID, 5, "success")
	add(ep.ID, 6, "ignore")
	add("ep_other", 3, "failure")
	add(ep.ID, 100, "failure") // at --until: excluded
	require.NoError(t, st.RecordLedger(ctx, attempts, nil))

	args := []string{"--from-db", "--endpoint", ep.ID, "--since", base.Format(time.RFC3339), "--until", base.Add(100 * time.Second).Format(time.RFC3339), "--class", "tight"}
	stdout, _, err := b.replay(append(args, "--json", "--events")...)
	require.NoError(t, err)
	var got struct {
		Config map[string]any   `json:"config"`
		Total  map[string]any   `json:"total"`
		Events []map[string]any `json:"events"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &got))
	require.Equal(t, "30s", got.Config["window"])
	require.Equal(t, 5.0, got.Config["min_throughput"])
	require.Equal(t, 7.0, got.Total["requests"])
	require.Equal(t, 5.0, got.Total["sent"])
	require.Equal(t, 4.0, got.Total["first_open_s"])
	require.Len(t, got.Events, 1)

	// Flags override the class's fields.
	stdout, _, err = b.replay(append(args, "--json", "--min-throughput", "10")...)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(stdout), &got))
	require.Equal(t, 10.0, got.Config["min_throughput"])
	require.Equal(t, 0.0, got.Total["opens"])

	// Text events carry the instant of each row.
	stdout, _, err = b.replay(append(args, "--events")...)
	require.NoError(t, err)
	require.Contains(t, stdout, "t=4.000s (2026-03-01T12:00:04Z) row 5")

	_, _, err = b.replay("--trace", b.file(t, "t.csv", "ts,outcome\n"), "--class", "nope")
	var ue *config.UsageError
	require.True(t, errors.As(err, &ue), "%v", err)
	require.EqualError(t, err, `--class: no traffic class is called "nope"`)

	// A sweep over two ranges of the log: the incident gets a lead-in.
	stdout, _, err = b.replay("--sweep", "--from-db", "--endpoint", ep.ID,
		"--quiet-since", base.Add(5*time.Second).Format(time.RFC3339), "--quiet-until", base.Add(10*time.Second).Format(time.RFC3339),
		"--incident-since", base.Format(time.RFC3339), "--incident-until", base.Add(10*time.Second).Format(time.RFC3339),
		"--rates", "0.5", "--windows", "30s", "--mins", "5,50")
	require.NoError(t, err)
	require.Contains(t, stdout, "winner: failure_rate_threshold 0.5, window 30s, min_throughput 5")
	require.Contains(t, stdout, `the incident starts at the first row of phase "incident"`)
}
