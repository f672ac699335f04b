package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// results is bench-results.json.
type results struct {
	Mode         string    `json:"mode"`
	Command      string    `json:"command"`
	PayloadBytes int       `json:"payload_bytes"`
	Commit       string    `json:"commit"`
	StartedAt    time.Time `json:"started_at"`
	DurationS    float64   `json:"duration_s"`
	Machine      machine   `json:"machine"`

	S0NoopJobsPerS        float64 `json:"s0_noop_jobs_per_s"`
	S1DeliveriesPerS      float64 `json:"s1_deliveries_per_s"`
	S1P99Ms               float64 `json:"s1_p99_ms"`
	S1RateP99Ms           float64 `json:"s1_rate_p99_ms"`
	S1RateGrowingBacklog  bool    `json:"s1_rate_growing_backlog"`
	S2BreakerOnPerS       float64 `json:"s2_breaker_on_per_s"`
	S2BreakerOffPerS      float64 `json:"s2_breaker_off_per_s"`
	RoundtripsPerDelivery float64 `json:"roundtrips_per_delivery"`
	S3MaxLockWaitMs       float64 `json:"s3_max_lock_wait_ms"`
	S4HealthyP99Ms        float64 `json:"s4_healthy_p99_ms"`
	S4HealthyPerS         float64 `json:"s4_healthy_per_s"`
	S5MaxProbesInFlight   int     `json:"s5_max_probes_in_flight"`
	S6RSSMB               float64 `json:"s6_rss_mb"`

	Targets   []target          `json:"targets"`
	Scenarios []*scenarioResult `json:"scenarios"`
}

// machine describes where the figures were taken.
type machine struct {
	Cores          int     `json:"cores"`
	MemoryGiB      float64 `json:"memory_gib"`
	CPU            string  `json:"cpu"`
	Kernel         string  `json:"kernel"`
	Postgres       string  `json:"postgres"`
	Go             string  `json:"go"`
	LoadAvgAtStart string  `json:"loadavg_at_start"`
	Note           string  `json:"note"`
}

// scenarioResult is one scenario's figures.
type scenarioResult struct {
	Name     string            `json:"name"`
	Title    string            `json:"title"`
	Layout   string            `json:"layout,omitempty"`
	Load     string            `json:"load,omitempty"`
	Settings map[string]string `json:"dispatcher_settings,omitempty"`
	WallS    float64           `json:"wall_s,omitempty"`

	MeasuredS      float64 `json:"measured_s"`
	Deliveries     int     `json:"deliveries"`
	DeliveriesPerS float64 `json:"deliveries_per_s"`
	MessagesPerS   float64 `json:"messages_per_s,omitempty"`
	LatencyP50Ms   float64 `json:"latency_p50_ms"`
	LatencyP99Ms   float64 `json:"latency_p99_ms"`
	LatencyMaxMs   float64 `json:"latency_max_ms"`
	Undelivered    int     `json:"undelivered,omitempty"`
	Drained        bool    `json:"drained"`
	APIPostP50Ms   float64 `json:"api_post_p50_ms,omitempty"`
	APIPostP99Ms   float64 `json:"api_post_p99_ms,omitempty"`
	FailedPosts    int64   `json:"failed_posts,omitempty"`
	BadSignatures  int64   `json:"bad_signatures,omitempty"`

	Roundtrips              float64     `json:"roundtrips_per_delivery"`
	RoundtripsAPI           float64     `json:"roundtrips_api_per_delivery"`
	RoundtripsDispatcher    float64     `json:"roundtrips_dispatcher_per_delivery"`
	RoundtripDeliveries     int64       `json:"roundtrip_deliveries"`
	APIStatementsPerMessage float64     `json:"api_statements_per_message"`
	TopStatements           []statement `json:"top_statements,omitempty"`
	CommitsPerDelivery      float64     `json:"commits_per_delivery"`
	WALBytesPerDelivery     float64     `json:"wal_bytes_per_delivery"`
	WALSyncsPerS            float64     `json:"wal_syncs_per_s"`
	CPUMsPerDelivery        cpuMs       `json:"cpu_ms_per_delivery"`

	Attempts           int64                  `json:"attempts"`
	SnoozedAtCap       int64                  `json:"snoozed_at_cap"`
	RejectedByBreaker  int64                  `json:"rejected_by_breaker"`
	DispatcherRSSMB    float64                `json:"dispatcher_rss_mb"`
	CPU                cpuReport              `json:"cpu_cores"`
	MaxLockWaitMs      float64                `json:"max_lock_wait_ms"`
	LockWaitsLogged    int                    `json:"lock_waits_logged"`
	LongestLockWait    *lockWait              `json:"longest_lock_wait,omitempty"`
	LockWaitSampledMs  float64                `json:"lock_wait_sampled_ms"`
	MaxIdleInTxMs      float64                `json:"max_idle_in_transaction_ms"`
	MaxIdleInTxSession string                 `json:"max_idle_in_transaction_session,omitempty"`
	LockWaitsByLock    map[string]waitSummary `json:"lock_waits_by_lock,omitempty"`
	ActivitySamples    int                    `json:"activity_samples"`

	Extra map[string]any    `json:"extra,omitempty"`
	Runs  []*scenarioResult `json:"runs,omitempty"`
	Error string            `json:"error,omitempty"`
}

// target is one goal the benchmark sets (docs/benchmarks.md) and how the
// run did.
type target struct {
	Scenario string  `json:"scenario"`
	Goal     string  `json:"goal"`
	Value    float64 `json:"value"`
	Measured string  `json:"measured"`
	Status   string  `json:"status"` // met, missed, or n/a (scenario not run or not exercised)
	Margin   string  `json:"margin,omitempty"`
}

func newResults(ctx context.Context, b *bench) *results {
	r := &results{
		Mode:         "full",
		Command:      "make bench",
		PayloadBytes: b.opts.payloadBytes,
		StartedAt:    time.Now().UTC().Truncate(time.Second),
		Commit:       gitCommit(ctx, b.root),
		Machine: machine{
			Cores:          runtime.NumCPU(),
			MemoryGiB:      memoryGiB(),
			CPU:            cpuModel(),
			Kernel:         kernel(),
			Postgres:       b.pg.version,
			Go:             runtime.Version(),
			LoadAvgAtStart: loadAvg(),
			Note:           "Postgres, the api, the dispatcher(s), the receiver and the load generator all share the machine; cpu_cores.other is what the rest of the machine used meanwhile",
		},
	}
	if b.opts.smoke {
		r.Mode, r.Command = "smoke", "make bench-smoke"
	}
	if len(b.opts.args) > 0 && !(len(b.opts.args) == 1 && b.opts.smoke) {
		r.Command = "go run ./internal/bench " + strings.Join(b.opts.args, " ")
	}
	return r
}

// find returns the result of a scenario that ran without error.
func (r *results) find(name string) *scenarioResult {
	for _, s := range r.Scenarios {
		if s.Name == name && s.Error == "" {
			return s
		}
	}
	return nil
}

// evaluate fills the headline figures and checks every target.
func evaluate(r *results) {
	s0, s1, rate, s2, s3, s4, s5, s6 := r.find("s0"), r.find("s1"), r.find("s1rate"), r.find("s2"), r.find("s3"), r.find("s4"), r.find("s5"), r.find("s6")
	add := func(t target) { r.Targets = append(r.Targets, t) }
	na := func(scenario, goal string) target {
		return target{Scenario: scenario, Goal: goal, Measured: "not run", Status: "n/a"}
	}

	if s0 != nil {
		r.S0NoopJobsPerS = s0.DeliveriesPerS
	}
	if s1 != nil {
		r.S1DeliveriesPerS, r.S1P99Ms, r.RoundtripsPerDelivery = s1.DeliveriesPerS, s1.LatencyP99Ms, s1.Roundtrips
	}
	if s0 != nil && s1 != nil && s0.DeliveriesPerS > 0 {
		v := s1.DeliveriesPerS / s0.DeliveriesPerS
		add(atLeast("s1", "S1 deliveries/s >= 0.5 x S0 no-op jobs/s", v, 0.5,
			fmt.Sprintf("%.2f x (%.0f / %.0f)", v, s1.DeliveriesPerS, s0.DeliveriesPerS)))
	} else {
		add(na("s1", "S1 deliveries/s >= 0.5 x S0 no-op jobs/s"))
	}

	var rts []string
	worst := -1.0
	if s1 != nil {
		rts = append(rts, fmt.Sprintf("S1 %.2f", s1.Roundtrips))
		worst = max(worst, s1.Roundtrips)
	}
	if s2 != nil {
		on, _ := s2.Extra["breaker_on_median_per_s"].(float64)
		off, _ := s2.Extra["breaker_off_median_per_s"].(float64)
		r.S2BreakerOnPerS, r.S2BreakerOffPerS = on, off
		if off > 0 {
			add(atLeast("s2", "S2 breaker on >= 0.9 x breaker off", on/off, 0.9, fmt.Sprintf("%.2f x (%.0f / %.0f, medians)", on/off, on, off)))
		}
		rtOn, _ := s2.Extra["breaker_on_roundtrips_per_delivery"].(float64)
		rtOff, _ := s2.Extra["breaker_off_roundtrips_per_delivery"].(float64)
		rts = append(rts, fmt.Sprintf("S2 on %.2f", rtOn), fmt.Sprintf("S2 off %.2f", rtOff))
		worst = max(worst, rtOn, rtOff)
	} else {
		add(na("s2", "S2 breaker on >= 0.9 x breaker off"))
	}
	if worst >= 0 {
		add(atMost("s1", "Postgres round trips per delivery <= 3 in S1/S2", worst, 3, strings.Join(rts, ", ")))
	} else {
		add(na("s1", "Postgres round trips per delivery <= 3 in S1/S2"))
	}

	rateGoal := "S1 at the offered rate: p99 accepted -> delivered < 250 ms"
	backlogGoal := "S1 at the offered rate: no growing backlog"
	if rate != nil {
		offered, _ := rate.Extra["offered_msgs_per_s"].(float64)
		rateGoal = fmt.Sprintf("S1 at %.0f messages/s for %.0fs: p99 accepted -> delivered < 250 ms", offered, rate.MeasuredS)
		backlogGoal = fmt.Sprintf("S1 at %.0f messages/s for %.0fs: no growing backlog", offered, rate.MeasuredS)
		r.S1RateP99Ms = rate.LatencyP99Ms
		add(below("s1rate", rateGoal, rate.LatencyP99Ms, 250, fmt.Sprintf("p99 %.1f ms (p50 %.1f ms)", rate.LatencyP99Ms, rate.LatencyP50Ms)))
		grow, _ := rate.Extra["growing_backlog"].(bool)
		slope, _ := rate.Extra["backlog_slope_per_s"].(float64)
		r.S1RateGrowingBacklog = grow
		t := target{Scenario: "s1rate", Goal: backlogGoal, Value: slope,
			Measured: fmt.Sprintf("slope %+.1f/s, accepted %.0f of %.0f msg/s", slope, rate.MessagesPerS, offered), Status: "met"}
		if grow {
			t.Status = "missed"
		}
		add(t)
	} else {
		add(na("s1rate", rateGoal))
		add(na("s1rate", backlogGoal))
	}

	if s3 != nil {
		r.S3MaxLockWaitMs = s3.MaxLockWaitMs
		detail := fmt.Sprintf("%.1f ms (%d waits over %d ms logged)", s3.MaxLockWaitMs, s3.LockWaitsLogged, lockWaitThreshold.Milliseconds())
		add(atMost("s3", "S3 no lock wait over 50 ms", s3.MaxLockWaitMs, 50, detail))
		if s1 != nil && s1.DeliveriesPerS > 0 {
			v := s3.DeliveriesPerS / s1.DeliveriesPerS
			add(atLeast("s3", "S3 other endpoints' deliveries/s within 10% of S1", v, 0.9, fmt.Sprintf("%.2f x (%.0f / %.0f)", v, s3.DeliveriesPerS, s1.DeliveriesPerS)))
		} else {
			add(na("s3", "S3 other endpoints' deliveries/s within 10% of S1"))
		}
	} else {
		add(na("s3", "S3 no lock wait over 50 ms"))
		add(na("s3", "S3 other endpoints' deliveries/s within 10% of S1"))
	}

	if s4 != nil {
		r.S4HealthyP99Ms, r.S4HealthyPerS = s4.LatencyP99Ms, s4.DeliveriesPerS
		if s1 != nil && s1.LatencyP99Ms > 0 {
			v := s4.LatencyP99Ms / s1.LatencyP99Ms
			add(atMost("s4", "S4 healthy p99 <= 2 x S1 p99", v, 2, fmt.Sprintf("%.2f x (%.1f / %.1f ms)", v, s4.LatencyP99Ms, s1.LatencyP99Ms)))
			w := s4.DeliveriesPerS / s1.DeliveriesPerS
			add(atLeast("s4", "S4 healthy deliveries/s >= 0.8 x S1", w, 0.8, fmt.Sprintf("%.2f x (%.0f / %.0f)", w, s4.DeliveriesPerS, s1.DeliveriesPerS)))
		} else {
			add(na("s4", "S4 healthy p99 <= 2 x S1 p99"))
			add(na("s4", "S4 healthy deliveries/s >= 0.8 x S1"))
		}
		inFlight := toFloat(s4.Extra["hang_max_in_flight"])
		add(atMost("s4", fmt.Sprintf("S4 hanging endpoint never holds more than MAX_PER_ENDPOINT (%d) workers", maxPerEndpoint), inFlight, maxPerEndpoint,
			fmt.Sprintf("%.0f in flight at most", inFlight)))
		goal := fmt.Sprintf("S4 breaker opens within window + 1 s (%.0f s) of the first timeout", (hangWindow + time.Second).Seconds())
		if after, ok := s4.Extra["breaker_open_after_s"].(float64); ok {
			add(atMost("s4", goal, after, (hangWindow + time.Second).Seconds(), fmt.Sprintf("opened %.2f s after the first timeout", after)))
		} else {
			add(target{Scenario: "s4", Goal: goal, Measured: "the breaker never opened", Status: "missed"})
		}
	} else {
		for _, g := range []string{"S4 healthy p99 <= 2 x S1 p99", "S4 healthy deliveries/s >= 0.8 x S1", "S4 hanging endpoint within its cap", "S4 breaker opens within window + 1 s"} {
			add(na("s4", g))
		}
	}

	if s5 != nil {
		probes := int(toFloat(s5.Extra["max_probes_in_flight"]))
		halfOpens := int(toFloat(s5.Extra["half_opens"]))
		r.S5MaxProbesInFlight = probes
		t := atMost("s5", "S5 never more than 1 probe in flight", float64(probes), 1, fmt.Sprintf("%d at most, over %d probes, %d half-opens", probes, int(toFloat(s5.Extra["probes"])), halfOpens))
		if halfOpens == 0 {
			t.Status, t.Measured = "missed", "not exercised: the breaker never went half-open"
		}
		add(t)
		add(atMost("s5", "S5 no idle-in-transaction session over 1 s", s5.MaxIdleInTxMs, 1000, fmt.Sprintf("%.0f ms longest (sampled every 50 ms)", s5.MaxIdleInTxMs)))
		locks := toFloat(s5.Extra["advisory_locks_after_run"])
		add(atMost("s5", "S5 no advisory lock left after the run", locks, 0, fmt.Sprintf("%.0f advisory locks", locks)))
	} else {
		for _, g := range []string{"S5 never more than 1 probe in flight", "S5 no idle-in-transaction session over 1 s", "S5 no advisory lock left after the run"} {
			add(na("s5", g))
		}
	}

	if s6 != nil {
		r.S6RSSMB = s6.DispatcherRSSMB
		add(atMost("s6", "S6 dispatcher RSS <= 150 MB", s6.DispatcherRSSMB, 150, fmt.Sprintf("%.1f MB peak", s6.DispatcherRSSMB)))
		left := toFloat(s6.Extra["old_bucket_rows_left"])
		perEndpoint := toFloat(s6.Extra["max_bucket_rows_per_endpoint"])
		bound := toFloat(s6.Extra["rows_per_endpoint_bound"])
		ran, _ := s6.Extra["prune_pass_expected"].(bool)
		t := target{Scenario: "s6", Goal: "S6 breaker bucket rows bounded (old buckets pruned)", Value: perEndpoint,
			Measured: fmt.Sprintf("at most %.0f rows per endpoint (bound %.0f); %.0f seeded old rows left", perEndpoint, bound, left)}
		switch {
		case perEndpoint > bound || (ran && left > 0):
			t.Status = "missed"
			if perEndpoint > bound {
				t.Margin = fmt.Sprintf("%.1f x the per-endpoint bound", perEndpoint/bound)
			}
		case !ran:
			t.Status = "met"
			t.Measured += " (run shorter than a prune pass: old rows not yet due)"
		default:
			t.Status = "met"
		}
		add(t)
	} else {
		add(na("s6", "S6 dispatcher RSS <= 150 MB"))
		add(na("s6", "S6 breaker bucket rows bounded (old buckets pruned)"))
	}
}

// atLeast checks value >= goal.
func atLeast(scenario, goal string, value, want float64, measured string) target {
	t := target{Scenario: scenario, Goal: goal, Value: round3(value), Measured: measured}
	if value >= want {
		t.Status = "met"
		if want > 0 {
			t.Margin = fmt.Sprintf("%.0f%% above", (value/want-1)*100)
		}
	} else {
		t.Status = "missed"
		t.Margin = fmt.Sprintf("%.0f%% short", (1-value/want)*100)
	}
	return t
}

// atMost checks value <= goal.
func atMost(scenario, goal string, value, want float64, measured string) target {
	t := target{Scenario: scenario, Goal: goal, Value: round3(value), Measured: measured}
	switch {
	case value <= want:
		t.Status = "met"
		if want > 0 {
			t.Margin = fmt.Sprintf("%.0f%% headroom", (1-value/want)*100)
		}
	case want > 0:
		t.Status = "missed"
		t.Margin = fmt.Sprintf("%.0f%% over", (value/want-1)*100)
	default:
		t.Status = "missed"
		t.Margin = fmt.Sprintf("%g over", value)
	}
	return t
}

// below checks value < goal.
func below(scenario, goal string, value, want float64, measured string) target {
	t := atMost(scenario, goal, value, want, measured)
	if value == want {
		t.Status = "missed"
	}
	return t
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case int:
		return float64(x)
	case int64:
		return float64(x)
	}
	return 0
}

// printReport writes the scenario and target tables as Markdown.
func printReport(w io.Writer, r *results) {
	fmt.Fprintf(w, "\n## hookd bench (%s) at %s\n\n", r.Mode, shortCommit(r.Commit))
	m := r.Machine
	fmt.Fprintf(w, "%d cores (%s), %.0f GiB, Linux %s, PostgreSQL %s, %s; load average at start %s\n\n",
		m.Cores, m.CPU, m.MemoryGiB, m.Kernel, m.Postgres, m.Go, m.LoadAvgAtStart)
	fmt.Fprintln(w, "| scenario | deliveries/s | p50 ms | p99 ms | round trips/delivery (api + dispatcher) | dispatcher RSS MB | CPU cores: pg / api / disp / bench / other |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---|")
	row := func(s *scenarioResult, label string) {
		if s.Error != "" {
			fmt.Fprintf(w, "| %s | failed: %s | | | | | |\n", label, oneLine(s.Error))
			return
		}
		rate := fmt.Sprintf("%.0f", s.DeliveriesPerS)
		p50, p99 := fmt.Sprintf("%.1f", s.LatencyP50Ms), fmt.Sprintf("%.1f", s.LatencyP99Ms)
		rss := fmt.Sprintf("%.0f", s.DispatcherRSSMB)
		rt := fmt.Sprintf("%.2f (%.2f + %.2f)", s.Roundtrips, s.RoundtripsAPI, s.RoundtripsDispatcher)
		c := s.CPU
		cpu := fmt.Sprintf("%.2f / %.2f / %.2f / %.2f / %.2f", c.Postgres, c.API, c.Dispatcher, c.Bench, c.Other)
		switch {
		case s.Name == "s0":
			rate += " jobs/s"
			p50, p99, rss = "-", "-", "-"
		case s.Name == "s2":
			rate += " (on, median)"
			rt = fmt.Sprintf("%.2f (on, median)", s.Roundtrips)
			cpu = "see runs"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", label, rate, p50, p99, rt, rss, cpu)
	}
	for _, s := range r.Scenarios {
		row(s, s.Title)
		for _, run := range s.Runs {
			row(run, "&nbsp;&nbsp;"+run.Name)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scenario | CPU core-ms per delivery: pg / api / disp / bench = total | commits per delivery | WAL KB per delivery | api statements per message | attempts | snoozed at the cap | refused by a breaker | longest lock wait ms (waits > 10 ms) |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---|")
	costs := func(s *scenarioResult, label string) {
		if s.Error != "" || s.Name == "s2" {
			return
		}
		c := s.CPUMsPerDelivery
		fmt.Fprintf(w, "| %s | %.3f / %.3f / %.3f / %.3f = %.3f | %.2f | %.1f | %.2f | %d | %d | %d | %.1f (%d) |\n",
			label, c.Postgres, c.API, c.Dispatcher, c.Bench, c.Total, s.CommitsPerDelivery, s.WALBytesPerDelivery/1024,
			s.APIStatementsPerMessage, s.Attempts, s.SnoozedAtCap, s.RejectedByBreaker, s.MaxLockWaitMs, s.LockWaitsLogged)
	}
	for _, s := range r.Scenarios {
		if s.Name == "s2" {
			for _, run := range s.Runs {
				costs(run, run.Name)
			}
			continue
		}
		costs(s, s.Title)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | measured | status |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, t := range r.Targets {
		status := t.Status
		if t.Margin != "" {
			status += " (" + t.Margin + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", t.Goal, t.Measured, status)
	}
}

func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return s
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// scrape fetches a Prometheus text page and sums every series of the named
// metrics.
func scrape(ctx context.Context, url string, names []string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape: %w", err)
	}
	defer resp.Body.Close()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, ok := strings.Cut(line, " ")
		if i := strings.IndexByte(line, '{'); i >= 0 {
			name = line[:i]
			_, rest, ok = strings.Cut(line[strings.LastIndexByte(line, '}'):], " ")
		}
		if !ok || !want[name] {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err == nil {
			out[name] += v
		}
	}
	return out, sc.Err()
}

// scrapeLines returns the lines of a Prometheus text page that contain
// substr and are not comments.
func scrapeLines(ctx context.Context, url, substr string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape: %w", err)
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); !strings.HasPrefix(line, "#") && strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out, sc.Err()
}

// gitCommit returns HEAD, with "-dirty" when the work tree has changes.
func gitCommit(ctx context.Context, root string) string {
	out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.CommandContext(ctx, "git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += "-dirty"
	}
	return c
}

func memoryGiB() float64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, _ := strconv.ParseFloat(strings.Fields(rest)[0], 64)
			return round1(kb / (1 << 20))
		}
	}
	return 0
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
