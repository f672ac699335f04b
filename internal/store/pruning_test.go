package store_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/trafficclass"
)

// planRelations returns the tables a statement's plan reads, after the
// partitions pruned at planning or executor startup are left out.
func planRelations(t *testing.T, b *testBundle, sql string, args ...any) []string {
	t.Helper()
	return planWalk(t, b, "Relation Name", sql, args...)
}

// planNodes returns the node types of a statement's plan.
func planNodes(t *testing.T, b *testBundle, sql string, args ...any) []string {
	t.Helper()
	return planWalk(t, b, "Node Type", sql, args...)
}

// planWalk returns the values of key in every node of a statement's plan.
func planWalk(t *testing.T, b *testBundle, key, sql string, args ...any) []string {
	t.Helper()
	var raw string
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `EXPLAIN (FORMAT JSON) `+sql, args...).Scan(&raw))
	var out []string
	eachPlanNode(t, raw, func(n map[string]any) {
		if r, ok := n[key].(string); ok {
			out = append(out, r)
		}
	})
	return out
}

// eachPlanNode calls visit with every node of an EXPLAIN (FORMAT JSON)
// answer.
func eachPlanNode(t *testing.T, raw string, visit func(n map[string]any)) {
	t.Helper()
	var plans []map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw), &plans))
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		visit(n)
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			walk(c.(map[string]any))
		}
	}
	for _, p := range plans {
		walk(p["Plan"].(map[string]any))
	}
}

// TestAttemptReadsPruneToTheirTimeRange: reclassification, /stats and
// attempt lists read only the attempt partitions that overlap their time
// range (and the default partition, which no range can exclude and which
// the maintainer keeps empty); a delivery is read from its partition only.
// The test fails when a plan names a partition outside the range.
func TestAttemptReadsPruneToTheirTimeRange(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	// Start from no partition at all (the legacy ones span every past
	// time), then make three groups: older than reclassification's
	// history, two hours ago, and now.
	b.db.DropPartitions(t, true)
	var now time.Time
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&now))
	for _, at := range []time.Time{now.Add(-trafficclass.HistoryWindow - 3*time.Hour), now.Add(-2 * time.Hour), now} {
		_, err := s.EnsurePartitions(ctx, at, time.Minute, 2)
		require.NoError(t, err)
	}
	parts, err := s.Partitions(ctx)
	require.NoError(t, err)
	attemptParts := map[string]store.Partition{}
	for _, p := range parts {
		if p.Parent == "delivery_attempts" {
			attemptParts[p.Name] = p
		}
	}
	require.Len(t, attemptParts, 3*4)

	ep := b.endpoint(t, "acme")
	m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`1`)}, b.enq)
	require.NoError(t, err)
	d := m.Deliveries[0]

	// check fails if the plan reads an attempt partition that does not
	// overlap [from, to), or reads none of those that do.
	check := func(name string, from, to time.Time, rels []string) {
		t.Helper()
		read := 0
		for _, r := range rels {
			if !strings.HasPrefix(r, "delivery_attempts") {
				continue
			}
			if r == "delivery_attempts_default" {
				continue
			}
			p, ok := attemptParts[r]
			require.True(t, ok, "%s reads %s", name, r)
			require.True(t, p.To.After(from) && p.From.Before(to), "%s reads %s [%v, %v), outside [%v, %v)", name, r, p.From, p.To, from, to)
			read++
		}
		require.NotZero(t, read, "%s reads no partition of its range: %v", name, rels)
	}
	far := now.Add(24 * time.Hour)
	check("stats", now.Add(-6*time.Minute), far, planRelations(t, b, store.EndpointStatsSQL, ep.ID, 5))
	check("reclassification", now.Add(-trafficclass.HistoryWindow-time.Minute), far,
		planRelations(t, b, store.MeasureTrafficSQL, ep.ID, trafficclass.HistoryWindow))
	created, _ := store.IDTime(d.ID)
	since := created.Add(-time.Minute)
	check("a delivery's attempts", since, far,
		planRelations(t, b, store.ListAttemptsSQL, d.ID, "", "", since, nil, nil, int64(0), 10))
	windowFrom := now.Add(-2*time.Hour - time.Minute)
	windowTo := now.Add(-2*time.Hour + time.Minute)
	check("an endpoint's attempts in a window", windowFrom, windowTo,
		planRelations(t, b, store.ListAttemptsSQL, "", ep.ID, "", windowFrom, windowTo, nil, int64(0), 10))

	// A delivery by id: one partition of deliveries.
	var dlv []string
	for _, r := range planRelations(t, b, store.GetDeliverySQL, d.ID) {
		if strings.HasPrefix(r, "deliveries_") { // the parent is the UPDATE's own target
			dlv = append(dlv, r)
		}
	}
	require.Len(t, dlv, 1, "%v", dlv)
	require.NotEqual(t, "deliveries_default", dlv[0])
}

// TestExpirySweepReadsOnlyUnfinishedDeliveries: retention's sweep for the
// deliveries it must make expired reads the small index of unfinished
// ones, not the interval's delivered rows (a plan that probed every
// endpoint's rows took over a minute per run in a benchmark, on partitions
// not analyzed yet).
func TestExpirySweepReadsOnlyUnfinishedDeliveries(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	_, err := s.EnsurePartitions(ctx, time.Now(), time.Minute, 2)
	require.NoError(t, err)
	ep := b.endpoint(t, "acme")
	m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`1`)}, b.enq)
	require.NoError(t, err)
	// 20,000 delivered deliveries of the same interval, never analyzed.
	_, err = b.db.Pool.Exec(ctx, `
		INSERT INTO deliveries (id, message_id, endpoint_id, tenant_id, status)
		SELECT $1 || lpad(g::text, 16, '0'), $2, $3, 'acme', 'delivered' FROM generate_series(1, 20000) g`,
		m.ID[:len("msg_")+10], m.ID, ep.ID)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE deliveries SET id = 'dlv_' || substr(id, 5) WHERE id LIKE 'msg_%'`)
	require.NoError(t, err)
	var raw string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+store.ExpireDeliveriesSQL,
		store.IDBound("dlv", time.Now().Add(time.Hour)), "x", 5000).Scan(&raw))
	require.Contains(t, raw, "deliveries_p")
	var plans []map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw), &plans))
	// Rows read across the plan's scans of deliveries stay far below the
	// interval's 20,000.
	var read float64
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if r, ok := n["Relation Name"].(string); ok && strings.HasPrefix(r, "deliveries") {
			rows, _ := n["Actual Rows"].(float64)
			removed, _ := n["Rows Removed by Filter"].(float64)
			loops, _ := n["Actual Loops"].(float64)
			read += (rows + removed) * max(loops, 1)
		}
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			walk(c.(map[string]any))
		}
	}
	walk(plans[0]["Plan"].(map[string]any))
	require.Less(t, read, 1000.0)
}

// TestLedgerUpdatePrunesToItsDeliveries: the ledger's batch UPDATE of
// deliveries reads only the partitions holding the batch's deliveries (and
// the default one), however many intervals of history the table keeps; a
// join on the key alone would plan a scan of every partition.
func TestLedgerUpdatePrunesToItsDeliveries(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	// Ten days of daily partitions, then today's and two ahead.
	now := dailyPartitionsOnly(t, s, b, 10, 12)
	parts, err := s.Partitions(ctx)
	require.NoError(t, err)
	var mine string
	deliveryParts := 0
	b.endpoint(t, "acme")
	m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`1`)}, b.enq)
	require.NoError(t, err)
	d := m.Deliveries[0]
	for _, p := range parts {
		if p.Parent != "deliveries" {
			continue
		}
		deliveryParts++
		if lo, hi := store.IDBound("dlv", p.From), store.IDBound("dlv", p.To); d.ID >= lo && d.ID < hi {
			mine = p.Name
		}
	}
	require.GreaterOrEqual(t, deliveryParts, 12)
	require.NotEmpty(t, mine)

	rels := planRelations(t, b, store.LedgerWriteSQL,
		[]string{d.ID}, []int32{1}, []string{store.DeliveryDelivered}, []int32{1}, []*time.Time{&now},
		[]*time.Time{nil}, []*int32{nil}, []*string{nil}, []*time.Time{nil}, []bool{false}, []*int64{nil}, []*int64{nil}, []int32{0}, []bool{false},
		[]string{d.ID}, []int64{1}, []int32{1},
		[]string{d.ID}, []string{m.ID}, []string{d.EndpointID}, []int32{1}, []time.Time{now}, []float64{1}, []*int32{nil}, []*string{nil},
		[]string{"success"}, []string{""}, []bool{false}, []*int32{nil},
		[]string{d.EndpointID}, []string{d.ID})
	var read []string
	for _, r := range rels {
		if strings.HasPrefix(r, "deliveries_") { // the parent is the UPDATE's own target
			read = append(read, r)
		}
	}
	require.NotEmpty(t, read)
	for _, r := range read {
		require.Contains(t, []string{mine, "deliveries_default"}, r, "the plan reads partition %s of %d", r, deliveryParts)
	}
}

// TestEndpointAttemptsPageReadsOnlyItsRows: the first page of an endpoint's
// attempts reads about a page of rows from each partition, newest first
// through the (endpoint_id, attempted_at) index, however many attempts the
// endpoint has (an order by id alone read and sorted all of them: 300 ms a
// page over a month of history).
func TestEndpointAttemptsPageReadsOnlyItsRows(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	// Three daily partitions (and two ahead), 12,000 attempts spread over
	// them on 20 endpoints: 600 for ep_a.
	now := dailyPartitionsOnly(t, s, b, 2, 4)
	_, err := b.db.Pool.Exec(ctx, `
		INSERT INTO delivery_attempts (delivery_id, message_id, endpoint_id, attempt_number, attempted_at, duration_ms, classification)
		SELECT 'dlv_' || i, 'msg_' || i, 'ep_' || chr(97 + i % 20), 1, $1::timestamptz - (i * interval '20 seconds'), 1, 'success'
		FROM generate_series(1, 12000) i`, now)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `ANALYZE delivery_attempts`)
	require.NoError(t, err)

	const limit = 11
	var raw string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+store.ListAttemptsSQL,
		"", "ep_a", "", nil, nil, nil, int64(0), limit).Scan(&raw))
	var plans []map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw), &plans))
	var read, scans float64
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if _, ok := n["Relation Name"]; ok {
			rows, _ := n["Actual Rows"].(float64)
			removed, _ := n["Rows Removed by Filter"].(float64)
			read += rows + removed
			scans++
		}
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			walk(c.(map[string]any))
		}
	}
	walk(plans[0]["Plan"].(map[string]any))
	require.NotZero(t, scans)
	require.LessOrEqual(t, read, scans*(limit+1), "rows read by %v scans: %s", scans, raw)

	// And the pages still run newest first with no attempt twice.
	var seen []int64
	f := store.AttemptFilter{EndpointID: "ep_a", Limit: 250}
	for {
		page, err := s.ListAttempts(ctx, f)
		require.NoError(t, err)
		for i, a := range page {
			if i > 0 {
				require.False(t, a.AttemptedAt.After(page[i-1].AttemptedAt))
			}
			seen = append(seen, a.ID)
		}
		if len(page) < f.Limit {
			break
		}
		last := page[len(page)-1]
		f.After = store.AttemptKey{At: last.AttemptedAt, ID: last.ID}
	}
	require.Len(t, seen, 600)
	slices.Sort(seen)
	require.Len(t, slices.Compact(seen), 600)
}

// dailyPartitionsOnly replaces every partition with daily ones from
// daysAgo days before the database's now, count of them, and returns that
// now.
func dailyPartitionsOnly(t *testing.T, s *store.Store, b *testBundle, daysAgo, count int) time.Time {
	t.Helper()
	ctx := context.Background()
	b.db.DropPartitions(t, true)
	var now time.Time
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&now))
	_, err := s.EnsurePartitions(ctx, now.Add(-time.Duration(daysAgo)*24*time.Hour), 24*time.Hour, count)
	require.NoError(t, err)
	return now
}

// TestLedgerWriteWorkGrowsWithItsBatchNotItsSquare: the rows the ledger's
// statement passes between its plan's nodes (EXPLAIN ANALYZE, rolled
// back) grow with the batch, a few dozen per record at any size. The
// update's check that each row had been locked first was planned as a
// nested loop over the locked rows (the planner counted one row out of
// the join of the batch and deliveries), scanning them all for each
// delivery: 100 records passed 6,700 rows, and 480 on a larger table
// 115,000 and most of the statement's time.
func TestLedgerWriteWorkGrowsWithItsBatchNotItsSquare(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	for range 10 {
		b.endpoint(t, "acme")
	}
	var ds []store.Delivery
	for range 50 {
		m, _, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`1`)}, b.enq)
		require.NoError(t, err)
		ds = append(ds, m.Deliveries...)
	}
	_, err := b.db.Pool.Exec(ctx, `ANALYZE deliveries`)
	require.NoError(t, err)
	// rowsPassed runs the statement for a batch of the deliveries' first
	// attempts, delivered, and sums every node's rows over its loops.
	rowsPassed := func(batch []store.Delivery) float64 {
		t.Helper()
		now := time.Now()
		n := len(batch)
		ids, series, statuses, counts := make([]string, n), make([]int32, n), make([]string, n), make([]int32, n)
		at, none, codes, errs := make([]*time.Time, n), make([]*time.Time, n), make([]*int32, n), make([]*string, n)
		falses, jobs, claimJobs, claimAtts := make([]bool, n), make([]*int64, n), make([]*int64, n), make([]int32, n)
		claimRuns, claimIDs := make([]int32, n), make([]int64, n)
		messages, endpoints, attempted, durations := make([]string, n), make([]string, n), make([]time.Time, n), make([]float64, n)
		kinds, excerpts, timeouts := make([]string, n), make([]string, n), make([]*int32, n)
		for i, d := range batch {
			ids[i], series[i], statuses[i], counts[i], at[i] = d.ID, 1, store.DeliveryDelivered, 1, &now
			job := int64(7)
			claimJobs[i], claimAtts[i], claimIDs[i], claimRuns[i] = &job, 1, 7, 1
			messages[i], endpoints[i], attempted[i], durations[i], kinds[i] = d.MessageID, d.EndpointID, now, 1, "success"
		}
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { require.NoError(t, tx.Rollback(ctx)) }()
		var raw string
		require.NoError(t, tx.QueryRow(ctx, `EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) `+store.LedgerWriteSQL,
			ids, series, statuses, counts, at, none, codes, errs, none, falses, jobs, claimJobs, claimAtts, falses,
			ids, claimIDs, claimRuns,
			ids, messages, endpoints, counts, attempted, durations, codes, errs, kinds, excerpts, falses, timeouts,
			[]string{}, []string{}).Scan(&raw))
		var rows float64
		eachPlanNode(t, raw, func(n map[string]any) {
			r, _ := n["Actual Rows"].(float64)
			loops, _ := n["Actual Loops"].(float64)
			rows += r * loops
		})
		return rows
	}
	for _, batch := range [][]store.Delivery{ds[:100], ds[100:500]} {
		rows := rowsPassed(batch)
		require.LessOrEqual(t, rows, 30*float64(len(batch)), "%d records passed %.0f rows", len(batch), rows)
	}
}
