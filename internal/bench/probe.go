package main

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// probe is one measured stretch of load in a stage: pg_stat_statements is
// reset when it begins, and the samplers (dispatcher RSS, lock waits and
// idle-in-transaction sessions in pg_stat_activity) run until it ends.
type probe struct {
	s         *stage
	cpu0      cpuSnap
	commits0  int64
	messages0 int64
	metrics0  map[string]float64
	logOffset int64
	stop      func()

	mu        sync.Mutex
	rssPeak   int64
	lockAge   float64 // longest age of a statement seen waiting for a lock, ms
	lockSeen  int
	idleTxMax float64 // longest idle-in-transaction time seen, ms
	idleTxWho string  // its application and last statement
	samples   int
}

// begin resets pg_stat_statements and starts the samplers.
func (s *stage) begin(ctx context.Context, sampleEvery time.Duration) (*probe, error) {
	if _, err := s.b.pg.admin.Exec(ctx, `SELECT pg_stat_statements_reset(), pg_stat_reset_shared('wal')`); err != nil {
		return nil, fmt.Errorf("reset pg_stat_statements: %w", err)
	}
	p := &probe{s: s, cpu0: s.b.cpuSnapshot(s), logOffset: s.b.pg.logSize(), messages0: s.accepted()}
	var err error
	if p.commits0, err = s.commits(ctx); err != nil {
		return nil, err
	}
	if p.metrics0, err = s.metrics(ctx, counterNames...); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { p.sampleActivity(sctx, sampleEvery) })
	wg.Go(func() { p.sampleRSS(sctx) })
	p.stop = func() {
		cancel()
		wg.Wait()
	}
	return p, nil
}

func (p *probe) sampleActivity(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rows, err := p.s.b.pg.admin.Query(ctx, `
			SELECT wait_event_type IS NOT DISTINCT FROM 'Lock',
				extract(epoch FROM clock_timestamp() - CASE WHEN wait_event_type = 'Lock' THEN query_start ELSE state_change END) * 1000,
				application_name, left(regexp_replace(query, '\s+', ' ', 'g'), 120)
			FROM pg_stat_activity
			WHERE datname = $1 AND pid <> pg_backend_pid()
				AND (wait_event_type = 'Lock' OR state IN ('idle in transaction', 'idle in transaction (aborted)'))`, p.s.db)
		if err != nil {
			continue
		}
		p.mu.Lock()
		p.samples++
		for rows.Next() {
			var lock bool
			var age float64
			var app, query string
			if rows.Scan(&lock, &age, &app, &query) != nil {
				continue
			}
			if lock {
				p.lockSeen++
				if age > p.lockAge {
					p.lockAge = age
				}
			} else if age > p.idleTxMax {
				p.idleTxMax = age
				p.idleTxWho = app + ": " + query
			}
		}
		p.mu.Unlock()
		rows.Close()
	}
}

func (p *probe) sampleRSS(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		for _, d := range p.s.dispatchers {
			if rss, err := rssBytes(d.pid()); err == nil {
				p.mu.Lock()
				p.rssPeak = max(p.rssPeak, rss)
				p.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// end stops the samplers and fills res with round trips per delivery
// (deliveries: everything answered 2xx since begin), the statements that
// dominate, the dispatcher's peak RSS, CPU use, lock waits and the longest
// idle-in-transaction session.
func (p *probe) end(ctx context.Context, res *scenarioResult, deliveries int64) error {
	p.stop()
	if err := p.s.alive(); err != nil {
		return err
	}
	cpu1 := p.s.b.cpuSnapshot(p.s)
	res.CPU = cpuUsage(p.cpu0, cpu1)
	conns, err := p.s.b.pg.connections(ctx)
	if err != nil {
		return err
	}
	m, err := p.s.metrics(ctx, counterNames...)
	if err != nil {
		return err
	}
	res.Attempts = int64(m["webhook_delivery_total"] - p.metrics0["webhook_delivery_total"])
	res.SnoozedAtCap = int64(m["webhook_delivery_concurrency_snoozed_total"] - p.metrics0["webhook_delivery_concurrency_snoozed_total"])
	res.RejectedByBreaker = int64(m["breaker_rejected_total"] - p.metrics0["breaker_rejected_total"])
	rt, err := p.s.b.roundTrips(ctx, p.s.oid)
	if err != nil {
		return err
	}
	if deliveries > 0 {
		d := float64(deliveries)
		// Four places: a delivery costs a tenth of a statement or less,
		// and S9's ratio of two figures rounded to two was a step of a
		// sixth (0.06 against 0.09 or 0.10).
		res.Roundtrips = round4(float64(rt.api+rt.dispatcher) / d)
		res.RoundtripsAPI = round4(float64(rt.api) / d)
		res.RoundtripsDispatcher = round4(float64(rt.dispatcher) / d)
	}
	res.RoundtripDeliveries = deliveries
	if msgs := p.s.accepted() - p.messages0; msgs > 0 {
		res.APIStatementsPerMessage = round2(float64(rt.api) / float64(msgs))
	}
	res.TopStatements = rt.top
	res.FrequentDispatcherStatements = rt.frequent
	commits, err := p.s.commits(ctx)
	if err != nil {
		return err
	}
	var walBytes, walSyncs, walFPI int64
	if err := p.s.b.pg.admin.QueryRow(ctx, `SELECT wal_bytes::bigint, wal_sync, wal_fpi FROM pg_stat_wal`).Scan(&walBytes, &walSyncs, &walFPI); err != nil {
		return fmt.Errorf("read pg_stat_wal: %w", err)
	}
	secs := cpu1.at.Sub(p.cpu0.at).Seconds()
	if deliveries > 0 {
		d := float64(deliveries)
		res.CommitsPerDelivery = round3(float64(commits-p.commits0) / d)
		res.WALBytesPerDelivery = round1(float64(walBytes) / d)
		res.WALFPIPerDelivery = round3(float64(walFPI) / d)
		res.CPUMsPerDelivery = cpuPerDelivery(res.CPU, secs, d)
		res.DispatcherSleepsPerDelivery = round3(float64(dispatcherSleeps(p.cpu0, cpu1)) / d)
		res.PostgresCPUMsByConnection = map[string]float64{}
		for c, cpu := range postgresCPUByConnection(p.cpu0, cpu1, conns) {
			res.PostgresCPUMsByConnection[c] = round4(cpu * 1000 / d)
		}
	}
	if secs > 0 {
		res.WALSyncsPerS = round1(float64(walSyncs) / secs)
	}
	waits, err := p.s.b.pg.lockWaits(p.s.db, p.logOffset)
	if err != nil {
		return err
	}
	p.s.nameRelations(ctx, waits)
	res.LockWaitsByLock = summariseWaits(waits)
	p.mu.Lock()
	defer p.mu.Unlock()
	res.DispatcherRSSMB = round1(float64(p.rssPeak) / (1 << 20))
	res.LockWaitsLogged = len(waits)
	for _, w := range waits {
		if w.Ms > res.MaxLockWaitMs {
			res.MaxLockWaitMs = round1(w.Ms)
			ww := w
			res.LongestLockWait = &ww
		}
	}
	if len(waits) == 0 {
		// Nothing waited as long as deadlock_timeout: report what sampling
		// saw, which cannot exceed it.
		res.MaxLockWaitMs = round1(min(p.lockAge, float64(lockWaitThreshold.Milliseconds())))
	}
	res.LockWaitSampledMs = round1(p.lockAge)
	res.MaxIdleInTxMs = round1(p.idleTxMax)
	res.MaxIdleInTxSession = p.idleTxWho
	res.ActivitySamples = p.samples
	return nil
}

var relationRE = regexp.MustCompile(`relation (\d+) of database \d+`)

// nameRelations replaces relation oids in the waits' lock descriptions with
// the relations' names.
func (s *stage) nameRelations(ctx context.Context, waits []lockWait) {
	names := map[string]string{}
	for i, w := range waits {
		m := relationRE.FindStringSubmatch(w.Lock)
		if m == nil {
			continue
		}
		name, ok := names[m[1]]
		if !ok {
			oid, _ := strconv.ParseUint(m[1], 10, 32)
			if err := s.pool.QueryRow(ctx, `SELECT $1::oid::regclass::text`, uint32(oid)).Scan(&name); err != nil {
				name = m[1]
			}
			names[m[1]] = name
		}
		waits[i].Lock = strings.Replace(w.Lock, m[0], "relation "+name, 1)
	}
}

// waitSummary is the lock waits on one kind of lock.
type waitSummary struct {
	Waits int     `json:"waits"`
	MaxMs float64 `json:"max_ms"`
}

// summariseWaits groups lock waits by lock, after dropping the transaction
// or tuple they were on.
func summariseWaits(waits []lockWait) map[string]waitSummary {
	if len(waits) == 0 {
		return nil
	}
	out := map[string]waitSummary{}
	for _, w := range waits {
		key := w.Lock
		if i := strings.Index(key, " on transaction "); i >= 0 {
			key = key[:i] + " on a transaction"
		}
		if w.Context != "" {
			key += " (" + w.Context + ")"
		}
		ws := out[key]
		ws.Waits++
		ws.MaxMs = max(ws.MaxMs, round1(w.Ms))
		out[key] = ws
	}
	return out
}

// statement is one normalised statement's calls in pg_stat_statements.
type statement struct {
	Role  string `json:"role"`
	Calls int64  `json:"calls"`
	// Rows is how many rows the calls returned or wrote together: a
	// fetch's jobs, a batch's records.
	Rows    int64   `json:"rows"`
	MeanMs  float64 `json:"mean_ms"`
	TotalMs float64 `json:"total_ms"`
	// WALBytes is the WAL the statement's calls generated.
	WALBytes int64 `json:"wal_bytes"`
	// WALFPI counts the full-page images among them.
	WALFPI int64  `json:"wal_fpi"`
	Query  string `json:"query"`
}

// statementCalls is what pg_stat_statements counted in one database since
// the last reset, by the api's and the dispatchers' roles.
type statementCalls struct {
	api, dispatcher int64
	top             []statement
	// frequent are the dispatcher's most frequent statements: what its
	// statements per delivery are made of.
	frequent []statement
}

var spaceRE = regexp.MustCompile(`\s+`)

// roundTrips reads pg_stat_statements for database oid. Every statement a
// client sends is one round trip (BEGIN and COMMIT included: track_utility
// is on).
func (b *bench) roundTrips(ctx context.Context, oid uint32) (statementCalls, error) {
	rows, err := b.pg.admin.Query(ctx, `
		SELECT r.rolname, s.calls, s.rows, s.mean_exec_time, s.total_exec_time, s.wal_bytes::bigint, s.wal_fpi, s.query
		FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid
		WHERE s.dbid = $1 AND r.rolname IN ($2, $3)`, oid, roleAPI, roleDispatcher)
	if err != nil {
		return statementCalls{}, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	defer rows.Close()
	var out statementCalls
	for rows.Next() {
		var st statement
		if err := rows.Scan(&st.Role, &st.Calls, &st.Rows, &st.MeanMs, &st.TotalMs, &st.WALBytes, &st.WALFPI, &st.Query); err != nil {
			return statementCalls{}, fmt.Errorf("read pg_stat_statements: %w", err)
		}
		if st.Role == roleAPI {
			out.api += st.Calls
			st.Role = "api"
		} else {
			out.dispatcher += st.Calls
			st.Role = "dispatcher"
		}
		st.Query = strings.TrimSpace(spaceRE.ReplaceAllString(st.Query, " "))
		if len(st.Query) > 140 {
			st.Query = st.Query[:140] + "..."
		}
		st.MeanMs, st.TotalMs = round3(st.MeanMs), round1(st.TotalMs)
		out.top = append(out.top, st)
	}
	if err := rows.Err(); err != nil {
		return statementCalls{}, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	for _, st := range out.top {
		if st.Role == "dispatcher" {
			out.frequent = append(out.frequent, st)
		}
	}
	slices.SortFunc(out.frequent, func(a, b statement) int { return cmp.Compare(b.Calls, a.Calls) })
	if len(out.frequent) > 12 {
		out.frequent = out.frequent[:12]
	}
	// The statements that cost Postgres the most time first.
	slices.SortFunc(out.top, func(a, b statement) int { return cmp.Compare(b.TotalMs, a.TotalMs) })
	if len(out.top) > 12 {
		out.top = out.top[:12]
	}
	return out, nil
}
