package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// results is bench-results.json.
type results struct {
	Mode         string `json:"mode"`
	Command      string `json:"command"`
	PayloadBytes int    `json:"payload_bytes"`
	// PGSettings are the -pg-setting lines the run added to the cluster's.
	PGSettings []string  `json:"pg_settings,omitempty"`
	Commit     string    `json:"commit"`
	StartedAt  time.Time `json:"started_at"`
	DurationS  float64   `json:"duration_s"`
	Machine    machine   `json:"machine"`

	S0NoopJobsPerS        float64 `json:"s0_noop_jobs_per_s"`
	S1DeliveriesPerS      float64 `json:"s1_deliveries_per_s"`
	S1P99Ms               float64 `json:"s1_p99_ms"`
	S1RateP99Ms           float64 `json:"s1_rate_p99_ms"`
	S1RateGrowingBacklog  bool    `json:"s1_rate_growing_backlog"`
	S1LowRateP99Ms        float64 `json:"s1_low_rate_p99_ms"`
	S0iJobsPerS           float64 `json:"s0i_jobs_per_s"`
	S9ScaleOut            float64 `json:"s9_four_over_one_dispatchers"`
	S2BreakerOnPerS       float64 `json:"s2_breaker_on_per_s"`
	S2BreakerOffPerS      float64 `json:"s2_breaker_off_per_s"`
	S1TracingOnPerS       float64 `json:"s1_tracing_on_per_s"`
	S1TracingOffPerS      float64 `json:"s1_tracing_off_per_s"`
	RoundtripsPerDelivery float64 `json:"roundtrips_per_delivery"`
	S3MaxLockWaitMs       float64 `json:"s3_max_lock_wait_ms"`
	S4HealthyP99Ms        float64 `json:"s4_healthy_p99_ms"`
	S4HealthyPerS         float64 `json:"s4_healthy_per_s"`
	S5MaxProbesInFlight   int     `json:"s5_max_probes_in_flight"`
	S6RSSMB               float64 `json:"s6_rss_mb"`
	S10MaxLockWaitMs      float64 `json:"s10_max_lock_wait_ms"`
	S10RowsLost           int64   `json:"s10_rows_lost"`
	// Duplicates is every scenario's duplicates summed.
	Duplicates int64 `json:"duplicates"`

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
	// LoadAvgMean and LoadAvgPeak are the 1-minute load average during
	// the run, sampled every 10 s; BusyOK says the run was told to go on
	// although the machine was busy at its start.
	LoadAvgMean float64 `json:"loadavg_mean"`
	LoadAvgPeak float64 `json:"loadavg_peak"`
	BusyOK      bool    `json:"busy_ok,omitempty"`
	Note        string  `json:"note"`
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
	// Duplicates counts the 2xx answers the receiver gave a webhook-id and
	// endpoint it had answered 2xx before, over the whole scenario.
	Duplicates int64 `json:"duplicates"`
	// Faults is set for the scenarios whose receiver fails on purpose.
	Faults bool `json:"faults,omitempty"`

	Roundtrips              float64     `json:"roundtrips_per_delivery"`
	RoundtripsAPI           float64     `json:"roundtrips_api_per_delivery"`
	RoundtripsDispatcher    float64     `json:"roundtrips_dispatcher_per_delivery"`
	RoundtripDeliveries     int64       `json:"roundtrip_deliveries"`
	APIStatementsPerMessage float64     `json:"api_statements_per_message"`
	TopStatements           []statement `json:"top_statements,omitempty"`
	// FrequentDispatcherStatements are the dispatchers' 12 most frequent
	// statements (calls, not time): what their statements per delivery
	// are made of.
	FrequentDispatcherStatements []statement `json:"frequent_dispatcher_statements,omitempty"`
	CommitsPerDelivery           float64     `json:"commits_per_delivery"`
	WALBytesPerDelivery          float64     `json:"wal_bytes_per_delivery"`
	// WALFPIPerDelivery counts full-page images (a page's first change
	// after a checkpoint, up to 8 KB each) per delivery: the share of the
	// WAL that depends on the checkpoint interval, not on the rows.
	WALFPIPerDelivery float64 `json:"wal_fpi_per_delivery"`
	WALSyncsPerS      float64 `json:"wal_syncs_per_s"`
	CPUMsPerDelivery  cpuMs   `json:"cpu_ms_per_delivery"`
	// PostgresCPUMsByConnection splits CPUMsPerDelivery.Postgres by whose
	// backend spent it (postgresConnection): the api's statements are
	// the same per message in every configuration, so theirs is a control
	// for what the machine charges PostgreSQL as processes are added.
	PostgresCPUMsByConnection map[string]float64 `json:"postgres_cpu_ms_per_delivery_by_connection,omitempty"`
	// DispatcherSleepsPerDelivery is the dispatchers' threads' voluntary
	// context switches per delivery (cpuSnap.sleeps): how often a
	// dispatcher's thread runs out of work and waits, which grows as a
	// fleet divides the same load among more processes.
	DispatcherSleepsPerDelivery float64 `json:"dispatcher_sleeps_per_delivery,omitempty"`

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
		PGSettings:   b.opts.pgSettings,
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
	if slices.Contains(b.opts.only, "s8") && !b.opts.smoke {
		r.Mode, r.Command = "month", "make bench-month"
	}
	if slices.Equal(b.opts.only, []string{"soak"}) && !b.opts.smoke {
		r.Mode, r.Command = "soak", "make soak"
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

func round1(v float64) float64 { return math.Round(v*10) / 10 }

func round2(v float64) float64 { return math.Round(v*100) / 100 }

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

func round4(v float64) float64 { return math.Round(v*10000) / 10000 }
