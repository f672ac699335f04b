package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/retention"
	"github.com/hookd/hookd/internal/store"
)

// S8: a month of history (make bench-month; not in make bench). S1's
// layout over a database holding 30 days of backdated messages, payloads,
// deliveries and attempts (4 attempts per delivery: three 500s and a 200,
// or four 500s for every 50th delivery, failed), bulk-loaded by
// server-side INSERT ... SELECT generate_series straight into the daily
// partitions the maintainer makes (store.EnsurePartitions with the default
// one-day interval; the empty legacy partitions of the fresh database are
// dropped first, as retention would have a month in). Then S1's closed
// loop on top, set against S1 on an empty database in the same run
// (>= 0.9x); one reclassification pass (delivery.ReclassifyWorker, in this
// process) over the 1,000 endpoints; GET /v1/endpoints/{id}/attempts
// over every endpoint in turn; and a tuning pass over every class, queued
// to the dispatcher's tuning leader, while S1's closed loop runs again
// (s8Tune). The history holds plan.s8Attempts attempts (-month-attempts).

// s8Days is how many days of history S8 loads.
const s8Days = 30

// s8AttemptsPerDelivery is the attempts each loaded delivery made.
const s8AttemptsPerDelivery = 4

// s8Settings are the cluster settings of a run that includes S8: with
// wal_level minimal a partition truncated and filled in one transaction
// writes no WAL for its rows, so the load writes the data once. They hold
// for the whole run, so S1 on the empty database runs under them too.
var s8Settings = []string{"wal_level = minimal", "max_wal_senders = 0", "max_wal_size = '4GB'"}

// s8Targets are S8's goals.
const (
	s8ThroughputGoal = "S8 deliveries/s over a month of history >= 0.9 x S1 on an empty database"
	// A pass must end within the shortest reclassification interval.
	s8ReclassifyGoal = "S8 one reclassification pass over every endpoint < 60 s"
	s8AttemptsGoal   = "S8 GET /v1/endpoints/{id}/attempts p99 < 500 ms"
)

func runS8(ctx context.Context, b *bench) (*scenarioResult, error) {
	p := b.plan
	set := b.fanSet()
	messages := max(p.s8Attempts/(set.perTenant*s8AttemptsPerDelivery), 1)
	res := &scenarioResult{
		Layout: describeFan(set),
		Load: fmt.Sprintf("%d days of history (%d messages, %d deliveries, %d attempts) bulk-loaded into daily partitions; then %s for %s + %s",
			s8Days, messages, messages*set.perTenant, messages*set.perTenant*s8AttemptsPerDelivery,
			b.describeClosedLoop(), p.warmup, p.s1Measure),
		Settings: b.river.env(),
	}
	s, err := b.newStage(ctx, "s8", nil)
	if err != nil {
		return nil, err
	}
	defer s.close()
	eps, err := registerEndpoints(ctx, s.client, s.rcv, b.secret, 32, set)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	started := time.Now()
	loaded, err := s.loadMonth(ctx, now, messages, set.tenants)
	if err != nil {
		return nil, err
	}
	loadS := time.Since(started).Seconds()
	vacuumed := time.Now()
	// A month-old database has been vacuumed and analyzed: without it
	// autovacuum would work through the load during the measurement.
	if _, err := s.pool.Exec(ctx, `VACUUM (ANALYZE) messages, message_payloads, deliveries, delivery_attempts`); err != nil {
		return nil, fmt.Errorf("vacuum the loaded history: %w", err)
	}
	vacuumS := time.Since(vacuumed).Seconds()
	sizes, err := s.tableSizes(ctx, 0, s7Tables)
	if err != nil {
		return nil, err
	}
	var dbBytes int64
	if err := s.pool.QueryRow(ctx, `SELECT pg_database_size(current_database())`).Scan(&dbBytes); err != nil {
		return nil, fmt.Errorf("database size: %w", err)
	}
	b.logger.Info("s8_loaded", slog.Any("rows", loaded), slog.Float64("load_s", round1(loadS)), slog.Float64("vacuum_s", round1(vacuumS)),
		slog.Float64("database_gib", round2(float64(dbBytes)/(1<<30))))

	// The history was passed when it was loaded: the dispatcher's tuning
	// leader starts no pass of its own, and the only passes of the run are
	// the ones s8Tune measures.
	if err := s8MarkPassed(ctx, store.New(s.pool, nil)); err != nil {
		return nil, err
	}
	// The leader looks for queued passes every tenth of the shadow's
	// length (a minute at most): a 30 s shadow has it look every 3 s, so
	// the passes start when queued rather than up to a minute later.
	// No class of the run tunes in apply mode, so no shadow runs.
	leader, err := s.startDispatcher(ctx, map[string]string{"TUNE_SHADOW": "30s"})
	if err != nil {
		return nil, err
	}
	if err := s.closedRun(ctx, res, roundRobin(set), set.perTenant, p.warmup, p.s1Measure); err != nil {
		return res, err
	}

	rc := &delivery.ReclassifyWorker{Store: store.New(s.pool, nil), Logger: slog.New(slog.DiscardHandler)}
	passStart := time.Now()
	if err := rc.Work(ctx, nil); err != nil {
		return res, fmt.Errorf("reclassification pass: %w", err)
	}
	passS := time.Since(passStart).Seconds()

	lat, err := s.readAttempts(ctx, eps, p.s8AttemptReads)
	if err != nil {
		return res, err
	}
	res.Extra = map[string]any{
		"days":                     s8Days,
		"rows_loaded":              loaded,
		"load_s":                   round1(loadS),
		"vacuum_analyze_s":         round1(vacuumS),
		"table_bytes_after_load":   sizes.Bytes,
		"database_bytes":           dbBytes,
		"reclassify_pass_s":        round2(passS),
		"reclassify_endpoints":     len(eps),
		"attempts_list_requests":   len(lat),
		"attempts_list_p50_ms":     round1(ms(percentile(lat, 0.5))),
		"attempts_list_p99_ms":     round1(ms(percentile(lat, 0.99))),
		"attempts_list_max_ms":     round1(ms(percentile(lat, 1))),
		"attempts_list_rule":       "GET /v1/endpoints/{id}/attempts (first page, default limit) for every endpoint in turn, one request at a time, after the closed loop",
		"loaded_history_attempted": fmt.Sprintf("%s to %s", now.Add(-s8Days*24*time.Hour).UTC().Format(time.DateOnly), now.UTC().Format(time.DateOnly)),
	}
	if err := s.s8Tune(ctx, res, leader, func(r *scenarioResult) error {
		return s.closedRun(ctx, r, roundRobin(set), set.perTenant, p.warmup, p.s1Measure)
	}); err != nil {
		return res, err
	}
	return res, nil
}

// loadMonth drops the fresh database's empty legacy partitions, has the
// store make the daily partitions of the last s8Days days (before today's,
// which the dispatcher's maintainer makes at start), and fills each day's
// four partitions with messages spread evenly over the day (tenants in
// turn), their payloads, a delivery per endpoint of the tenant and its
// attempts; two days load at a time. It returns the rows loaded per table.
func (s *stage) loadMonth(ctx context.Context, now time.Time, messages, tenants int) (map[string]int64, error) {
	for _, t := range []string{"delivery_attempts", "deliveries", "message_payloads", "messages"} {
		if _, err := s.pool.Exec(ctx, `ALTER TABLE `+t+` DETACH PARTITION `+t+`_legacy`); err != nil {
			return nil, fmt.Errorf("detach legacy partition of %s: %w", t, err)
		}
		if _, err := s.pool.Exec(ctx, `DROP TABLE `+t+`_legacy`); err != nil {
			return nil, fmt.Errorf("drop legacy partition of %s: %w", t, err)
		}
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM hookd_partitions WHERE name LIKE '%\_legacy'`); err != nil {
		return nil, fmt.Errorf("forget legacy partitions: %w", err)
	}
	interval := retention.DefaultInterval
	today := now.UTC().Truncate(interval)
	first := today.Add(-s8Days * interval)
	st := store.New(s.pool, nil)
	// EnsurePartitions makes the interval before "now"'s and ahead more:
	// from first to today exactly.
	if _, err := st.EnsurePartitions(ctx, first.Add(interval), interval, s8Days-2); err != nil {
		return nil, fmt.Errorf("make the month's partitions: %w", err)
	}
	parts, err := st.Partitions(ctx)
	if err != nil {
		return nil, err
	}
	byDay := map[time.Time]map[string]string{}
	for _, p := range parts {
		if p.From.Before(first) || !p.From.Before(today) {
			continue
		}
		if byDay[p.From] == nil {
			byDay[p.From] = map[string]string{}
		}
		byDay[p.From][p.Parent] = p.Name
	}
	if len(byDay) != s8Days {
		return nil, fmt.Errorf("make the month's partitions: %d days made, want %d", len(byDay), s8Days)
	}
	if _, err := s.pool.Exec(ctx, `
		CREATE TABLE bench_tenants AS
			SELECT (dense_rank() OVER (ORDER BY tenant_id) - 1)::int AS t, tenant_id FROM endpoints GROUP BY tenant_id`); err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	perDay := max(messages/s8Days, 1)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(2)
	for day := range s8Days {
		from := first.Add(time.Duration(day) * interval)
		names := byDay[from]
		g.Go(func() error {
			return s.loadDay(gctx, names, from, interval, int64(day*perDay), perDay, tenants)
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if _, err := s.pool.Exec(ctx, `DROP TABLE bench_tenants`); err != nil {
		return nil, fmt.Errorf("drop tenant list: %w", err)
	}
	out := map[string]int64{}
	for _, t := range []string{"messages", "message_payloads", "deliveries", "delivery_attempts"} {
		var n int64
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+t).Scan(&n); err != nil {
			return nil, fmt.Errorf("count %s: %w", t, err)
		}
		out[t] = n
	}
	return out, nil
}

// loadDay fills one day's partitions in one transaction that truncates
// them first (so, with wal_level minimal, their rows skip the WAL):
// perDay messages from from to a minute before the day ends (their
// attempts, seconds later, stay in the day), numbered from base.
func (s *stage) loadDay(ctx context.Context, names map[string]string, from time.Time, interval time.Duration, base int64, perDay, tenants int) error {
	step := float64((interval - time.Minute).Milliseconds()) / float64(perDay)
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		steps := []struct{ what, sql string }{
			{"truncate", `TRUNCATE ` + names["messages"] + `, ` + names["message_payloads"] + `, ` + names["deliveries"] + `, ` + names["delivery_attempts"]},
			{"messages", `
				INSERT INTO ` + names["messages"] + ` (id, tenant_id, event_type, created_at)
				SELECT 'msg_' || hookd_id_time_prefix(ts) || lpad(upper(to_hex(n)), 16, '0'), bt.tenant_id, 'bench.event', ts
				FROM (SELECT $2::bigint + i AS n, $1::timestamptz + (i * $3::float8) * interval '1 millisecond' AS ts
				      FROM generate_series(0, $4::int - 1) i) g
				JOIN bench_tenants bt ON bt.t = g.n % $5::int
				ORDER BY 1`},
			{"payloads", `
				INSERT INTO ` + names["message_payloads"] + ` (message_id, payload)
				SELECT id, json_build_object('seq', substr(id, 15), 'pad', repeat('x', 960)) FROM ` + names["messages"]},
			{"deliveries", `
				INSERT INTO ` + names["deliveries"] + ` (id, message_id, endpoint_id, tenant_id, status, attempt_count, last_attempt_at,
					last_status_code, delivered_at, created_at, updated_at)
				SELECT 'dlv_' || substr(m.id, 5, 10) || lpad(upper(to_hex(('x' || substr(m.id, 15))::bit(64)::bigint * 16 + e.k)), 16, '0'),
					m.id, e.id, m.tenant_id,
					CASE WHEN x.failed THEN 'failed' ELSE 'delivered' END, ` + fmt.Sprint(s8AttemptsPerDelivery) + `,
					m.created_at + interval '4 seconds', CASE WHEN x.failed THEN 500 ELSE 200 END,
					CASE WHEN x.failed THEN NULL ELSE m.created_at + interval '4 seconds' END,
					m.created_at, m.created_at + interval '4 seconds'
				FROM ` + names["messages"] + ` m
				JOIN (SELECT id, tenant_id, (row_number() OVER (PARTITION BY tenant_id ORDER BY id) - 1)::int AS k FROM endpoints) e
					ON e.tenant_id = m.tenant_id
				CROSS JOIN LATERAL (SELECT (('x' || substr(m.id, 15))::bit(64)::bigint * 16 + e.k) % 50 = 0 AS failed) x
				ORDER BY 1`},
			{"attempts", `
				INSERT INTO ` + names["delivery_attempts"] + ` (id, delivery_id, message_id, endpoint_id, attempt_number, attempted_at,
					duration_ms, status_code, classification)
				SELECT nextval(pg_get_serial_sequence('delivery_attempts', 'id')), d.id, d.message_id, d.endpoint_id, a,
					d.created_at + a * interval '1 second', 5 + (a * 7) % 40,
					CASE WHEN a < ` + fmt.Sprint(s8AttemptsPerDelivery) + ` OR d.status = 'failed' THEN 500 ELSE 200 END,
					CASE WHEN a < ` + fmt.Sprint(s8AttemptsPerDelivery) + ` OR d.status = 'failed' THEN 'failure' ELSE 'success' END
				FROM ` + names["deliveries"] + ` d CROSS JOIN generate_series(1, ` + fmt.Sprint(s8AttemptsPerDelivery) + `) a
				ORDER BY d.created_at, a`},
		}
		for _, st := range steps {
			var err error
			if st.what == "messages" {
				_, err = tx.Exec(ctx, st.sql, from, base, step, perDay, tenants)
			} else {
				_, err = tx.Exec(ctx, st.sql)
			}
			if err != nil {
				return fmt.Errorf("load %s of %s: %w", st.what, from.Format(time.DateOnly), err)
			}
		}
		return nil
	})
}

// readAttempts asks for the first page of every endpoint's attempts in
// turn, n requests one at a time, and returns their latencies, sorted.
func (s *stage) readAttempts(ctx context.Context, eps []endpoint, n int) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, n)
	for i := range n {
		e := eps[i%len(eps)]
		start := time.Now()
		if _, err := s.client.do(ctx, http.MethodGet, "/v1/endpoints/"+e.id+"/attempts", nil, nil); err != nil {
			return nil, fmt.Errorf("list attempts: %w", err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	return lat, nil
}
