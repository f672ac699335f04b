package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/internal/retention"
	"github.com/hookd/hookd/internal/store"
)

// S10: the partition maintainer restarts after downtime, under S1's load.
// PARTITION_INTERVAL=1m and RETENTION=24h (nothing is old enough to go).
// The maintainer last ran s10Intervals minutes ago: the database's
// partitions end retention.Ahead intervals after that, and every interval
// since holds s10PerInterval messages (a payload, 10 deliveries, their
// attempts) in the default partitions, as writes with no maintainer running
// would have left them. The bench holds the maintenance advisory lock, so
// the dispatcher's maintainer skips its runs while S1's layout gets half of
// S1's closed-loop rate (open loop, as S7) and writes land in the default
// partitions too; after s10Before the lock is released, and the
// maintainer's next run (within 10 s) catches up. The load goes on until
// every default partition is empty (the catch-up done) and s10After more.
// It reports the longest lock wait of the run, the latency of the messages
// accepted from the release on against those before it, how long the
// catch-up took, and the rows lost: the downtime's rows missing after it
// plus the accepted messages missing from the database (0 is the target).

// s10Tables are the partitioned tables whose default partitions the
// catch-up empties.
var s10Tables = []string{"messages", "message_payloads", "deliveries", "delivery_attempts"}

func runS10(ctx context.Context, b *bench) (*scenarioResult, error) {
	p := b.plan
	set := b.fanSet()
	rate := b.halfRate
	source := "S1's half load in this run"
	if rate == 0 {
		rate = p.s10Rate
		source = "half of the committed S1 closed loop"
	}
	res := &scenarioResult{
		Layout: describeFan(set),
		Load: fmt.Sprintf("open loop: %.0f messages/s (%s); the maintainer stopped for %d one-minute intervals (%d messages x 10 deliveries each in the default partitions), restarted after %s, then %s more once caught up; PARTITION_INTERVAL=1m, RETENTION=24h; receiver answers 200 at once",
			rate, source, p.s10Intervals, p.s10PerInterval, p.s10Before, p.s10After),
		Settings: b.river.env(),
	}
	s, err := b.newStage(ctx, "s10", nil)
	if err != nil {
		return nil, err
	}
	defer s.close()
	eps, err := registerEndpoints(ctx, s.client, s.rcv, b.secret, 32, set)
	if err != nil {
		return nil, err
	}
	covered, err := s.stopMaintainerAgo(ctx, p.s10Intervals)
	if err != nil {
		return nil, err
	}
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return nil, err
	}
	downtime := int(now.Truncate(time.Minute).Sub(covered) / time.Minute)
	if err := s.seedDowntime(ctx, eps[:set.perTenant], covered, downtime, p.s10PerInterval); err != nil {
		return nil, err
	}
	before, err := s.downtimeRows(ctx, covered, downtime)
	if err != nil {
		return nil, err
	}

	// The maintainer is stopped: the bench holds its lock.
	lock, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer lock.Release()
	if _, err := lock.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(store.MaintenanceLockKey)); err != nil {
		return nil, fmt.Errorf("hold the maintenance lock: %w", err)
	}
	locked := true
	unlock := func() error {
		if !locked {
			return nil
		}
		locked = false
		_, err := lock.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(store.MaintenanceLockKey))
		return err
	}
	defer func() { _ = unlock() }()
	env := map[string]string{"RETENTION": "24h", "PAYLOAD_RETENTION": "24h", "PARTITION_INTERVAL": "1m"}
	for k, v := range env {
		res.Settings[k] = v
	}
	if _, err := s.startDispatcher(ctx, env); err != nil {
		return nil, err
	}

	pr, err := s.begin(ctx, 50*time.Millisecond)
	if err != nil {
		return nil, err
	}
	base := s.rcv.total()
	t0 := s.clock.now()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { s.tracker.openLoop(lctx, rate, 64, roundRobin(set)) })
	stopLoad := func() {
		cancel()
		wg.Wait()
	}
	if !waitCtx(ctx, p.s10Before) {
		stopLoad()
		pr.stop()
		return nil, ctx.Err()
	}
	released := s.clock.now()
	if err := unlock(); err != nil {
		stopLoad()
		pr.stop()
		return nil, fmt.Errorf("release the maintenance lock: %w", err)
	}
	done, err := s.waitCaughtUp(ctx, p.s10CatchUpTimeout)
	if err != nil {
		stopLoad()
		pr.stop()
		return nil, err
	}
	if !waitCtx(ctx, p.s10After) {
		stopLoad()
		pr.stop()
		return nil, ctx.Err()
	}
	stopLoad()
	end := s.clock.now()
	res.Drained = s.tracker.drain(ctx, p.drain, 0)
	if err := pr.end(ctx, res, s.rcv.total()-base); err != nil {
		return nil, err
	}
	after, err := s.downtimeRows(ctx, covered, downtime)
	if err != nil {
		return nil, err
	}
	missing, accepted, err := s.acceptedMissing(ctx)
	if err != nil {
		return nil, err
	}
	var lost int64
	for t, n := range before {
		lost += n - after[t]
	}
	lost += missing
	adopted, err := s.adoptedPartitions(ctx)
	if err != nil {
		return nil, err
	}

	events := s.rcv.snapshot()
	w := window{from: released, to: end}
	m := s.tracker.measure(events, 0, w, set.perTenant)
	fill(res, m, w)
	pre := s.tracker.measure(events, 0, window{from: t0, to: released}, set.perTenant)
	res.Extra = map[string]any{
		"offered_msgs_per_s":       rate,
		"downtime_intervals":       downtime,
		"downtime_rows":            before,
		"rows_lost":                lost,
		"accepted_messages":        accepted,
		"catch_up_s":               round1((done - released).Seconds()),
		"adopted_partitions":       adopted,
		"p99_before_restart_ms":    round1(ms(percentile(pre.Latencies, 0.99))),
		"p50_before_restart_ms":    round1(ms(percentile(pre.Latencies, 0.5))),
		"latency_rule":             "the measured window (p50/p99 of the scenario) is the messages accepted from the release of the maintenance lock to the end of the load; before_restart: those accepted before it",
		"latency_by_accept_second": s.tracker.latencyBy(events, 0, window{from: t0, to: end}, time.Second),
	}
	return res, s.loadErrors(res, m)
}

// stopMaintainerAgo leaves the stage's database as a maintainer that last
// ran intervals minutes ago left it: every partition dropped (the legacy
// ones included), then the store makes those of that run (the interval
// before, that one and retention.Ahead more). It returns where they end.
func (s *stage) stopMaintainerAgo(ctx context.Context, intervals int) (time.Time, error) {
	rows, err := s.pool.Query(ctx, `SELECT parent, name FROM hookd_partitions ORDER BY parent, to_at`)
	if err != nil {
		return time.Time{}, fmt.Errorf("list partitions: %w", err)
	}
	type partition struct{ Parent, Name string }
	parts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[partition])
	if err != nil {
		return time.Time{}, fmt.Errorf("list partitions: %w", err)
	}
	for _, p := range parts {
		if _, err := s.pool.Exec(ctx, `ALTER TABLE `+p.Parent+` DETACH PARTITION `+p.Name+`; DROP TABLE `+p.Name); err != nil {
			return time.Time{}, fmt.Errorf("drop partition %s: %w", p.Name, err)
		}
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM hookd_partitions`); err != nil {
		return time.Time{}, fmt.Errorf("forget partitions: %w", err)
	}
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return time.Time{}, err
	}
	last := now.Add(-time.Duration(intervals) * time.Minute)
	if _, err := store.New(s.pool, nil).EnsurePartitions(ctx, last, time.Minute, retention.Ahead); err != nil {
		return time.Time{}, fmt.Errorf("make the last run's partitions: %w", err)
	}
	return last.Truncate(time.Minute).Add((retention.Ahead + 1) * time.Minute), nil
}

// seedDowntime writes perInterval messages of the endpoints' tenant into
// each of the intervals minutes from first, each with a 1 KB payload, a
// delivered delivery per endpoint and its attempt: they land in the
// default partitions.
func (s *stage) seedDowntime(ctx context.Context, eps []endpoint, first time.Time, intervals, perInterval int) error {
	ids := make([]string, len(eps))
	for i, e := range eps {
		ids[i] = e.id
	}
	lo, hi := store.IDBound("msg", first), store.IDBound("msg", first.Add(time.Duration(intervals)*time.Minute))
	steps := []struct {
		what, sql string
		args      []any
	}{
		{"messages", `
			INSERT INTO messages (id, tenant_id, event_type, created_at)
			SELECT 'msg_' || hookd_id_time_prefix(at) || lpad(n::text, 16, '0'), $4, 'bench.event', at
			FROM (SELECT $1::timestamptz + i * interval '1 minute' + (n * 50) * interval '1 millisecond' AS at, n
			      FROM generate_series(0, $2::int - 1) i, generate_series(1, $3::int) n) g`,
			[]any{first, intervals, perInterval, eps[0].tenant}},
		{"payloads", `
			INSERT INTO message_payloads (message_id, payload)
			SELECT id, json_build_object('seq', substr(id, 15), 'pad', repeat('x', 960)) FROM messages WHERE id >= $1 AND id < $2`,
			[]any{lo, hi}},
		{"deliveries", `
			INSERT INTO deliveries (id, message_id, endpoint_id, tenant_id, status, attempt_count, last_attempt_at,
				last_status_code, delivered_at, created_at, updated_at)
			SELECT 'dlv_' || substr(m.id, 5, 10) || lpad((substr(m.id, 15)::bigint * 100 + e.k)::text, 16, '0'),
				m.id, e.id, m.tenant_id, 'delivered', 1, m.created_at + interval '40 ms', 200,
				m.created_at + interval '40 ms', m.created_at, m.created_at + interval '40 ms'
			FROM messages m CROSS JOIN unnest($3::text[]) WITH ORDINALITY AS e(id, k)
			WHERE m.id >= $1 AND m.id < $2`,
			[]any{lo, hi, ids}},
		{"attempts", `
			INSERT INTO delivery_attempts (delivery_id, message_id, endpoint_id, attempt_number, attempted_at,
				duration_ms, status_code, classification)
			SELECT id, message_id, endpoint_id, 1, created_at + interval '20 ms', 15, 200, 'success'
			FROM deliveries WHERE id >= $1 AND id < $2`,
			[]any{"dlv_" + lo[len("msg_"):], "dlv_" + hi[len("msg_"):]}},
	}
	for _, st := range steps {
		if _, err := s.pool.Exec(ctx, st.sql, st.args...); err != nil {
			return fmt.Errorf("seed the downtime's %s: %w", st.what, err)
		}
	}
	return nil
}

// downtimeRows counts each table's rows of the intervals minutes from
// first.
func (s *stage) downtimeRows(ctx context.Context, first time.Time, intervals int) (map[string]int64, error) {
	end := first.Add(time.Duration(intervals) * time.Minute)
	out := map[string]int64{}
	for _, q := range []struct {
		table, sql string
		lo, hi     any
	}{
		{"messages", `SELECT count(*) FROM messages WHERE id >= $1 AND id < $2`, store.IDBound("msg", first), store.IDBound("msg", end)},
		{"message_payloads", `SELECT count(*) FROM message_payloads WHERE message_id >= $1 AND message_id < $2`, store.IDBound("msg", first), store.IDBound("msg", end)},
		{"deliveries", `SELECT count(*) FROM deliveries WHERE id >= $1 AND id < $2`, store.IDBound("dlv", first), store.IDBound("dlv", end)},
		{"delivery_attempts", `SELECT count(*) FROM delivery_attempts WHERE attempted_at >= $1 AND attempted_at < $2`, first, end},
	} {
		var n int64
		if err := s.pool.QueryRow(ctx, q.sql, q.lo, q.hi).Scan(&n); err != nil {
			return nil, fmt.Errorf("count the downtime's %s: %w", q.table, err)
		}
		out[q.table] = n
	}
	return out, nil
}

// waitCaughtUp waits until every default partition is empty and a
// partition covers the database's now in every table, and returns when
// (on the stage's clock).
func (s *stage) waitCaughtUp(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(timeout)
	for {
		var pending bool
		err := s.pool.QueryRow(ctx, `
			SELECT EXISTS (SELECT 1 FROM messages_default) OR EXISTS (SELECT 1 FROM message_payloads_default)
				OR EXISTS (SELECT 1 FROM deliveries_default) OR EXISTS (SELECT 1 FROM delivery_attempts_default)
				OR (SELECT count(DISTINCT parent) FROM hookd_partitions WHERE (from_at IS NULL OR from_at <= now()) AND to_at > now()) < 4`).Scan(&pending)
		if err != nil {
			return 0, fmt.Errorf("look at the default partitions: %w", err)
		}
		if !pending {
			return s.clock.now(), nil
		}
		if err := s.alive(); err != nil {
			return 0, err
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the maintainer had not caught up %s after its lock was released", timeout)
		}
		if !waitCtx(ctx, 100*time.Millisecond) {
			return 0, ctx.Err()
		}
	}
}

// acceptedMissing counts the messages the api accepted that the database
// does not hold, and the messages accepted.
func (s *stage) acceptedMissing(ctx context.Context) (missing, accepted int64, err error) {
	s.tracker.mu.Lock()
	ids := make([]string, 0, len(s.tracker.msgs))
	for id := range s.tracker.msgs {
		ids = append(ids, id)
	}
	s.tracker.mu.Unlock()
	slices.Sort(ids)
	var found int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM messages WHERE id = ANY($1)`, ids).Scan(&found); err != nil {
		return 0, 0, fmt.Errorf("look up the accepted messages: %w", err)
	}
	return int64(len(ids)) - found, int64(len(ids)), nil
}

// adoptedPartitions names the partitions wider than one minute: the
// default partitions the catch-up adopted.
func (s *stage) adoptedPartitions(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT name FROM hookd_partitions WHERE to_at - from_at > interval '1 minute' ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list adopted partitions: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
