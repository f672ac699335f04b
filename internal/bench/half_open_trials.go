package main

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store"
)

// S5: half-open across two dispatchers.

// fastClass is S5's class: trips fast, opens for 1 s, three serialized
// trials close it.
var fastClass = map[string]any{
	"name": "bench-fast", "trip": "rate", "failure_rate_threshold": 0.5, "window": "2s", "min_throughput": 10,
	"open_duration": "1s", "open_jitter": 0, "open_backoff": 1, "half_open_trials": 3, "half_open_concurrency": 1,
}

// runS5 runs two dispatchers while one endpoint answers 500 for a while and
// then recovers (answering slowly, 100 ms, so overlapping probes would
// show), beside background load; it reports the probes in flight at once,
// the longest idle-in-transaction session, and advisory locks left behind
// (other than those held by design: the tuning leader's, a pass's).
func runS5(ctx context.Context, b *bench) (*scenarioResult, error) {
	p := b.plan
	healthy := tenantSet{group: 0, name: "t", tenants: max(b.plan.fanTenants/5, 2), perTenant: 10}
	flaky := tenantSet{group: 1, name: "flaky", tenants: 1, perTenant: 1, class: "bench-fast"}
	flakyPath := endpointPath(1, 0, 0)
	const healthyRate, flakyRate = 100.0, 50.0
	retry := "0s" + strings.Repeat(",1s", 20)
	res := &scenarioResult{
		Layout: fmt.Sprintf("%s; plus tenant flaky with 1 endpoint (class bench-fast: 50%% over 2s, min 10, open 1s, 3 serialized trials)", describeFan(healthy)),
		Load: fmt.Sprintf("open loop %.0f messages/s to the healthy tenants and %.0f/s to the flaky endpoint: healthy %s, then 500s for %s, then 200 after 100 ms for %s; two dispatchers",
			healthyRate, flakyRate, p.s5Healthy, p.s5Fail, p.s5Recover),
		Settings: mergeEnv(b.river.env(), map[string]string{"RETRY_SCHEDULE": retry}),
	}
	var phase atomic.Int32 // 0 healthy, 1 failing, 2 recovered
	respond := func(r *deliverytest.Request) deliverytest.Response {
		if groupOf(r.Path) != 1 {
			return deliverytest.Response{Status: http.StatusOK}
		}
		switch phase.Load() {
		case 1:
			return deliverytest.Response{Status: http.StatusInternalServerError, Delay: 20 * time.Millisecond}
		case 2:
			return deliverytest.Response{Status: http.StatusOK, Delay: 100 * time.Millisecond}
		}
		return deliverytest.Response{Status: http.StatusOK}
	}
	s, err := b.newStage(ctx, "s5", respond, flakyPath)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if err := s.client.createClass(ctx, fastClass); err != nil {
		return nil, err
	}
	eps, err := registerEndpoints(ctx, s.client, s.rcv, b.secret, 32, healthy, flaky)
	if err != nil {
		return nil, err
	}
	flakyID := eps[len(eps)-1].id
	for range 2 {
		if _, err := s.startDispatcher(ctx, map[string]string{"RETRY_SCHEDULE": retry}); err != nil {
			return nil, err
		}
	}
	pr, err := s.begin(ctx, 50*time.Millisecond)
	if err != nil {
		return nil, err
	}
	base := s.rcv.total()
	t0 := s.clock.now()
	total := p.s5Healthy + p.s5Fail + p.s5Recover
	lctx, cancel := context.WithTimeout(ctx, total)
	var wg sync.WaitGroup
	wg.Go(func() {
		if waitCtx(lctx, p.s5Healthy) {
			phase.Store(1)
		}
		if waitCtx(lctx, p.s5Fail) {
			phase.Store(2)
		}
	})
	wg.Go(func() {
		s.tracker.openLoop(lctx, flakyRate, 16, func(int64) (string, int) { return flaky.tenantID(0), 1 })
	})
	s.tracker.openLoop(lctx, healthyRate, 16, roundRobin(healthy))
	wg.Wait()
	cancel()
	phase.Store(2)
	if ctx.Err() != nil {
		pr.stop()
		return nil, ctx.Err()
	}
	w := window{from: t0, to: t0 + total}
	res.Drained = s.tracker.drain(ctx, p.drain, 0)
	// The flaky endpoint's retries follow the 1 s schedule; a delivery whose
	// jittered step was shorter than its attempt gets River's default
	// attempt^4 s instead (the worker's NextRetry, fixed on wt-chaos), so
	// wait a little, then report what is left rather than wait minutes.
	flakyDrained := s.tracker.drain(ctx, 3*time.Second, 1)
	// Let a trial in progress finish, then look for advisory locks while
	// both dispatchers still run.
	waitCtx(ctx, 500*time.Millisecond)
	// The session locks held by design are not left behind and are
	// counted apart: the fleet's tuning leader holds one (the tuning key
	// and the hash of "_leader") for as long as it leads, a class's tuning
	// pass and the partition maintenance one each while they run.
	var advisory, passLocks int
	if err := s.b.pg.admin.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE NOT pass), count(*) FILTER (WHERE pass) FROM (
			SELECT (l.objsubid = 2 AND l.classid::bigint = $2)
				OR (l.objsubid = 1 AND (l.classid::bigint << 32 | l.objid::bigint) = $3) AS pass
			FROM pg_locks l JOIN pg_database d ON d.oid = l.database
			WHERE l.locktype = 'advisory' AND d.datname = $1) x`,
		s.db, int64(store.TuningLockKey), int64(store.MaintenanceLockKey)).Scan(&advisory, &passLocks); err != nil {
		return nil, fmt.Errorf("read pg_locks: %w", err)
	}
	if err := pr.end(ctx, res, s.rcv.total()-base); err != nil {
		return nil, err
	}
	events := s.rcv.snapshot()
	m := s.tracker.measure(events, 0, w, healthy.perTenant)
	fill(res, m, w)
	trs, err := s.transitions(ctx, flakyID)
	if err != nil {
		return nil, err
	}
	pa := analyseProbes(s.rcv.spansOf(flakyPath), trs, s.clock)
	dbMax, dbTrials, err := s.trialOverlap(ctx, flakyID)
	if err != nil {
		return nil, err
	}
	var states []string
	for _, t := range trs {
		states = append(states, t.to)
	}
	fm := s.tracker.measure(events, 1, w, 1)
	stuck, err := s.undelivered(ctx, flakyID)
	if err != nil {
		return nil, err
	}
	var views []string
	for _, d := range s.dispatchers {
		lines, err := scrapeLines(ctx, d.match(dispatcherMetrics)[1]+"/metrics", flakyID)
		if err != nil {
			return nil, err
		}
		views = append(views, strings.Join(lines, "; "))
	}
	res.Extra = map[string]any{
		"flaky_dispatcher_views":         views,
		"flaky_not_delivered":            stuck,
		"max_probes_in_flight":           pa.maxInFlight,
		"probes":                         pa.probes,
		"admitted_while_open":            pa.whileOpen,
		"admitted_while_open_note":       "requests that arrived after an open transition and before its open_until: closed-state admissions of a dispatcher whose NOTIFY had not arrived yet",
		"transitions":                    states,
		"half_opens":                     pa.halfOpens,
		"final_state":                    lastState(trs),
		"db_trial_attempts":              dbTrials,
		"db_max_trials_overlapping":      dbMax,
		"max_idle_in_transaction_ms":     res.MaxIdleInTxMs,
		"advisory_locks_after_run":       advisory,
		"pass_locks_at_check":            passLocks,
		"flaky_undelivered_after_drain":  fm.Missing,
		"flaky_drained":                  flakyDrained,
		"dispatchers":                    2,
		"idle_in_transaction_sampled_ms": 50,
	}
	return res, s.loadErrors(res, m)
}

// undelivered describes an endpoint's deliveries that are not delivered,
// with their River jobs, for the report.
func (s *stage) undelivered(ctx context.Context, endpointID string) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT format('%s status=%s attempts=%s job=%s attempt=%s scheduled_in=%s errors=%s snoozes=%s',
			d.id, d.status, d.attempt_count, j.state, j.attempt, round(extract(epoch FROM j.scheduled_at - now())::numeric, 2),
			coalesce(cardinality(j.errors), 0), j.metadata->>'snoozes')
		FROM deliveries d LEFT JOIN river_job j ON j.id = d.job_id
		WHERE d.endpoint_id = $1 AND d.status <> 'delivered'
		ORDER BY d.id LIMIT 20`, endpointID)
	if err != nil {
		return nil, fmt.Errorf("read undelivered: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return nil, fmt.Errorf("read undelivered: %w", err)
		}
		out = append(out, line)
	}
	return out, rows.Err()
}

// transition is one row of breaker_transitions.
type transition struct {
	at        time.Time
	to        string
	openUntil *time.Time
}

func (s *stage) transitions(ctx context.Context, endpointID string) ([]transition, error) {
	rows, err := s.pool.Query(ctx, `SELECT at, to_state, open_until FROM breaker_transitions WHERE endpoint_id = $1 ORDER BY id`, endpointID)
	if err != nil {
		return nil, fmt.Errorf("read transitions: %w", err)
	}
	defer rows.Close()
	var out []transition
	for rows.Next() {
		var t transition
		if err := rows.Scan(&t.at, &t.to, &t.openUntil); err != nil {
			return nil, fmt.Errorf("read transitions: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

func lastState(trs []transition) string {
	if len(trs) == 0 {
		return "closed"
	}
	return trs[len(trs)-1].to
}

// probeAnalysis is what the receiver saw of the flaky endpoint while its
// breaker was not closed.
type probeAnalysis struct {
	probes      int // requests that arrived while a trial could be admitted
	whileOpen   int // requests that arrived while open, before open_until
	maxInFlight int // most probes in flight at once
	halfOpens   int
}

// analyseProbes classifies every request to the flaky endpoint by the
// breaker's state when it arrived (from the transitions, on the same
// clock): closed, open before open_until (no trial may run), or
// trial-eligible (open after open_until, or half-open). Requests of the
// last kind are probes; it returns the most of them in flight at once.
func analyseProbes(spans []span, trs []transition, clk *clock) probeAnalysis {
	var pa probeAnalysis
	for _, t := range trs {
		if t.to == "half_open" {
			pa.halfOpens++
		}
	}
	type edge struct {
		at    time.Duration
		delta int
	}
	var edges []edge
	for _, sp := range spans {
		at := clk.wall(sp.arrive)
		var cur *transition
		for i := range trs {
			if !trs[i].at.After(at) {
				cur = &trs[i]
			}
		}
		if cur == nil || cur.to == "closed" {
			continue
		}
		if cur.to == "open" && cur.openUntil != nil && at.Before(*cur.openUntil) {
			pa.whileOpen++
			continue
		}
		pa.probes++
		edges = append(edges, edge{sp.arrive, 1}, edge{sp.end, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // an end before a start at the same instant
	})
	n := 0
	for _, e := range edges {
		n += e.delta
		pa.maxInFlight = max(pa.maxInFlight, n)
	}
	return pa
}

// trialOverlap returns the most trial attempts of an endpoint that
// overlapped in time, from the delivery log, and how many there were.
func (s *stage) trialOverlap(ctx context.Context, endpointID string) (maxOverlap, trials int, err error) {
	rows, err := s.pool.Query(ctx, `
		SELECT attempted_at, attempted_at + duration_ms * interval '1 millisecond'
		FROM delivery_attempts WHERE endpoint_id = $1 AND trial`, endpointID)
	if err != nil {
		return 0, 0, fmt.Errorf("read trial attempts: %w", err)
	}
	defer rows.Close()
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for rows.Next() {
		var from, to time.Time
		if err := rows.Scan(&from, &to); err != nil {
			return 0, 0, fmt.Errorf("read trial attempts: %w", err)
		}
		trials++
		edges = append(edges, edge{from, 1}, edge{to, -1})
	}
	if err := rows.Err(); err != nil {
		return 0, 0, fmt.Errorf("read trial attempts: %w", err)
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	n := 0
	for _, e := range edges {
		n += e.delta
		maxOverlap = max(maxOverlap, n)
	}
	return maxOverlap, trials, nil
}
