package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// printReport writes the scenario and target tables as Markdown.
func printReport(w io.Writer, r *results) {
	fmt.Fprintf(w, "\n## hookd bench (%s) at %s\n\n", r.Mode, shortCommit(r.Commit))
	m := r.Machine
	fmt.Fprintf(w, "%d cores (%s), %.0f GiB, Linux %s, PostgreSQL %s, %s; load average at start %s, during the run %.2f (peak %.2f)",
		m.Cores, m.CPU, m.MemoryGiB, m.Kernel, m.Postgres, m.Go, m.LoadAvgAtStart, m.LoadAvgMean, m.LoadAvgPeak)
	if m.BusyOK {
		fmt.Fprint(w, "; run on a busy machine (-busy-ok): not comparable with a quiet run")
	}
	fmt.Fprint(w, "\n\n")
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
		case s.Name == "s0" || s.Name == "s0i":
			rate += " jobs/s"
			p50, p99, rss = "-", "-", "-"
		case alternated(s.Name):
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
	fmt.Fprintln(w, "| scenario | CPU core-ms per delivery: pg / api / disp / bench = total | commits per delivery | WAL KB per delivery (full-page images) | api statements per message | attempts | snoozed at the cap | refused by a breaker | longest lock wait ms (waits > 10 ms) | duplicates |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---|---:|")
	costs := func(s *scenarioResult, label string) {
		if s.Error != "" || alternated(s.Name) {
			return
		}
		c := s.CPUMsPerDelivery
		fmt.Fprintf(w, "| %s | %.3f / %.3f / %.3f / %.3f = %.3f | %.2f | %.1f (%.2f) | %.2f | %d | %d | %d | %.1f (%d) | %d |\n",
			label, c.Postgres, c.API, c.Dispatcher, c.Bench, c.Total, s.CommitsPerDelivery, s.WALBytesPerDelivery/1024, s.WALFPIPerDelivery,
			s.APIStatementsPerMessage, s.Attempts, s.SnoozedAtCap, s.RejectedByBreaker, s.MaxLockWaitMs, s.LockWaitsLogged, s.Duplicates)
	}
	for _, s := range r.Scenarios {
		if alternated(s.Name) {
			for _, run := range s.Runs {
				costs(run, run.Name)
			}
			continue
		}
		costs(s, s.Title)
	}
	for _, s := range r.Scenarios {
		if s.Name == "soak" && s.Error == "" {
			printSoak(w, s)
		}
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

// alternated reports whether a scenario alternates a setting on and off:
// its own row is the "on" medians, its costs are its runs'.
func alternated(name string) bool { return name == "s2" || name == "s1trace" }

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

// printSoak writes the soak's per-minute table and its verdicts.
func printSoak(w io.Writer, s *scenarioResult) {
	minutes, _ := s.Extra["minutes"].([]soakMinute)
	verdicts, _ := s.Extra["verdicts"].([]soakVerdict)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| at s | dispatcher RSS MB | dispatcher goroutines (floor) | api RSS MB | api goroutines (floor) | tables MB (all) | largest tables MB | deliveries | p99 ms |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---|---:|---:|")
	for _, m := range minutes {
		var total int64
		for _, b := range m.Tables {
			total += b
		}
		fmt.Fprintf(w, "| %.0f | %.1f | %.0f (%.0f) | %.1f | %.0f (%.0f) | %.1f | %s | %d | %.1f |\n", m.AtS,
			m.Dispatcher["process_resident_memory_bytes"]/(1<<20), m.Dispatcher["go_goroutines"], m.GoroutineFloor["dispatcher"],
			m.API["process_resident_memory_bytes"]/(1<<20), m.API["go_goroutines"], m.GoroutineFloor["api"],
			float64(total)/(1<<20), largestTables(m.Tables, 4), m.N, m.P99Ms)
	}
	printRiverJob(w, minutes)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| series (last third) | spread | status |")
	fmt.Fprintln(w, "|---|---:|---|")
	for _, v := range verdicts {
		fmt.Fprintf(w, "| %s | %.1f%% | %s |\n", v.Series, v.Spread*100, v.Status)
	}
}

// largestTables names the n largest tables with their sizes in MB.
func largestTables(sizes map[string]int64, n int) string {
	names := make([]string, 0, len(sizes))
	for t := range sizes {
		names = append(names, t)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(sizes[b], sizes[a]) })
	var parts []string
	for _, t := range names[:min(n, len(names))] {
		parts = append(parts, fmt.Sprintf("%s %.1f", t, float64(sizes[t])/(1<<20)))
	}
	return strings.Join(parts, ", ")
}

// printRiverJob writes river_job's breakdown per sample: heap, TOAST,
// each index, live and dead tuples, autovacuums, and the rows by kind and
// state with those past the completed-job retention.
func printRiverJob(w io.Writer, minutes []soakMinute) {
	var names []string
	for _, m := range minutes {
		if m.RiverJob != nil {
			names = slices.Sorted(maps.Keys(m.RiverJob.IndexBytes))
			break
		}
	}
	if names == nil {
		return
	}
	mb := func(n int64) string { return fmt.Sprintf("%.1f", float64(n)/(1<<20)) }
	fmt.Fprintln(w)
	short := make([]string, len(names))
	for i, n := range names {
		short[i] = strings.TrimPrefix(n, "river_job_")
	}
	fmt.Fprintf(w, "| at s | river_job heap MB | toast MB | %s MB | live | dead | autovacuums | since last s | rows (past retention) |\n", strings.Join(short, " MB | "))
	fmt.Fprintf(w, "|---:|---:|---:|%s---:|---:|---:|---:|---|\n", strings.Repeat("---:|", len(names)))
	for _, m := range minutes {
		r := m.RiverJob
		if r == nil {
			continue
		}
		idx := make([]string, len(names))
		for i, n := range names {
			idx[i] = mb(r.IndexBytes[n])
		}
		var rows []string
		for _, k := range slices.Sorted(maps.Keys(r.Rows)) {
			rows = append(rows, fmt.Sprintf("%s %d (%d)", k, r.Rows[k], r.PastRetention[k]))
		}
		fmt.Fprintf(w, "| %.0f | %s | %s | %s | %d | %d | %d | %.0f | %s |\n", m.AtS, mb(r.HeapBytes), mb(r.ToastBytes),
			strings.Join(idx, " | "), r.LiveTuples, r.DeadTuples, r.Autovacuums, r.SinceAutovacuumS, strings.Join(rows, ", "))
	}
}
