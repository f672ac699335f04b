package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// S13: S1rate's load behind a transaction held open, as a pg_dump holds
// one: while it lives vacuum keeps every row version the deliveries
// replace, and the scans that walk past them slow down.

// runS13 offers S1rate's layout a fixed rate twice, each on a fresh
// stage: without, then with a repeatable-read transaction that took its
// snapshot at the start of the hold and commits at its end; the load goes
// on for s13After past it. It reports each run's deliveries/s in the
// hold's first and last minute, the backlog's trend over the hold, how
// long after the hold's end the backlog took to drain, and per 10 s the
// fetch's cost per call with the job table's and the deliveries' dead
// tuples.
func runS13(ctx context.Context, b *bench) (*scenarioResult, error) {
	p := b.plan
	set := tenantSet{group: 0, name: "lt", tenants: p.rateTenants, perTenant: 1}
	res := &scenarioResult{
		Layout: fmt.Sprintf("%d tenants x 1 endpoint; a message goes to one tenant (in turn): 1 delivery per message; a fresh database per run", set.tenants),
		Load: fmt.Sprintf("open loop: %.0f messages/s offered by 64 senders for %s (the hold) + %s; two runs: without, then with a REPEATABLE READ transaction open (its snapshot taken) for the hold; first and last minute = the hold's first and last %s",
			p.s13Rate, p.s13Hold, p.s13After, s13Minute(p.s13Hold)),
		Settings: b.river.env(),
	}
	without := &scenarioResult{Name: "s13 without the transaction"}
	if err := runLongTransaction(ctx, b, set, without, false); err != nil {
		return res, fmt.Errorf("without: %w", err)
	}
	with := &scenarioResult{Name: "s13 with the transaction"}
	if err := runLongTransaction(ctx, b, set, with, true); err != nil {
		return res, fmt.Errorf("with: %w", err)
	}
	layout, load := res.Layout, res.Load
	*res = *with
	res.Name, res.Layout, res.Load, res.Settings = "", layout, load, b.river.env()
	res.Runs = []*scenarioResult{without, with}
	res.Extra = map[string]any{}
	for _, k := range []string{"first_minute_per_s", "last_minute_per_s", "last_over_first", "growing_backlog", "drained_s", "backlog_slope_per_s"} {
		res.Extra[k] = with.Extra[k]
		res.Extra["without_"+k] = without.Extra[k]
	}
	return res, nil
}

// s13Minute is the span the first and last "minute" cover: a minute, or a
// third of a shorter hold (the smoke form).
func s13Minute(hold time.Duration) time.Duration { return min(time.Minute, hold/3) }

// deliveredSample is the receiver's total one second into a run.
type deliveredSample struct {
	AtS       float64 `json:"at_s"`
	Delivered int64   `json:"delivered"`
	Backlog   int64   `json:"backlog"`
}

// deadSample is the dead tuples of the tables a delivery writes.
type deadSample struct {
	AtS        float64 `json:"at_s"`
	Jobs       int64   `json:"river_job_dead"`
	Deliveries int64   `json:"deliveries_dead"`
}

// runLongTransaction is one S13 run on a stage of its own.
func runLongTransaction(ctx context.Context, b *bench, set tenantSet, res *scenarioResult, hold bool) error {
	p := b.plan
	s, err := b.newStage(ctx, fmt.Sprintf("s13_%t", hold), nil)
	if err != nil {
		return err
	}
	defer s.close()
	if _, err := registerEndpoints(ctx, s.client, s.rcv, b.secret, 32, set); err != nil {
		return err
	}
	if _, err := s.startDispatcher(ctx, nil); err != nil {
		return err
	}
	pr, err := s.begin(ctx, 100*time.Millisecond)
	if err != nil {
		return err
	}
	base := s.rcv.total()
	msgs0 := s.tracker.messages[0].Load() + s.tracker.failed.Load()
	due0 := s.tracker.due.Load()
	t0 := s.clock.now()
	total := p.s13Hold + p.s13After
	lctx, cancel := context.WithTimeout(ctx, total)
	defer cancel()

	// The transaction: its snapshot is taken by its first statement.
	var tx pgx.Tx
	if hold {
		conn, err := pgx.Connect(ctx, b.pg.url("postgres", s.db))
		if err != nil {
			return fmt.Errorf("connect for the transaction: %w", err)
		}
		defer conn.Close(context.WithoutCancel(ctx))
		if tx, err = conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}); err != nil {
			return fmt.Errorf("begin the transaction: %w", err)
		}
		var n int64
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM endpoints`).Scan(&n); err != nil {
			return fmt.Errorf("take the transaction's snapshot: %w", err)
		}
	}
	var (
		mu        sync.Mutex
		delivered []deliveredSample
		dead      []deadSample
		fetch     []fetchSample
		endedAt   float64 = -1 // the hold's end, seconds into the run
	)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-lctx.Done():
				return
			case <-tick.C:
			}
			at := round1((s.clock.now() - t0).Seconds())
			due := s.tracker.due.Load() - due0
			accepted := s.tracker.messages[0].Load() + s.tracker.failed.Load() - msgs0
			backlog := max(due-accepted, 0) + max(s.tracker.outstanding(0), 0)
			mu.Lock()
			delivered = append(delivered, deliveredSample{AtS: at, Delivered: s.rcv.total() - base, Backlog: backlog})
			mu.Unlock()
			if i%5 != 4 {
				continue
			}
			if f, err := s.fetchHealth(ctx, t0, false); err == nil {
				mu.Lock()
				fetch = append(fetch, f)
				mu.Unlock()
			}
			d := deadSample{AtS: at}
			if err := s.pool.QueryRow(ctx, `
				SELECT coalesce(sum(n_dead_tup) FILTER (WHERE relname = 'river_job'), 0)::bigint,
					coalesce(sum(n_dead_tup) FILTER (WHERE coalesce(pg_partition_root(relid), relid) = 'deliveries'::regclass), 0)::bigint
				FROM pg_stat_user_tables`).Scan(&d.Jobs, &d.Deliveries); err == nil {
				mu.Lock()
				dead = append(dead, d)
				mu.Unlock()
			}
		}
	})
	if hold {
		wg.Go(func() {
			select {
			case <-lctx.Done():
			case <-time.After(p.s13Hold):
			}
			_ = tx.Commit(context.WithoutCancel(ctx))
			mu.Lock()
			endedAt = round1((s.clock.now() - t0).Seconds())
			mu.Unlock()
		})
	}
	due := s.tracker.openLoop(lctx, p.s13Rate, 64, roundRobin(set))
	cancel()
	wg.Wait()
	if ctx.Err() != nil {
		pr.stop()
		return ctx.Err()
	}
	if !hold {
		endedAt = p.s13Hold.Seconds()
	}
	w := window{from: t0, to: t0 + total}
	res.Drained = s.tracker.drain(ctx, p.drain, 0)
	if err := pr.end(ctx, res, s.rcv.total()-base); err != nil {
		return err
	}
	m := s.tracker.measure(s.rcv.snapshot(), 0, w, 1)
	fill(res, m, w)

	minute := s13Minute(p.s13Hold).Seconds()
	first := rateBetween(delivered, 0, minute)
	last := rateBetween(delivered, p.s13Hold.Seconds()-minute, p.s13Hold.Seconds())
	var holdBacklog []backlogSample
	for _, d := range delivered {
		if d.AtS <= p.s13Hold.Seconds() {
			holdBacklog = append(holdBacklog, backlogSample{AtS: d.AtS, Undelivered: d.Backlog})
		}
	}
	slope, _ := backlogTrend(holdBacklog, p.s13Hold)
	res.Extra = map[string]any{
		"offered_msgs_per_s":  p.s13Rate,
		"due_msgs":            due,
		"hold_s":              p.s13Hold.Seconds(),
		"hold_ended_at_s":     endedAt,
		"first_minute_per_s":  round1(first),
		"last_minute_per_s":   round1(last),
		"last_over_first":     0.0,
		"backlog_slope_per_s": round2(slope),
		"growing_backlog":     growing(slope, p.s13Rate, res.MessagesPerS),
		"drained_s":           drainedAfter(delivered, endedAt, max(int64(p.s13Rate/2), 2*medianBacklog(delivered, 0, minute))),
		"delivered_samples":   delivered,
		"dead_tuple_samples":  dead,
		"fetch_by_10s":        fetchCostByWindow(fetch, 10),
		"drain_rule":          "drained when the backlog (offered but not accepted, plus accepted but not delivered) is back under twice the hold's first-minute median or half a second of the offered rate; -1 when it was not before the run's end",
	}
	if first > 0 {
		res.Extra["last_over_first"] = round3(last / first)
	}
	return s.loadErrors(res, m)
}

// rateBetween is the deliveries per second between two points of a run,
// from the per-second samples (the run starts at 0 with none): from the
// last sample at or before from to the first at or after to.
func rateBetween(samples []deliveredSample, from, to float64) float64 {
	a := deliveredSample{}
	for _, s := range samples {
		if s.AtS <= from {
			a = s
		}
	}
	i := slices.IndexFunc(samples, func(s deliveredSample) bool { return s.AtS >= to })
	if i < 0 {
		if len(samples) == 0 {
			return 0
		}
		i = len(samples) - 1
	}
	b := samples[i]
	if b.AtS <= a.AtS {
		return 0
	}
	return float64(b.Delivered-a.Delivered) / (b.AtS - a.AtS)
}

// medianBacklog is the median backlog between two points of a run.
func medianBacklog(samples []deliveredSample, from, to float64) int64 {
	var v []float64
	for _, s := range samples {
		if s.AtS >= from && s.AtS <= to {
			v = append(v, float64(s.Backlog))
		}
	}
	return int64(median(v))
}

// drainedAfter is how many seconds after at the backlog first fell to
// limit or under, or -1 if it never did.
func drainedAfter(samples []deliveredSample, at float64, limit int64) float64 {
	if at < 0 {
		return -1
	}
	i := slices.IndexFunc(samples, func(s deliveredSample) bool { return s.AtS >= at && s.Backlog <= limit })
	if i < 0 {
		return -1
	}
	return round1(samples[i].AtS - at)
}
