package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/delivery/deliverytest"
)

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	require.Equal(t, 50*time.Millisecond, percentile(d, 0.5))
	require.Equal(t, 99*time.Millisecond, percentile(d, 0.99))
	require.Equal(t, 100*time.Millisecond, percentile(d, 1))
	require.Equal(t, time.Millisecond, percentile(d, 0))
	require.Zero(t, percentile(nil, 0.99))
}

func TestBacklogTrend(t *testing.T) {
	var flat, rising []backlogSample
	for i := 1; i <= 120; i++ {
		flat = append(flat, backlogSample{AtS: float64(i), Undelivered: 40})
		rising = append(rising, backlogSample{AtS: float64(i), Unaccepted: int64(100 * i)})
	}
	slope, tail := backlogTrend(flat, 2*time.Minute)
	require.InDelta(t, 0, slope, 1e-9)
	require.InDelta(t, 40, tail, 1e-9)
	require.False(t, growing(slope, 2000, 2000))

	slope, _ = backlogTrend(rising, 2*time.Minute)
	require.InDelta(t, 100, slope, 1e-6)
	require.True(t, growing(slope, 2000, 2000))
	require.True(t, growing(0, 2000, 1900), "an api accepting under 98% of the offer is a growing backlog")
}

func TestFlushLags(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	events := []delivered{
		{msg: "a", path: "/g1/t0/e0", at: ms(10)},
		{msg: "b", path: "/g0/t0/e0", at: ms(12)},
		{msg: "c", path: "/g1/t0/e0", at: ms(20)},
		{msg: "d", path: "/g1/t0/e0", at: ms(200)},
	}
	visible := []visibleSample{{at: ms(50), total: 0}, {at: ms(100), total: 2}, {at: ms(150), total: 2}}
	// The third outcome never became visible: it is left out.
	require.Equal(t, []time.Duration{ms(80), ms(90)}, flushLags(events, "/g1/t0/e0", visible))
}

func TestAnalyseProbes(t *testing.T) {
	clk := newClock()
	at := func(d time.Duration) time.Time { return clk.wall(d) }
	s := time.Second
	until := at(3 * s)
	trs := []transition{
		{at: at(1 * s), to: "open", openUntil: &until},
		{at: at(3100 * time.Millisecond), to: "half_open"},
		{at: at(5 * s), to: "closed"},
	}
	spans := []span{
		{arrive: 500 * time.Millisecond, end: 600 * time.Millisecond, status: 200},   // closed
		{arrive: 1100 * time.Millisecond, end: 1200 * time.Millisecond, status: 500}, // open, before open_until
		{arrive: 3100 * time.Millisecond, end: 3300 * time.Millisecond, status: 200}, // probe
		{arrive: 3300 * time.Millisecond, end: 3500 * time.Millisecond, status: 200}, // probe, starts as the last ends
		{arrive: 3400 * time.Millisecond, end: 3450 * time.Millisecond, status: 200}, // probe overlapping
		{arrive: 6 * s, end: 6100 * time.Millisecond, status: 200},                   // closed again
	}
	pa := analyseProbes(spans, trs, clk)
	require.Equal(t, 3, pa.probes)
	require.Equal(t, 1, pa.whileOpen)
	require.Equal(t, 2, pa.maxInFlight)
	require.Equal(t, 1, pa.halfOpens)
}

func TestLockWaits(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "server.log")
	require.NoError(t, os.WriteFile(log, []byte(`2026-12-01 00:00:00.000 UTC [10] bench_s3 LOG:  process 10 still waiting for ExclusiveLock on extension of relation 16444 of database 16749 after 10.100 ms
2026-12-01 00:00:00.000 UTC [10] bench_s3 DETAIL:  Process holding the lock: 11. Wait queue: 10.
2026-12-01 00:00:00.050 UTC [10] bench_s3 LOG:  process 10 acquired ExclusiveLock on extension of relation 16444 of database 16749 after 57.315 ms
2026-12-01 00:00:00.100 UTC [12] bench_s1 LOG:  process 12 acquired ShareLock on transaction 99 after 80.000 ms
2026-12-01 00:00:00.100 UTC [12] bench_s1 CONTEXT:  while updating tuple (0,1) in relation "breaker_states"
2026-12-01 00:00:00.200 UTC [13] bench_s3 LOG:  process 13 acquired ShareLock on transaction 100 after 20.5 ms
2026-12-01 00:00:00.200 UTC [13] bench_s3 CONTEXT:  while updating tuple (0,2) in relation "deliveries"
`), 0o644))
	c := &cluster{logPath: log}
	waits, err := c.lockWaits("bench_s3", 0)
	require.NoError(t, err)
	require.Len(t, waits, 3)
	require.Equal(t, lockWait{Ms: 10.1, Lock: "ExclusiveLock on extension of relation 16444 of database 16749"}, waits[0])
	require.True(t, waits[1].Acquired)
	require.InDelta(t, 57.315, waits[1].Ms, 1e-9)
	require.Equal(t, `while updating tuple (0,2) in relation "deliveries"`, waits[2].Context)

	sum := summariseWaits(waits)
	require.Equal(t, waitSummary{Waits: 2, MaxMs: 57.3}, sum["ExclusiveLock on extension of relation 16444 of database 16749"])
	require.Equal(t, waitSummary{Waits: 1, MaxMs: 20.5}, sum[`ShareLock on a transaction (while updating tuple (0,2) in relation "deliveries")`])
}

func TestTargets(t *testing.T) {
	require.Equal(t, "met", atLeast("s", "g", 0.6, 0.5, "").Status)
	require.Equal(t, "missed", atLeast("s", "g", 0.4, 0.5, "").Status)
	require.Equal(t, "20% short", atLeast("s", "g", 0.4, 0.5, "").Margin)
	require.Equal(t, "met", atMost("s", "g", 3, 3, "").Status)
	require.Equal(t, "missed", atMost("s", "g", 1, 0, "").Status)
	require.Equal(t, "missed", below("s", "g", 250, 250, "").Status)
}

func TestMessageBody(t *testing.T) {
	b := messageBody("t-1", 42, defaultPayloadSize)
	require.Contains(t, string(b), `"tenant_id":"t-1"`)
	// The payload is the object after "payload":, exactly the asked size.
	i := len(`{"tenant_id":"t-1","event_type":"bench.event","payload":`)
	require.Len(t, b[i:len(b)-1], defaultPayloadSize)
}

func TestReceiverCountsDuplicates(t *testing.T) {
	t.Parallel()
	secret, err := delivery.GenerateSecret(rand.Reader)
	require.NoError(t, err)
	key, err := delivery.ParseSecret(secret)
	require.NoError(t, err)
	// The second message's first answer is a 500: only 2xx answers count.
	var failed atomic.Bool
	rcv, err := newReceiver(newClock(), secret, func(r *deliverytest.Request) deliverytest.Response {
		if r.MsgID == "msg_b" && failed.CompareAndSwap(false, true) {
			return deliverytest.Response{Status: http.StatusInternalServerError}
		}
		return deliverytest.Response{Status: http.StatusOK}
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rcv.close()) })

	post := func(msgID, path string, wantStatus int) {
		t.Helper()
		body := []byte(`{"seq":1}`)
		ts := time.Now()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, rcv.url(path), bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("webhook-id", msgID)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
		req.Header.Set("webhook-signature", delivery.Sign(msgID, ts, body, key))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, wantStatus, resp.StatusCode)
	}
	post("msg_a", "/g0/t0/e0", http.StatusOK)
	post("msg_a", "/g0/t0/e1", http.StatusOK) // the same message to another endpoint: a fan-out, not a duplicate
	post("msg_b", "/g0/t0/e0", http.StatusInternalServerError)
	post("msg_b", "/g0/t0/e0", http.StatusOK) // a retry after a failure: not a duplicate
	require.Zero(t, rcv.duplicates())

	post("msg_a", "/g0/t0/e0", http.StatusOK)
	post("msg_a", "/g0/t0/e0", http.StatusOK)
	post("msg_b", "/g0/t0/e0", http.StatusOK)
	require.EqualValues(t, 3, rcv.duplicates())
	require.EqualValues(t, 6, rcv.total(), "duplicates still count as 2xx answers")
}

func TestNoDuplicatesTarget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		scenarios []*scenarioResult
		status    string
		value     float64
	}{
		{"none ran", nil, "n/a", 0},
		{"clean", []*scenarioResult{{Name: "s1"}, {Name: "s7"}}, "met", 0},
		{"duplicates only with faults", []*scenarioResult{{Name: "s1"}, {Name: "s4", Faults: true, Duplicates: 2}}, "met", 0},
		{"a fault-free duplicate", []*scenarioResult{{Name: "s1", Duplicates: 1}, {Name: "s3"}}, "missed", 1},
		{"a failed scenario is not counted", []*scenarioResult{{Name: "s1"}, {Name: "s3", Duplicates: 5, Error: "boom"}}, "met", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := noDuplicates(tc.scenarios)
			require.Equal(t, tc.status, got.Status, got.Measured)
			require.InDelta(t, tc.value, got.Value, 1e-9)
			require.Equal(t, duplicatesGoal, got.Goal)
		})
	}
}

func TestSoakOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		args     []string
		duration time.Duration
		rate     float64
		err      string
	}{
		{name: "defaults", duration: 30 * time.Minute, rate: 20},
		{name: "shorter", args: []string{"-soak-duration", "10m"}, duration: 10 * time.Minute, rate: 20},
		{name: "rate", args: []string{"-soak-rate", "5"}, duration: 30 * time.Minute, rate: 5},
		{name: "negative", args: []string{"-soak-duration", "-1m"}, err: "must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o, err := parseOptions(tc.args, io.Discard)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			p := fullPlan.withSoak(o)
			require.Equal(t, tc.duration, p.soakDuration)
			require.InDelta(t, tc.rate, p.soakRate, 1e-9)
		})
	}
}

func TestPGSettingOption(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want []string
		err  string
	}{
		{name: "none"},
		{name: "two", args: []string{"-pg-setting", "wal_compression=lz4", "-pg-setting", " checkpoint_timeout = 15min "},
			want: []string{"wal_compression = 'lz4'", "checkpoint_timeout = '15min'"}},
		{name: "no value", args: []string{"-pg-setting", "wal_compression="}, err: "want name=value"},
		{name: "no equals", args: []string{"-pg-setting", "wal_compression"}, err: "want name=value"},
		{name: "a quote", args: []string{"-pg-setting", "work_mem=1'; fsync = off"}, err: "no quotes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o, err := parseOptions(tc.args, io.Discard)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, o.pgSettings)
		})
	}
}

func TestSoakVerdicts(t *testing.T) {
	t.Parallel()
	minute := func(rss float64, table int64, p99 float64) soakMinute {
		return soakMinute{
			Dispatcher:     map[string]float64{"go_goroutines": 100, "process_resident_memory_bytes": rss},
			API:            map[string]float64{"go_goroutines": 50, "process_resident_memory_bytes": 30 << 20},
			GoroutineFloor: map[string]float64{"dispatcher": 90, "api": 20},
			Tables:         map[string]int64{"deliveries": table, "tiny": 16 << 10},
			P99Ms:          p99,
		}
	}
	status := func(vs []soakVerdict) map[string]string {
		out := map[string]string{}
		for _, v := range vs {
			out[v.Series] = v.Status
		}
		return out
	}
	// Growth in the first two thirds does not count; the last third is flat.
	var flat []soakMinute
	for i := range 9 {
		flat = append(flat, minute(float64(20+min(i, 6))*(1<<20), int64(min(i, 6))*(100<<20)+(100<<20), 100))
	}
	got := status(soakVerdicts(flat, []string{"deliveries", "tiny"}))
	for _, s := range []string{"dispatcher process_resident_memory_bytes", "table deliveries", "table tiny", "p99 latency trend", "api go_goroutines floor", "dispatcher go_goroutines floor"} {
		require.Equal(t, "met", got[s], s)
	}

	// RSS climbing 20% over the last third, a table doubling, p99 rising
	// minute after minute.
	grow := append([]soakMinute(nil), flat[:6]...)
	grow = append(grow, minute(26<<20, 700<<20, 130), minute(29<<20, 1000<<20, 160), minute(32<<20, 1400<<20, 400))
	got = status(soakVerdicts(grow, []string{"deliveries", "tiny"}))
	require.Equal(t, "missed", got["dispatcher process_resident_memory_bytes"])
	require.Equal(t, "missed", got["table deliveries"])
	require.Equal(t, "missed", got["p99 latency trend"])
	require.Equal(t, "met", got["table tiny"])

	// One slow minute is no trend; a snapshot of goroutines catching work
	// in flight, or a minute whose backlog raised its floor, is no leak.
	noisy := slices.Clone(flat)
	noisy[7] = minute(26<<20, 700<<20, 900)
	noisy[7].Dispatcher["go_goroutines"] = 330
	noisy[7].GoroutineFloor = map[string]float64{"dispatcher": 177, "api": 20}
	noisy[8].API["go_goroutines"] = 90
	noisy[6].GoroutineFloor = map[string]float64{"dispatcher": 93, "api": 18}
	got = status(soakVerdicts(noisy, nil))
	require.Equal(t, "met", got["p99 latency trend"])
	require.Equal(t, "met", got["dispatcher go_goroutines floor"])
	require.Equal(t, "met", got["api go_goroutines floor"])

	// A floor that climbs is a leak, small as the process is.
	leak := slices.Clone(flat)
	for i := 6; i < 9; i++ {
		leak[i] = minute(26<<20, 700<<20, 100)
		leak[i].GoroutineFloor = map[string]float64{"dispatcher": 90 + float64(i-5)*20, "api": 20 + float64(i-5)*8}
	}
	got = status(soakVerdicts(leak, nil))
	require.Equal(t, "missed", got["dispatcher go_goroutines floor"])
	require.Equal(t, "missed", got["api go_goroutines floor"])

	// A partitioned table read on either side of a drop is flat while its
	// peak is; a peak that grows is not.
	drops := slices.Clone(flat)
	for i := 6; i < 9; i++ {
		drops[i] = minute(26<<20, int64(600-100*(i%2))<<20, 100)
		drops[i].TablePeaks = map[string]int64{"deliveries": 600 << 20}
	}
	require.Equal(t, "met", status(soakVerdicts(drops, []string{"deliveries"}))["table deliveries"])
	drops[8].TablePeaks = map[string]int64{"deliveries": 700 << 20}
	require.Equal(t, "missed", status(soakVerdicts(drops, []string{"deliveries"}))["table deliveries"])

	// A table of a few pages moving by a page is flat (the absolute slack).
	pages := []soakMinute{minute(1, 8<<10, 1), minute(1, 16<<10, 1), minute(1, 24<<10, 1)}
	require.Equal(t, "met", status(soakVerdicts(pages, []string{"deliveries"}))["table deliveries"])
	require.Equal(t, "missed", status(soakVerdicts(nil, nil))["p99 latency trend"], "no samples is no evidence")
	require.Equal(t, "missed", status(soakVerdicts(nil, nil))["api go_goroutines floor"], "no samples is no evidence")
}

// TestScaleOutTargetNamesEachConfigurationsLockWait: S9's target reports
// the longest lock wait of every configuration it ran, not only the worst.
func TestScaleOutTargetNamesEachConfigurationsLockWait(t *testing.T) {
	t.Parallel()
	s9 := &scenarioResult{Name: "s9", MaxLockWaitMs: 40.5,
		Extra: map[string]any{"four_over_one_dispatchers": 0.95, "deliveries_per_s_by_config": map[string]float64{"1a1d": 1000, "1a2d": 980, "1a4d": 950, "2a4d": 940}},
		Runs: []*scenarioResult{
			{Name: "s9 1 api x 1 dispatchers", MaxLockWaitMs: 3.2},
			{Name: "s9 1 api x 4 dispatchers", MaxLockWaitMs: 40.5},
		}}
	r := &results{Scenarios: []*scenarioResult{s9}}
	evaluate(r)
	i := slices.IndexFunc(r.Targets, func(t target) bool { return t.Scenario == "s9" })
	require.GreaterOrEqual(t, i, 0)
	require.Equal(t, "met", r.Targets[i].Status)
	require.Contains(t, r.Targets[i].Measured, "1 api x 1 dispatchers 3.2, 1 api x 4 dispatchers 40.5")
}

// TestScaleOutTargetsFromRounds: S9's five targets read the medians of
// its alternated rounds, quote their spread, and a dispatcher that never
// reached its steady rate misses the ramp target.
func TestScaleOutTargetsFromRounds(t *testing.T) {
	t.Parallel()
	rounds := func(med, lo, hi float64) map[string]any {
		return map[string]any{"median": med, "min": lo, "max": hi, "rounds": 3}
	}
	s9 := &scenarioResult{Name: "s9", Extra: map[string]any{
		"four_over_one_dispatchers":                            0.93,
		"four_over_one_dispatchers_rounds":                     rounds(0.93, 0.88, 0.97),
		"two_over_one_dispatchers_rounds":                      rounds(0.94, 0.9, 1.0),
		"postgres_cpu_four_over_one_rounds":                    rounds(1.2, 1.1, 1.4),
		"dispatcher_statements_four_over_one":                  rounds(1.3, 1.2, 1.3),
		"postgres_cpu_of_api_connections_four_over_one":        rounds(1.15, 1.1, 1.2),
		"postgres_cpu_of_dispatcher_connections_four_over_one": rounds(1.25, 1.2, 1.5),
		"dispatcher_cpu_four_over_one":                         rounds(1.28, 1.2, 1.3),
		"api_cpu_four_over_one":                                rounds(1.08, 1.0, 1.1),
		"load_generator_cpu_four_over_one":                     rounds(1.1, 1.0, 1.2),
		"four_over_one_at_machine_speed":                       rounds(0.96, 0.91, 0.98),
		"dispatcher_sleeps_per_delivery_by_config":             map[string]float64{"1a1d": 0.37, "1a2d": 0.8, "1a4d": 1.46, "2a4d": 1.86},
		"deliveries_per_s_by_config":                           map[string]float64{"1a1d": 1000, "1a2d": 940, "1a4d": 930, "2a4d": 900},
		"added_dispatcher_ramp_s":                              1.5,
		"added_dispatcher_steady_per_s":                        400.0,
	}}
	// Read back from JSON as bench-results.json is.
	raw, err := json.Marshal(s9)
	require.NoError(t, err)
	var back scenarioResult
	require.NoError(t, json.Unmarshal(raw, &back))
	for _, sc := range []*scenarioResult{s9, &back} {
		r := &results{Scenarios: []*scenarioResult{sc}}
		evaluate(r)
		got := map[string]target{}
		for _, tg := range r.Targets {
			if tg.Scenario == "s9" {
				got[tg.Goal] = tg
			}
		}
		require.Len(t, got, 5)
		four := got["S9 4 dispatchers' deliveries/s >= 0.9 x 1 dispatcher's (median of alternated rounds)"]
		require.Equal(t, "met", four.Status)
		require.Contains(t, four.Measured, "(0.88-0.97 over 3 rounds)")
		require.Contains(t, four.Measured, "CPU per delivery 4 over 1: the dispatchers' 1.28 x, PostgreSQL's 1.20 x, the api's 1.08 x and the load generator's 1.10 x")
		require.Contains(t, four.Measured, "the dispatchers' threads slept 0.37, 0.80 and 1.46 times a delivery at 1, 2 and 4 dispatchers (medians)")
		require.Contains(t, four.Measured, "at equal machine speed (all CPU per delivery counted against the load generator's in the same window) 0.96 x (0.91-0.98 over 3 rounds)")
		require.Equal(t, "missed", got["S9 2 dispatchers' deliveries/s >= 0.95 x 1 dispatcher's (median of alternated rounds)"].Status)
		pg := got["S9 PostgreSQL CPU per delivery at 4 dispatchers <= 1.25 x at 1"]
		require.Equal(t, "met", pg.Status)
		require.Contains(t, pg.Measured, "the api's connections (the same statements: a control) 1.15 x (1.10-1.20 over 3 rounds), the dispatchers' 1.25 x (1.20-1.50 over 3 rounds)")
		require.Equal(t, "missed", got["S9 dispatcher statements per delivery at 4 dispatchers <= 1.25 x at 1"].Status)
		require.Equal(t, "met", got["S9 a dispatcher added to a loaded fleet reaches full rate within 2 s of its start"].Status)
	}
	s9.Extra["added_dispatcher_ramp_s"] = -1.0
	r := &results{Scenarios: []*scenarioResult{s9}}
	evaluate(r)
	i := slices.IndexFunc(r.Targets, func(t target) bool { return strings.Contains(t.Goal, "full rate") })
	require.Equal(t, "missed", r.Targets[i].Status)
}

// TestScaleRoundsSetAsideADisturbedRound: a round in which the rest of
// the machine took a share of the cores is kept in the runs, left out of
// the figures and run again in its direction; one dispatcher runs between
// the windows it is compared with; rounds past the spares give up. The
// smoke plan, which make test runs beside other work, sets none aside.
func TestScaleRoundsSetAsideADisturbedRound(t *testing.T) {
	t.Parallel()
	type call struct {
		round int
		key   string
	}
	runRounds := func(rounds int, otherCores float64, disturbed func(round int) bool) (*scenarioResult, []map[string]*scenarioResult, int, []call, error) {
		var calls []call
		n := 0
		res := &scenarioResult{}
		byRound, setAside, err := runScaleRounds(res, rounds, otherCores, slog.New(slog.DiscardHandler), func(c scaleConfig) (*scenarioResult, error) {
			round := n / len(scaleConfigs)
			n++
			calls = append(calls, call{round, c.key()})
			r := &scenarioResult{Name: "s9 " + c.key(), DeliveriesPerS: float64(1000 + round)}
			if disturbed(round) {
				r.CPU.Other = 0.9
			}
			return r, nil
		})
		return res, byRound, setAside, calls, err
	}
	runWith := func(disturbed func(round int) bool) (*scenarioResult, []map[string]*scenarioResult, int, []call, error) {
		return runRounds(3, fullPlan.s9OtherCores, disturbed)
	}

	res, byRound, setAside, calls, err := runWith(func(round int) bool { return round == 1 })
	require.NoError(t, err)
	require.Equal(t, 1, setAside)
	require.Len(t, byRound, 3)
	require.Len(t, res.Runs, 16, "the set-aside round's runs are kept in the results")
	for _, got := range byRound {
		require.NotEqual(t, 1001.0, got["1a1d"].DeliveriesPerS, "the disturbed round is not in the figures")
	}
	require.Contains(t, res.Runs[4].Name, "(round 2) (set aside: the rest of the machine used 0.90 cores)")
	order := func(round int) []string {
		var keys []string
		for _, c := range calls {
			if c.round == round {
				keys = append(keys, c.key)
			}
		}
		return keys
	}
	forward := []string{"1a2d", "1a1d", "1a4d", "2a4d"}
	require.Equal(t, forward, order(0))
	require.Equal(t, []string{"2a4d", "1a4d", "1a1d", "1a2d"}, order(1))
	require.Equal(t, order(1), order(2), "the round run in place of one set aside runs in its direction")
	require.Equal(t, forward, order(3))

	_, _, setAside, calls, err = runWith(func(int) bool { return true })
	require.ErrorContains(t, err, "every round set aside")
	require.Equal(t, 5, setAside)
	require.Len(t, calls, 5*len(scaleConfigs), "no more than the spare rounds are run")

	// make test's smoke run shares the machine with other work (one core
	// busy, say): its round is kept, or S9 would fail make test.
	_, byRound, setAside, calls, err = runRounds(smokePlan.s9Rounds, smokePlan.s9OtherCores, func(int) bool { return true })
	require.NoError(t, err)
	require.Zero(t, setAside)
	require.Len(t, byRound, 1)
	require.Len(t, calls, len(scaleConfigs))
}

// TestMaintainerRestartTargets: S10's targets read its lock wait, its
// rows lost and its p99 against the p99 before the restart.
func TestMaintainerRestartTargets(t *testing.T) {
	t.Parallel()
	s10 := &scenarioResult{Name: "s10", MaxLockWaitMs: 120, LatencyP99Ms: 90,
		Extra: map[string]any{"rows_lost": int64(3), "accepted_messages": int64(500), "p99_before_restart_ms": 60.0, "catch_up_s": 1.5}}
	r := &results{Scenarios: []*scenarioResult{s10}}
	evaluate(r)
	status := map[string]string{}
	for _, tg := range r.Targets {
		if tg.Scenario == "s10" {
			status[tg.Goal] = tg.Status
		}
	}
	require.Len(t, status, 3)
	require.Equal(t, "met", status["S10 longest lock wait while the maintainer catches up after downtime <= 250 ms"])
	require.Equal(t, "missed", status["S10 rows lost across the maintainer's restart = 0"])
	require.Equal(t, "met", status["S10 p99 accepted -> delivered from the restart on <= 2 x before it"])
	require.Equal(t, 120.0, r.S10MaxLockWaitMs)
	require.Equal(t, int64(3), r.S10RowsLost)
}

func TestPairOrder(t *testing.T) {
	t.Parallel()
	require.Equal(t, []bool{false, true}, pairOrder(1))
	require.Equal(t, []bool{false, true, true, false, false, true}, pairOrder(3))
}

// TestShadowCostTarget: S2s's verdict is the shadow's cost bound (twice
// its busy time per outcome at S1's rate, over the cores), with the
// alternated runs beside it.
func TestShadowCostTarget(t *testing.T) {
	t.Parallel()
	// 1 s busy for 10,000 outcomes at 1,000/s on 2 cores: 2*1e-4*1000/2 = 10%.
	require.InDelta(t, 0.1, shadowCostBound(1, 10_000, 1000, 2), 1e-12)
	require.Zero(t, shadowCostBound(1, 0, 1000, 2))

	for _, tc := range []struct {
		bound  float64
		status string
	}{{0.8, "met"}, {5, "met"}, {5.1, "missed"}} {
		s2s := &scenarioResult{Name: "s2s", Extra: map[string]any{
			"shadow_on_median_per_s": 900.0, "shadow_off_median_per_s": 1000.0,
			"shadow_cost_bound_pct": tc.bound, "shadow_busy_s": 0.2, "shadow_fed": 5000.0, "cores": 2,
		}, Runs: []*scenarioResult{
			{Name: "s2s #1 shadow=false", DeliveriesPerS: 1000}, {Name: "s2s #2 shadow=true", DeliveriesPerS: 800},
			{Name: "s2s #3 shadow=true", DeliveriesPerS: 1000}, {Name: "s2s #4 shadow=false", DeliveriesPerS: 1100},
		}}
		r := &results{Scenarios: []*scenarioResult{s2s}}
		evaluate(r)
		i := slices.IndexFunc(r.Targets, func(tg target) bool { return tg.Scenario == "s2s" })
		require.GreaterOrEqual(t, i, 0)
		require.Equal(t, tc.status, r.Targets[i].Status, tc.bound)
		require.Contains(t, r.Targets[i].Measured, "0.90 x")
		require.Contains(t, r.Targets[i].Measured, "10% off, 25% on")
	}
}

// TestMachineBusyReadsTheMachine: the busy check reads a load average and
// the cores in use within the machine's, and a full run can be told to go
// on regardless.
func TestMachineBusyReadsTheMachine(t *testing.T) {
	t.Parallel()
	load, err := loadAvg1()
	require.NoError(t, err)
	require.GreaterOrEqual(t, load, 0.0)
	used, err := coresInUse(context.Background(), 200*time.Millisecond)
	require.NoError(t, err)
	require.GreaterOrEqual(t, used, 0.0)
	require.LessOrEqual(t, used, float64(numCPU())+0.01)
	o, err := parseOptions([]string{"-busy-ok", "-only", "s1"}, io.Discard)
	require.NoError(t, err)
	require.True(t, o.busyOK)
	l := recordLoad(time.Millisecond)
	mean, peak := l.finish()
	require.GreaterOrEqual(t, peak, mean)
}

// TestLongTransactionFigures: S13's rates come from the per-second
// samples between two points (the run starting at 0 with none), and the
// drain is counted from the transaction's end to the first sample back
// under the limit.
func TestLongTransactionFigures(t *testing.T) {
	t.Parallel()
	samples := []deliveredSample{{AtS: 1, Delivered: 100, Backlog: 5}, {AtS: 2.1, Delivered: 210, Backlog: 6}, {AtS: 3, Delivered: 300, Backlog: 400},
		{AtS: 4, Delivered: 350, Backlog: 300}, {AtS: 5, Delivered: 500, Backlog: 8}}
	require.InDelta(t, 100, rateBetween(samples, 0, 2), 0.01, "from the start to the first sample past 2 s")
	require.InDelta(t, 100, rateBetween(samples, 3, 5), 0.01)
	require.Zero(t, rateBetween(nil, 0, 1))
	require.Equal(t, int64(5), medianBacklog(samples, 0, 2.1))
	require.Equal(t, 2.0, drainedAfter(samples, 3, 10))
	require.Equal(t, -1.0, drainedAfter(samples, 3, 1))
	require.Equal(t, -1.0, drainedAfter(samples, -1, 10), "a hold that never ended")
}

// TestPostgresCPUByConnection: PostgreSQL's CPU between two snapshots is
// split by whose backend spent it, named by application_name; the
// server's own processes, and any not named at the end (the postmaster),
// are background; the bench's other processes are not PostgreSQL's.
func TestPostgresCPUByConnection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ backendType, app, want string }{
		{"client backend", "hookd-api", "api"},
		{"client backend", "hookd-api-token", "api"},
		{"client backend", "hookd-dispatcher", "dispatcher"},
		{"client backend", "hookd-locks/dispatcher-2", "dispatcher"},
		{"client backend", "hookd-ledger/dispatcher-1", "ledger"},
		{"client backend", "bench", "bench"},
		{"client backend", "psql", "other"},
		{"autovacuum worker", "", "background"},
		{"walwriter", "", "background"},
	} {
		require.Equal(t, tc.want, postgresConnection(tc.backendType, tc.app), "%s %q", tc.backendType, tc.app)
	}
	a := cpuSnap{byPID: map[int]float64{1: 10, 2: 5, 3: 1, 9: 7}, role: map[int]string{1: "postgres", 2: "postgres", 3: "postgres", 9: "dispatcher"}}
	z := cpuSnap{byPID: map[int]float64{1: 11, 2: 7, 3: 4, 4: 0.5, 9: 9}, role: map[int]string{1: "postgres", 2: "postgres", 3: "postgres", 4: "postgres", 9: "dispatcher"}}
	got := postgresCPUByConnection(a, z, map[int]string{2: "api", 3: "ledger", 4: "ledger"})
	require.Equal(t, map[string]float64{"background": 1, "api": 2, "ledger": 3.5}, got)
}

// TestDispatcherSleeps: the dispatchers' thread sleeps between two
// snapshots count a process that started in between from zero and leave
// out one that exited; threadSleeps reads every thread of a live process.
func TestDispatcherSleeps(t *testing.T) {
	t.Parallel()
	a := cpuSnap{sleeps: map[int]int64{1: 100, 2: 50, 3: 70}}
	z := cpuSnap{sleeps: map[int]int64{1: 130, 2: 55, 4: 9}}
	require.Equal(t, int64(30+5+9), dispatcherSleeps(a, z))
	require.Positive(t, threadSleeps(os.Getpid()), "the test process's threads have slept")
	require.Zero(t, threadSleeps(-1))
}

func TestPrintFailuresNamesEachFailedScenarioLast(t *testing.T) {
	t.Parallel()
	res := &results{Scenarios: []*scenarioResult{
		{Name: "s1"},
		{Name: "s9", Error: "start dispatcher 2:\nready timeout"},
		{Name: "s12", Error: "redis: dial refused"},
	}}
	var out strings.Builder
	require.Equal(t, 2, printFailures(&out, res))
	require.Equal(t, "scenario s9 failed to run: start dispatcher 2:; ready timeout\nscenario s12 failed to run: redis: dial refused\n", out.String())

	out.Reset()
	require.Zero(t, printFailures(&out, &results{Scenarios: []*scenarioResult{{Name: "s1"}}}))
	require.Empty(t, out.String())
}
