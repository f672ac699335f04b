package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

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
	const s0iGoal = "S1 deliveries/s against S0i insert-and-work jobs/s (reported, no target)"
	if s0i := r.find("s0i"); s0i != nil && s1 != nil && s0i.DeliveriesPerS > 0 {
		r.S0iJobsPerS = s0i.DeliveriesPerS
		v := s1.DeliveriesPerS / s0i.DeliveriesPerS
		add(target{Scenario: "s1", Goal: s0iGoal, Value: round3(v), Status: "reported",
			Measured: fmt.Sprintf("%.2f x (%.0f / %.0f)", v, s1.DeliveriesPerS, s0i.DeliveriesPerS)})
	} else {
		add(na("s1", s0iGoal))
	}
	const walGoal, pgCPUGoal = "S1 WAL per delivery <= 3.5 KB", "S1 Postgres CPU per delivery <= 2.5 x S0's per job"
	if s1 != nil {
		kb := s1.WALBytesPerDelivery / 1024
		add(atMost("s1", walGoal, kb, 3.5, fmt.Sprintf("%.1f KB (S0 %s; %.2f full-page images per delivery)", kb, s0WAL(s0), s1.WALFPIPerDelivery)))
	} else {
		add(na("s1", walGoal))
	}
	if s0 != nil && s1 != nil && s0.CPUMsPerDelivery.Postgres > 0 {
		v := s1.CPUMsPerDelivery.Postgres / s0.CPUMsPerDelivery.Postgres
		add(atMost("s1", pgCPUGoal, v, 2.5, fmt.Sprintf("%.2f x (%.3f / %.3f core-ms)", v, s1.CPUMsPerDelivery.Postgres, s0.CPUMsPerDelivery.Postgres)))
	} else {
		add(na("s1", pgCPUGoal))
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
	if s2s := r.find("s2s"); s2s != nil && s2s.Extra != nil {
		on, off := toFloat(s2s.Extra["shadow_on_median_per_s"]), toFloat(s2s.Extra["shadow_off_median_per_s"])
		if bound, ok := s2s.Extra["shadow_cost_bound_pct"]; ok && off > 0 {
			add(atMost("s2s", s2sGoal, toFloat(bound), 5, fmt.Sprintf(
				"at most %.2f%% (busy %.2f s for %.0f outcomes, at %.0f deliveries/s on %.0f cores); alternated runs %.2f x (%.0f / %.0f, medians), runs of one mode spreading %s",
				toFloat(bound), toFloat(s2s.Extra["shadow_busy_s"]), toFloat(s2s.Extra["shadow_fed"]), off, toFloat(s2s.Extra["cores"]),
				on/off, on, off, s2sSpread(s2s))))
		} else {
			add(na("s2s", s2sGoal))
		}
	} else if slices.ContainsFunc(r.Scenarios, func(s *scenarioResult) bool { return s.Name == "s2s" }) {
		add(target{Scenario: "s2s", Goal: s2sGoal, Measured: "the scenario failed", Status: "missed"})
	} else {
		add(na("s2s", s2sGoal))
	}
	const traceGoal = "S1 tracing on >= 0.95 x tracing off"
	if st := r.find("s1trace"); st != nil && st.Extra != nil {
		on, off := toFloat(st.Extra["tracing_on_median_per_s"]), toFloat(st.Extra["tracing_off_median_per_s"])
		r.S1TracingOnPerS, r.S1TracingOffPerS = on, off
		if off > 0 {
			add(atLeast("s1trace", traceGoal, on/off, 0.95, fmt.Sprintf("%.2f x (%.0f / %.0f, medians; %.0f export requests)", on/off, on, off, toFloat(st.Extra["trace_export_requests"]))))
		} else {
			add(target{Scenario: "s1trace", Goal: traceGoal, Measured: "no delivery with tracing off", Status: "missed"})
		}
	} else if slices.ContainsFunc(r.Scenarios, func(s *scenarioResult) bool { return s.Name == "s1trace" }) {
		add(target{Scenario: "s1trace", Goal: traceGoal, Measured: "the scenario failed", Status: "missed"})
	} else {
		add(na("s1trace", traceGoal))
	}
	if worst >= 0 {
		add(atMost("s1", "Postgres round trips per delivery <= 3 in S1/S2", worst, 3, strings.Join(rts, ", ")))
	} else {
		add(na("s1", "Postgres round trips per delivery <= 3 in S1/S2"))
	}

	rateGoal := "S1 at the offered rate: p99 accepted -> delivered <= 250 ms"
	backlogGoal := "S1 at the offered rate: no growing backlog"
	lowGoal := "S1 at the low rate: p99 accepted -> delivered <= 100 ms"
	stmtGoal := "S1 at the offered rate: api statements per accepted message <= 0.5"
	if rate != nil {
		offered, _ := rate.Extra["offered_msgs_per_s"].(float64)
		rateGoal = fmt.Sprintf("S1 at %.0f messages/s for %.0fs: p99 accepted -> delivered <= 250 ms", offered, rate.MeasuredS)
		backlogGoal = fmt.Sprintf("S1 at %.0f messages/s for %.0fs: no growing backlog", offered, rate.MeasuredS)
		stmtGoal = fmt.Sprintf("S1 at %.0f messages/s: api statements per accepted message <= 0.5", offered)
		r.S1RateP99Ms = rate.LatencyP99Ms
		r.S1RateGrowingBacklog, _ = rate.Extra["growing_backlog"].(bool)
		add(atMost("s1rate", rateGoal, rate.LatencyP99Ms, 250, fmt.Sprintf("p99 %.1f ms (p50 %.1f ms)", rate.LatencyP99Ms, rate.LatencyP50Ms)))
		add(backlogTarget(rate, backlogGoal))
		add(atMost("s1rate", stmtGoal, rate.APIStatementsPerMessage, 0.5, fmt.Sprintf("%.2f statements per message", rate.APIStatementsPerMessage)))
		if len(rate.Runs) == 2 {
			low := rate.Runs[0]
			lowOffered, _ := low.Extra["offered_msgs_per_s"].(float64)
			lowGoal = fmt.Sprintf("S1 at %.0f messages/s for %.0fs: p99 accepted -> delivered <= 100 ms", lowOffered, low.MeasuredS)
			r.S1LowRateP99Ms = low.LatencyP99Ms
			t := atMost("s1rate", lowGoal, low.LatencyP99Ms, 100, fmt.Sprintf("p99 %.1f ms (p50 %.1f ms)", low.LatencyP99Ms, low.LatencyP50Ms))
			if g, _ := low.Extra["growing_backlog"].(bool); g {
				t.Measured += "; backlog growing"
			}
			add(t)
		} else {
			add(na("s1rate", lowGoal))
		}
	} else {
		for _, g := range []string{rateGoal, backlogGoal, stmtGoal, lowGoal} {
			add(na("s1rate", g))
		}
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

	evaluateOptions(r, add, na)

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
		passes := toFloat(s5.Extra["pass_locks_at_check"])
		add(atMost("s5", "S5 no advisory lock left after the run", locks, 0,
			fmt.Sprintf("%.0f advisory locks (besides %.0f held by design: the fleet's tuning leader's, a tuning or maintenance pass's)", locks, passes)))
	} else {
		for _, g := range []string{"S5 never more than 1 probe in flight", "S5 no idle-in-transaction session over 1 s", "S5 no advisory lock left after the run"} {
			add(na("s5", g))
		}
	}

	if s11 := r.find("s11"); s11 != nil {
		peak, bound := toFloat(s11.Extra["receiver_peak_in_flight"]), toFloat(s11.Extra["in_flight_bound"])
		add(atMost("s11", "S11 requests in flight at the receiver host <= min(WORKERS, MAX_PER_HOST)", peak, bound,
			fmt.Sprintf("%.0f at most (bound %.0f: %v)", peak, bound, s11.Extra["in_flight_bound_is"])))
		add(atMost("s11", "S11 dispatcher RSS <= 250 MB", s11.DispatcherRSSMB, 250, fmt.Sprintf("%.1f MB peak", s11.DispatcherRSSMB)))
		add(atMost("s11", "S11 every delivery delivered (p99 accepted -> delivered stated)", float64(s11.Undelivered), 0,
			fmt.Sprintf("%d undelivered of %d; accepted -> delivered p50 %.0f ms, p99 %.0f ms", s11.Undelivered, s11.Deliveries, s11.LatencyP50Ms, s11.LatencyP99Ms)))
	} else {
		for _, g := range []string{"S11 requests in flight at the receiver host <= min(WORKERS, MAX_PER_HOST)", "S11 dispatcher RSS <= 250 MB",
			"S11 every delivery delivered (p99 accepted -> delivered stated)"} {
			add(na("s11", g))
		}
	}

	evaluateDestinations(r, add, na)

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

	add(noDuplicates(r.Scenarios))

	if soak := r.find("soak"); soak != nil && soak.Extra != nil {
		verdicts, _ := soak.Extra["verdicts"].([]soakVerdict)
		var missed []string
		for _, v := range verdicts {
			if v.Status != "met" {
				missed = append(missed, fmt.Sprintf("%s %.0f%%", v.Series, v.Spread*100))
			}
		}
		t := target{Scenario: "soak", Goal: soakGoal, Value: float64(len(missed)),
			Measured: fmt.Sprintf("%d of %d series flat", len(verdicts)-len(missed), len(verdicts)), Status: "met"}
		if len(missed) > 0 || len(verdicts) == 0 {
			t.Status = "missed"
			t.Measured += "; not flat: " + strings.Join(missed, ", ")
		}
		add(t)
	}

	if s8 := r.find("s8"); s8 != nil && s8.Extra != nil {
		if s1 != nil && s1.DeliveriesPerS > 0 {
			v := s8.DeliveriesPerS / s1.DeliveriesPerS
			add(atLeast("s8", s8ThroughputGoal, v, 0.9, fmt.Sprintf("%.2f x (%.0f / %.0f)", v, s8.DeliveriesPerS, s1.DeliveriesPerS)))
		} else {
			add(na("s8", s8ThroughputGoal))
		}
		pass := toFloat(s8.Extra["reclassify_pass_s"])
		add(below("s8", s8ReclassifyGoal, pass, 60, fmt.Sprintf("%.2f s over %.0f endpoints", pass, toFloat(s8.Extra["reclassify_endpoints"]))))
		p99 := toFloat(s8.Extra["attempts_list_p99_ms"])
		add(below("s8", s8AttemptsGoal, p99, 500, fmt.Sprintf("p99 %.1f ms (p50 %.1f ms) over %.0f requests", p99,
			toFloat(s8.Extra["attempts_list_p50_ms"]), toFloat(s8.Extra["attempts_list_requests"]))))
		if _, ok := s8.Extra["tune_pass_s"]; ok {
			pass := toFloat(s8.Extra["tune_pass_s"])
			add(atMost("s8", s8TuneGoal, pass, 300, fmt.Sprintf("%.1f s over %d classes", pass, countOf(s8.Extra["tune_classes"]))))
			v := toFloat(s8.Extra["tune_s1_over_without"])
			add(atLeast("s8", s8TuneS1Goal, v, 0.9, fmt.Sprintf("%.2f x (%.0f / %.0f, medians of %.0f loops during the pass and as many after it)",
				v, toFloat(s8.Extra["tune_s1_per_s"]), toFloat(s8.Extra["tune_s1_after_per_s"]), toFloat(s8.Extra["tune_s1_loops"]))))
			rss := toFloat(s8.Extra["tune_leader_rss_peak_mb"])
			add(atMost("s8", s8TuneRSSGoal, rss, 300, fmt.Sprintf("%.1f MB at its peak during the passes (%.1f MB over the loops after them)",
				rss, toFloat(s8.Extra["tune_leader_rss_peak_after_mb"]))))
		} else {
			for _, g := range []string{s8TuneGoal, s8TuneS1Goal, s8TuneRSSGoal} {
				add(target{Scenario: "s8", Goal: g, Measured: "the tuning phase failed", Status: "missed"})
			}
		}
	} else if slices.ContainsFunc(r.Scenarios, func(s *scenarioResult) bool { return s.Name == "s8" }) {
		for _, g := range []string{s8ThroughputGoal, s8ReclassifyGoal, s8AttemptsGoal, s8TuneGoal, s8TuneS1Goal, s8TuneRSSGoal} {
			add(target{Scenario: "s8", Goal: g, Measured: "the scenario failed", Status: "missed"})
		}
	}

	const (
		s9Goal           = "S9 4 dispatchers' deliveries/s >= 0.9 x 1 dispatcher's (median of alternated rounds)"
		s9TwoGoal        = "S9 2 dispatchers' deliveries/s >= 0.95 x 1 dispatcher's (median of alternated rounds)"
		s9CPUGoal        = "S9 PostgreSQL CPU per delivery at 4 dispatchers <= 1.25 x at 1"
		s9StatementsGoal = "S9 dispatcher statements per delivery at 4 dispatchers <= 1.25 x at 1"
		s9RampGoal       = "S9 a dispatcher added to a loaded fleet reaches full rate within 2 s of its start"
	)
	if s9 := r.find("s9"); s9 != nil && s9.Extra != nil {
		v := toFloat(s9.Extra["four_over_one_dispatchers"])
		by := floatMap(s9.Extra["deliveries_per_s_by_config"])
		r.S9ScaleOut = v
		var waits []string
		for _, run := range s9.Runs {
			waits = append(waits, fmt.Sprintf("%s %.1f", strings.TrimPrefix(run.Name, "s9 "), run.MaxLockWaitMs))
		}
		byConfig := ""
		if len(waits) > 0 {
			byConfig = " (" + strings.Join(waits, ", ") + ")"
		}
		// Every process's CPU per delivery, 4 over 1: the machine's 2 cores
		// are the bound, so the throughput ratio is what they add up to.
		cpuByProcess := ""
		if d, ok := s9.Extra["dispatcher_cpu_four_over_one"]; ok {
			cpuByProcess = fmt.Sprintf("; CPU per delivery 4 over 1: the dispatchers' %.2f x, PostgreSQL's %.2f x, the api's %.2f x and the load generator's %.2f x (the same work in every configuration)",
				floatMap(d)["median"], floatMap(s9.Extra["postgres_cpu_four_over_one_rounds"])["median"],
				floatMap(s9.Extra["api_cpu_four_over_one"])["median"], floatMap(s9.Extra["load_generator_cpu_four_over_one"])["median"])
		}
		if sl, ok := s9.Extra["dispatcher_sleeps_per_delivery_by_config"]; ok {
			m := floatMap(sl)
			cpuByProcess += fmt.Sprintf("; the dispatchers' threads slept %.2f, %.2f and %.2f times a delivery at 1, 2 and 4 dispatchers (medians)",
				m["1a1d"], m["1a2d"], m["1a4d"])
		}
		if m, ok := s9.Extra["four_over_one_at_machine_speed"]; ok {
			cpuByProcess += fmt.Sprintf("; at equal machine speed (all CPU per delivery counted against the load generator's in the same window) %.2f x%s",
				floatMap(m)["median"], describeSpread(m))
		}
		add(atLeast("s9", s9Goal, v, 0.9, fmt.Sprintf("%.2f x%s (medians %.0f / %.0f; 2 dispatchers %.0f, 2 api x 4 dispatchers %.0f%s; longest lock wait %.1f ms%s)",
			v, describeSpread(s9.Extra["four_over_one_dispatchers_rounds"]), by["1a4d"], by["1a1d"], by["1a2d"], by["2a4d"], cpuByProcess, s9.MaxLockWaitMs, byConfig)))
		if two, ok := s9.Extra["two_over_one_dispatchers_rounds"]; ok {
			m := floatMap(two)
			add(atLeast("s9", s9TwoGoal, m["median"], 0.95, fmt.Sprintf("%.2f x%s", m["median"], describeSpread(two))))
			cpu := floatMap(s9.Extra["postgres_cpu_four_over_one_rounds"])
			cpuText := fmt.Sprintf("%.2f x%s", cpu["median"], describeSpread(s9.Extra["postgres_cpu_four_over_one_rounds"]))
			if api, ok := s9.Extra["postgres_cpu_of_api_connections_four_over_one"]; ok {
				// The api's connections run the same statements per
				// message in every configuration: their ratio is the
				// machine's, beside the dispatchers' connections'.
				disp := s9.Extra["postgres_cpu_of_dispatcher_connections_four_over_one"]
				cpuText += fmt.Sprintf("; the api's connections (the same statements: a control) %.2f x%s, the dispatchers' %.2f x%s",
					floatMap(api)["median"], describeSpread(api), floatMap(disp)["median"], describeSpread(disp))
			}
			add(atMost("s9", s9CPUGoal, cpu["median"], 1.25, cpuText))
			st := floatMap(s9.Extra["dispatcher_statements_four_over_one"])
			add(atMost("s9", s9StatementsGoal, st["median"], 1.25, fmt.Sprintf("%.2f x%s", st["median"], describeSpread(s9.Extra["dispatcher_statements_four_over_one"]))))
			ramp := toFloat(s9.Extra["added_dispatcher_ramp_s"])
			t := atMost("s9", s9RampGoal, ramp, 2, fmt.Sprintf("%.2f s to %.0f%% of its steady %.0f deliveries/s (sampled every %s)",
				ramp, scaleRampFull*100, toFloat(s9.Extra["added_dispatcher_steady_per_s"]), scaleRampSample))
			if ramp < 0 {
				t.Status, t.Measured = "missed", fmt.Sprintf("never reached %.0f%% of its steady rate", scaleRampFull*100)
			}
			add(t)
		} else {
			for _, g := range []string{s9TwoGoal, s9CPUGoal, s9StatementsGoal, s9RampGoal} {
				add(na("s9", g))
			}
		}
	} else {
		for _, g := range []string{s9Goal, s9TwoGoal, s9CPUGoal, s9StatementsGoal, s9RampGoal} {
			add(na("s9", g))
		}
	}

	const (
		s13RateGoal    = "S13 deliveries/s in the last minute of a 10-minute transaction >= 0.8 x its first"
		s13BacklogGoal = "S13 no growing backlog behind the transaction"
		s13DrainGoal   = "S13 the run's backlog drained within 60 s after the transaction ends"
	)
	if s13 := r.find("s13"); s13 != nil && s13.Extra != nil {
		v := toFloat(s13.Extra["last_over_first"])
		add(atLeast("s13", s13RateGoal, v, 0.8, fmt.Sprintf("%.2f x (%.0f / %.0f deliveries/s; without the transaction %.2f x, %.0f / %.0f)",
			v, toFloat(s13.Extra["last_minute_per_s"]), toFloat(s13.Extra["first_minute_per_s"]),
			toFloat(s13.Extra["without_last_over_first"]), toFloat(s13.Extra["without_last_minute_per_s"]), toFloat(s13.Extra["without_first_minute_per_s"]))))
		t := target{Scenario: "s13", Goal: s13BacklogGoal, Status: "met",
			Measured: fmt.Sprintf("slope %.1f/s over the hold (without: %.1f/s)", toFloat(s13.Extra["backlog_slope_per_s"]), toFloat(s13.Extra["without_backlog_slope_per_s"]))}
		if g, _ := s13.Extra["growing_backlog"].(bool); g {
			t.Status = "missed"
		}
		add(t)
		drained := toFloat(s13.Extra["drained_s"])
		d := atMost("s13", s13DrainGoal, drained, 60, fmt.Sprintf("%.1f s (without: %.1f s)", drained, toFloat(s13.Extra["without_drained_s"])))
		if drained < 0 {
			d.Status, d.Measured = "missed", "not drained before the run's end"
		}
		add(d)
	} else if slices.ContainsFunc(r.Scenarios, func(s *scenarioResult) bool { return s.Name == "s13" }) {
		for _, g := range []string{s13RateGoal, s13BacklogGoal, s13DrainGoal} {
			add(target{Scenario: "s13", Goal: g, Measured: "the scenario failed", Status: "missed"})
		}
	}

	const (
		s10LockGoal = "S10 longest lock wait while the maintainer catches up after downtime <= 250 ms"
		s10LostGoal = "S10 rows lost across the maintainer's restart = 0"
		s10P99Goal  = "S10 p99 accepted -> delivered from the restart on <= 2 x before it"
	)
	if s10 := r.find("s10"); s10 != nil && s10.Extra != nil {
		lost := toFloat(s10.Extra["rows_lost"])
		r.S10MaxLockWaitMs, r.S10RowsLost = s10.MaxLockWaitMs, int64(lost)
		add(atMost("s10", s10LockGoal, s10.MaxLockWaitMs, 250, fmt.Sprintf("%.1f ms (%d waits over %d ms logged, longest seen waiting %.1f ms); caught up %.1f s after the restart",
			s10.MaxLockWaitMs, s10.LockWaitsLogged, lockWaitThreshold.Milliseconds(), s10.LockWaitSampledMs, toFloat(s10.Extra["catch_up_s"]))))
		add(atMost("s10", s10LostGoal, lost, 0, fmt.Sprintf("%.0f rows lost (of the downtime's, and of %.0f messages accepted)", lost, toFloat(s10.Extra["accepted_messages"]))))
		if pre := toFloat(s10.Extra["p99_before_restart_ms"]); pre > 0 {
			v := s10.LatencyP99Ms / pre
			add(atMost("s10", s10P99Goal, v, 2, fmt.Sprintf("%.2f x (p99 %.1f ms from the restart on, %.1f ms before)", v, s10.LatencyP99Ms, pre)))
		} else {
			add(target{Scenario: "s10", Goal: s10P99Goal, Measured: "no delivery before the restart", Status: "missed"})
		}
	} else if slices.ContainsFunc(r.Scenarios, func(s *scenarioResult) bool { return s.Name == "s10" }) {
		for _, g := range []string{s10LockGoal, s10LostGoal, s10P99Goal} {
			add(target{Scenario: "s10", Goal: g, Measured: "the scenario failed", Status: "missed"})
		}
	} else {
		for _, g := range []string{s10LockGoal, s10LostGoal, s10P99Goal} {
			add(na("s10", g))
		}
	}

	const s7Sizes, s7Drops = "S7 table sizes level off (last 4 minutes within 15%)", "S7 throughput around DETACH/DROP >= 0.9 x between"
	if s7 := r.find("s7"); s7 != nil && s7.Extra != nil {
		spread, _ := s7.Extra["last_4_minutes_spread"].(map[string]float64)
		total := spread["total"]
		if len(spread) == 0 {
			add(target{Scenario: "s7", Goal: s7Sizes, Measured: "fewer than 4 one-minute samples", Status: "missed"})
		} else {
			add(atMost("s7", s7Sizes, total, 0.15, fmt.Sprintf("total spread %.0f%%", total*100)))
		}
		ratio := toFloat(s7.Extra["around_over_between"])
		drops, _ := s7.Extra["drop_seconds"].([]dropSecond)
		if len(drops) == 0 {
			add(target{Scenario: "s7", Goal: s7Drops, Measured: "no partition dropped during the run", Status: "missed"})
		} else {
			add(atLeast("s7", s7Drops, ratio, 0.9, fmt.Sprintf("%.2f x (%.0f / %.0f deliveries/s; %d drop seconds; longest lock wait %.1f ms)",
				ratio, toFloat(s7.Extra["deliveries_per_s_around_drops"]), toFloat(s7.Extra["deliveries_per_s_between_drops"]), len(drops), s7.MaxLockWaitMs)))
		}
	} else {
		add(na("s7", s7Sizes))
		add(na("s7", s7Drops))
	}
}

// Targets of the endpoint delivery options.
const (
	fifoLatencyGoal  = "S4fifo healthy p99 with a FIFO endpoint stalled <= 1.5 x without (medians of alternated runs)"
	fifoInFlightGoal = "S4fifo the stalled FIFO endpoint never has more than 1 request in flight"
	filterGoal       = "S1filter accepted messages/s with every endpoint filtered >= 0.9 x without (medians of alternated runs)"
)

// evaluateOptions checks the targets of S4fifo and S1filter.
func evaluateOptions(r *results, add func(target), na func(scenario, goal string) target) {
	if sf := r.find("s4fifo"); sf != nil && sf.Extra != nil {
		with, without := toFloat(sf.Extra["healthy_p99_ms_fifo_stalled"]), toFloat(sf.Extra["healthy_p99_ms_without_fifo"])
		if without > 0 {
			v := with / without
			add(atMost("s4fifo", fifoLatencyGoal, v, 1.5, fmt.Sprintf("%.2f x (%.1f / %.1f ms; %.0f / %.0f healthy deliveries/s)", v, with, without,
				toFloat(sf.Extra["healthy_per_s_fifo_stalled"]), toFloat(sf.Extra["healthy_per_s_without_fifo"]))))
		} else {
			add(target{Scenario: "s4fifo", Goal: fifoLatencyGoal, Measured: "no healthy delivery without the FIFO endpoint", Status: "missed"})
		}
		inFlight := toFloat(sf.Extra["fifo_max_in_flight"])
		add(atMost("s4fifo", fifoInFlightGoal, inFlight, 1, fmt.Sprintf("%.0f at most over %.0f requests; %.0f deliveries in line at the end",
			inFlight, toFloat(sf.Extra["fifo_requests"]), toFloat(sf.Extra["fifo_in_line_at_end"]))))
	} else {
		add(na("s4fifo", fifoLatencyGoal))
		add(na("s4fifo", fifoInFlightGoal))
	}
	if sf := r.find("s1filter"); sf != nil && sf.Extra != nil {
		on, off := toFloat(sf.Extra["filtered_median_msgs_per_s"]), toFloat(sf.Extra["unfiltered_median_msgs_per_s"])
		if off > 0 {
			v := on / off
			add(atLeast("s1filter", filterGoal, v, 0.9, fmt.Sprintf("%.2f x (%.0f / %.0f messages/s; api %.3f / %.3f core-ms per message)", v, on, off,
				toFloat(sf.Extra["filtered_api_cpu_ms_per_msg"]), toFloat(sf.Extra["unfiltered_api_cpu_ms_per_msg"]))))
		} else {
			add(target{Scenario: "s1filter", Goal: filterGoal, Measured: "nothing accepted without filters", Status: "missed"})
		}
	} else {
		add(na("s1filter", filterGoal))
	}
}

// duplicatesGoal is the target on duplicates.
const duplicatesGoal = "zero duplicates in fault-free scenarios"

// noDuplicates checks that no scenario without faults (its receiver never
// fails on purpose) delivered anything twice.
func noDuplicates(scenarios []*scenarioResult) target {
	var total int64
	var per, faulty []string
	checked := 0
	for _, s := range scenarios {
		if s.Error != "" {
			continue
		}
		if s.Faults {
			faulty = append(faulty, fmt.Sprintf("%s %d", s.Name, s.Duplicates))
			continue
		}
		checked++
		total += s.Duplicates
		if s.Duplicates > 0 {
			per = append(per, fmt.Sprintf("%s %d", s.Name, s.Duplicates))
		}
	}
	if checked == 0 {
		return target{Scenario: "all", Goal: duplicatesGoal, Measured: "not run", Status: "n/a"}
	}
	measured := fmt.Sprintf("%d duplicates in %d fault-free scenarios", total, checked)
	if len(per) > 0 {
		measured += " (" + strings.Join(per, ", ") + ")"
	}
	if len(faulty) > 0 {
		measured += "; with faults, not a target: " + strings.Join(faulty, ", ")
	}
	return atMost("all", duplicatesGoal, float64(total), 0, measured)
}

// backlogTarget checks that a fixed-rate run's backlog did not grow.
func backlogTarget(rate *scenarioResult, goal string) target {
	offered, _ := rate.Extra["offered_msgs_per_s"].(float64)
	grow, _ := rate.Extra["growing_backlog"].(bool)
	slope, _ := rate.Extra["backlog_slope_per_s"].(float64)
	t := target{Scenario: "s1rate", Goal: goal, Value: slope,
		Measured: fmt.Sprintf("slope %+.1f/s, accepted %.0f of %.0f msg/s", slope, rate.MessagesPerS, offered), Status: "met"}
	if grow {
		t.Status = "missed"
	}
	return t
}

// s0WAL formats S0's WAL per job for comparison.
func s0WAL(s0 *scenarioResult) string {
	if s0 == nil {
		return "not run"
	}
	return fmt.Sprintf("%.1f KB per job", s0.WALBytesPerDelivery/1024)
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

// countOf is the length of a map read from results (in memory or back
// from JSON).
func countOf(v any) int {
	switch m := v.(type) {
	case map[string]string:
		return len(m)
	case map[string]any:
		return len(m)
	}
	return 0
}

// floatMap reads a map of figures, as written or read back from JSON.
func floatMap(v any) map[string]float64 {
	out := map[string]float64{}
	switch m := v.(type) {
	case map[string]float64:
		return m
	case map[string]any:
		for k, x := range m {
			out[k] = toFloat(x)
		}
	}
	return out
}

// describeSpread is " (min-max over n rounds)" for a ratio's rounds, or
// nothing for a single round.
func describeSpread(v any) string {
	m := floatMap(v)
	if m["rounds"] < 2 {
		return ""
	}
	return fmt.Sprintf(" (%.2f-%.2f over %.0f rounds)", m["min"], m["max"], m["rounds"])
}

// evaluateDestinations states S12's ratios (no target) and checks each
// type's breaker: open within the window + 1 s of the first failed
// attempt after its broker's cut, as S4 does for a hanging endpoint.
func evaluateDestinations(r *results, add func(target), na func(scenario, goal string) target) {
	goal := func(typ string) string {
		return fmt.Sprintf("S12 %s breaker opens within window + 1 s (%.0f s) of the first failure after its broker's cut", typ, (outageWindow + time.Second).Seconds())
	}
	ratio := func(typ string) string {
		return fmt.Sprintf("S12 %s deliveries/s against HTTP's (reported, no target)", typ)
	}
	s12 := r.find("s12")
	var types map[string]destTypeResult
	if s12 != nil {
		// In memory or read back from a results file alike.
		raw, err := json.Marshal(s12.Extra["types"])
		if err == nil {
			err = json.Unmarshal(raw, &types)
		}
		if err != nil {
			types = nil
		}
	}
	for _, typ := range destTypes[1:] {
		t, ok := types[typ]
		switch {
		case !ok:
			add(na("s12", ratio(typ)))
			add(na("s12", goal(typ)))
			continue
		case t.Skipped != "":
			add(target{Scenario: "s12", Goal: ratio(typ), Measured: "not run: " + t.Skipped, Status: "n/a"})
			add(target{Scenario: "s12", Goal: goal(typ), Measured: "not run", Status: "n/a"})
			continue
		case t.Error != "":
			add(target{Scenario: "s12", Goal: goal(typ), Measured: "failed: " + t.Error, Status: "missed"})
			continue
		}
		http := types["http"]
		add(target{Scenario: "s12", Goal: ratio(typ), Value: t.RatioToHTTP, Status: "reported",
			Measured: fmt.Sprintf("%.2f x (%.0f / %.0f deliveries/s)", t.RatioToHTTP, t.DeliveriesPerS, http.DeliveriesPerS)})
		if !t.Opened {
			add(target{Scenario: "s12", Goal: goal(typ), Measured: "the breaker never opened", Status: "missed"})
			continue
		}
		add(atMost("s12", goal(typ), t.OpenedAfterFailure, (outageWindow + time.Second).Seconds(),
			fmt.Sprintf("opened %.2f s after the first failure (%.2f s after the cut)", t.OpenedAfterFailure, t.OpenedAfterCutS)))
	}
}
