package main

import (
	"fmt"
	"io"
	"strings"
)

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
		case s.Name == "s0" || s.Name == "s0i":
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
