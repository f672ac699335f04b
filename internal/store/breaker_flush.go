package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/internal/breaker"
)

// OutcomeCount is what one process counted for one endpoint, generation and
// bucket since its last flush.
type OutcomeCount struct {
	EndpointID  string
	Generation  int64
	BucketStart time.Time
	// Window is the counting breaker's window (breaker.Config.Window):
	// its BucketsPerWindow-th part is the bucket's width, which places
	// the bucket in its row (TallySlots).
	Window    time.Duration
	Successes int
	Failures  int
	// Shard names the process that counted (its fleet ID): each process
	// adds to rows of its own (breaker_slots), never waiting for another's
	// flush.
	Shard string
}

// TallySlots is how many rows of breaker_slots a process keeps for one
// endpoint and generation: a bucket's row is its index (its start over
// its width) modulo TallySlots, twice the buckets of a window, so the
// buckets a reader reads (breaker.BucketSpan, 22 widths) never share a
// row, and a row is written over only by a bucket two windows younger.
const TallySlots = 2 * breaker.BucketsPerWindow

// slotKeep is how long the periodic prune keeps a row of breaker_slots,
// for keep the span of the longest window (breaker.BucketSpan): past the
// two windows after which its slot is written again, so the rows of a
// busy endpoint are updated in place, never deleted and inserted again.
func slotKeep(keep time.Duration) time.Duration { return 2 * keep }

// tallySlot is count c's row among its process's TallySlots.
func tallySlot(c OutcomeCount) (int16, error) {
	width := c.Window / breaker.BucketsPerWindow
	if width <= 0 {
		return 0, fmt.Errorf("count of endpoint %s: no window", c.EndpointID)
	}
	idx := c.BucketStart.UnixNano() / int64(width)
	return int16(((idx % TallySlots) + TallySlots) % TallySlots), nil
}

// breakerBucketRows are every process's bucket rows, of the three tables
// (migrations 0044 and 0049; a dispatcher of a previous version writes
// one of the older two during a rolling upgrade): readers add up the rows
// of a bucket as they add up buckets (breaker.Window.Add). Conditions on
// the columns reach each table's primary key through the UNION ALL. A
// row of breaker_slots older than a reader's span holds a bucket its
// slot held before, and the readers' span leaves it out as any old
// bucket.
const breakerBucketRows = `(SELECT endpoint_id, generation, bucket_start, successes, failures FROM breaker_slots
	UNION ALL SELECT endpoint_id, generation, bucket_start, successes, failures FROM breaker_tallies
	UNION ALL SELECT endpoint_id, generation, bucket_start, successes, failures FROM breaker_buckets)`

// RunCount is one process's consecutive-failure run for a consecutive-mode
// endpoint since its last flush.
type RunCount struct {
	EndpointID string
	Generation int64
	Run        breaker.Run
}

// EvidenceRequest names an endpoint whose shared evidence the flush should
// return, with the window to load.
type EvidenceRequest struct {
	EndpointID string
	Window     time.Duration
}

// Evidence is an endpoint's shared breaker after a flush: its stored fields,
// its window loaded with every process's buckets of the current generation,
// and the database time of the read. For an endpoint whose run was merged
// in this flush, Breaker.Consecutive is the count BEFORE the merge and
// PriorRun the merged run, so breaker.ApplyRun reproduces the merge.
type Evidence struct {
	EndpointID string
	Breaker    breaker.Breaker
	Buckets    []breaker.Bucket
	PriorRun   *breaker.Run
	Now        time.Time
}

// FlushOutcomes adds a process's counts to its rows of the shared buckets
// and merges its consecutive runs, both only for breakers still closed at
// the counted generation (older outcomes are dropped), then returns the
// shared evidence of the endpoints in want. One transaction, one network
// round trip; a flush that reads nothing back (no runs, nothing in want)
// is one statement. Its rows are a fixed ring per endpoint (TallySlots),
// updated in place: a flush deletes nothing, and the periodic prune
// (PruneBuckets) takes the rows of endpoints gone quiet.
func (s *Store) FlushOutcomes(ctx context.Context, counts []OutcomeCount, runs []RunCount, want []EvidenceRequest) ([]Evidence, error) {
	rows, err := slotCounts(counts)
	if err != nil {
		return nil, err
	}
	var (
		ids      = make([]string, len(rows))
		gens     = make([]int64, len(rows))
		starts   = make([]time.Time, len(rows))
		succ     = make([]int32, len(rows))
		fail     = make([]int32, len(rows))
		shards   = make([]string, len(rows))
		slots    = make([]int16, len(rows))
		runIDs   = make([]string, len(runs))
		runGens  = make([]int64, len(runs))
		runFails = make([]int32, len(runs))
		runPre   = make([]int32, len(runs))
		runMax   = make([]int32, len(runs))
		runSuf   = make([]int32, len(runs))
		runMixed = make([]bool, len(runs))
		wantIDs  = make([]string, len(want))
		wantWin  = make([]time.Duration, len(want))
	)
	for i, c := range rows {
		ids[i], gens[i], starts[i], succ[i], fail[i], shards[i], slots[i] =
			c.count.EndpointID, c.count.Generation, c.count.BucketStart, int32(c.count.Successes), int32(c.count.Failures), c.count.Shard, c.slot
	}
	// Every flush locks the breaker rows of its runs in endpoint order, so
	// two flushes of the same endpoints never wait for each other in a
	// cycle (which Postgres breaks by aborting one, tally and all).
	runs = slices.SortedFunc(slices.Values(runs), func(a, b RunCount) int { return strings.Compare(a.EndpointID, b.EndpointID) })
	for i, r := range runs {
		runIDs[i], runGens[i], runFails[i], runPre[i], runMax[i], runSuf[i], runMixed[i] =
			r.EndpointID, r.Generation, int32(r.Run.Failures), int32(r.Run.Prefix), int32(r.Run.Max), int32(r.Run.Suffix), r.Run.Mixed
	}
	for i, w := range want {
		wantIDs[i], wantWin[i] = w.EndpointID, breaker.BucketSpan(w.Window)
	}
	if len(runs) == 0 && len(want) == 0 {
		if len(rows) == 0 {
			return nil, nil
		}
		// The flush of a fleet whose traffic succeeds, sent by every
		// dispatcher once per hold: one statement, its own transaction.
		if _, err := s.pool.Exec(ctx, addTalliesSQL, customPlan, ids, gens, starts, succ, fail, shards, slots); err != nil {
			return nil, fmt.Errorf("add to breaker buckets: %w", err)
		}
		return nil, nil
	}
	var out []Evidence
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		// A batch runs its statements in the pool's cached-statement mode,
		// whose generic plans were made on the table as it was when the
		// connection first ran them (empty, at a dispatcher's start): they
		// seq-scan breaker_buckets however big it grows. Every statement of
		// this transaction is planned for its parameters instead, as the
		// other batch statements on growing tables are (customPlan).
		batch.Queue(`SET LOCAL plan_cache_mode = force_custom_plan`)
		// A statement with nothing to do is not sent: planned for empty
		// arrays, some read a whole table before finding nothing to join.
		if len(runs) > 0 {
			batch.Queue(`
				SELECT 1 FROM breaker_states WHERE endpoint_id = ANY($1::text[])
				ORDER BY endpoint_id FOR UPDATE`, runIDs)
		}
		if len(rows) > 0 {
			batch.Queue(addTalliesSQL, ids, gens, starts, succ, fail, shards, slots)
		}
		if len(runs) > 0 {
			batch.Queue(`
			UPDATE breaker_states s
			SET consecutive_failures = CASE WHEN r.mixed THEN r.suffix ELSE o.before + r.failures END
			FROM unnest($1::text[], $2::bigint[], $3::int[], $4::int[], $5::int[], $6::int[], $7::bool[])
					AS r(endpoint_id, generation, failures, prefix, max_run, suffix, mixed),
				LATERAL (SELECT consecutive_failures AS before FROM breaker_states
					WHERE endpoint_id = r.endpoint_id FOR UPDATE) o
			WHERE s.endpoint_id = r.endpoint_id AND s.generation = r.generation AND s.state = 'closed'
				AND (r.failures > 0 OR o.before <> 0)
			RETURNING s.endpoint_id, o.before`,
				runIDs, runGens, runFails, runPre, runMax, runSuf, runMixed)
		}
		if len(want) > 0 {
			batch.Queue(`
			SELECT `+breakerColumns+`, clock_timestamp(),
				coalesce(array_agg(b.bucket_start ORDER BY b.bucket_start) FILTER (WHERE b.bucket_start IS NOT NULL), '{}'),
				coalesce(array_agg(b.successes ORDER BY b.bucket_start) FILTER (WHERE b.bucket_start IS NOT NULL), '{}'),
				coalesce(array_agg(b.failures ORDER BY b.bucket_start) FILTER (WHERE b.bucket_start IS NOT NULL), '{}')
			FROM unnest($1::text[], $2::interval[]) AS w(endpoint_id, span)
			JOIN breaker_states s ON s.endpoint_id = w.endpoint_id
			LEFT JOIN `+breakerBucketRows+` b ON b.endpoint_id = s.endpoint_id AND b.generation = s.generation
				AND b.bucket_start > clock_timestamp() - w.span
			GROUP BY s.endpoint_id`,
				wantIDs, wantWin)
		}
		br := tx.SendBatch(ctx, batch)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("plan breaker flush: %w", err)
		}
		if len(runs) > 0 {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("lock breakers: %w", err)
			}
		}
		if len(rows) > 0 {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("add to breaker buckets: %w", err)
			}
		}
		merged := map[string]int{}
		if len(runs) > 0 {
			if err := readMerged(br, merged); err != nil {
				return fmt.Errorf("merge consecutive runs: %w", err)
			}
		}
		if len(want) > 0 {
			evs, err := readEvidence(br)
			if err != nil {
				return fmt.Errorf("read breaker evidence: %w", err)
			}
			out = evs
		}
		// Attach each merged run and the count before it.
		for i := range out {
			before, ok := merged[out[i].EndpointID]
			if !ok {
				continue
			}
			for _, r := range runs {
				if r.EndpointID == out[i].EndpointID && r.Generation == out[i].Breaker.Generation {
					run := r.Run
					out[i].PriorRun = &run
					out[i].Breaker.Consecutive = before
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// slotted is a count with its row among its process's TallySlots.
type slotted struct {
	count OutcomeCount
	slot  int16
}

// slotCounts gives each count its slot, one count per row: two buckets of
// one endpoint, generation and process that share a slot (a flush that
// carries counts two windows apart) keep the younger, as the row would.
func slotCounts(counts []OutcomeCount) ([]slotted, error) {
	type key struct {
		endpoint   string
		generation int64
		shard      string
		slot       int16
	}
	out := make([]slotted, 0, len(counts))
	at := make(map[key]int, len(counts))
	for _, c := range counts {
		slot, err := tallySlot(c)
		if err != nil {
			return nil, err
		}
		k := key{c.EndpointID, c.Generation, c.Shard, slot}
		i, dup := at[k]
		switch {
		case !dup:
			at[k] = len(out)
			out = append(out, slotted{c, slot})
		case c.BucketStart.Equal(out[i].count.BucketStart):
			out[i].count.Successes += c.Successes
			out[i].count.Failures += c.Failures
		case c.BucketStart.After(out[i].count.BucketStart):
			out[i].count = c
		}
	}
	return out, nil
}

// addTalliesSQL adds a process's counts to its own rows (its shard) of
// breakers still closed at the counted generation, $1-$7 in step: a row
// that holds the count's bucket adds to it, one that holds an older
// bucket is written over with the count, and one that already holds a
// younger bucket is left as it is (the late count's bucket left every
// window before its row was reused).
const addTalliesSQL = `
	INSERT INTO breaker_slots AS bb (endpoint_id, generation, shard, slot, bucket_start, successes, failures)
	SELECT i.endpoint_id, i.generation, i.shard, i.slot, i.bucket_start, i.successes, i.failures
	FROM unnest($1::text[], $2::bigint[], $3::timestamptz[], $4::int[], $5::int[], $6::text[], $7::smallint[])
		AS i(endpoint_id, generation, bucket_start, successes, failures, shard, slot)
	-- One probe of the key per counted endpoint: a join let the planner
	-- hash every breaker of the fleet at every flush (LIMIT keeps the
	-- subquery from being made a join again).
	CROSS JOIN LATERAL (SELECT 1 FROM breaker_states s
		WHERE s.endpoint_id = i.endpoint_id AND s.generation = i.generation AND s.state = 'closed' LIMIT 1) s
	ORDER BY 1, 2, 3, 4
	ON CONFLICT (endpoint_id, generation, shard, slot) DO UPDATE SET
		bucket_start = EXCLUDED.bucket_start,
		successes = EXCLUDED.successes + CASE WHEN bb.bucket_start = EXCLUDED.bucket_start THEN bb.successes ELSE 0 END,
		failures = EXCLUDED.failures + CASE WHEN bb.bucket_start = EXCLUDED.bucket_start THEN bb.failures ELSE 0 END
	WHERE bb.bucket_start <= EXCLUDED.bucket_start`

// PruneBuckets deletes buckets of past generations and buckets older than
// keep (rows of breaker_slots: slotKeep), at most limit rows of each
// table, and returns how many went. Rows a flush has locked are skipped
// (whoever locked them deletes or updates them), so a prune never waits
// on a flush in a cycle.
func (s *Store) PruneBuckets(ctx context.Context, keep time.Duration, limit int) (int64, error) {
	var n int64
	for _, table := range []string{"breaker_slots", "breaker_tallies", "breaker_buckets"} {
		age := keep
		if table == "breaker_slots" {
			age = slotKeep(keep)
		}
		tag, err := s.pool.Exec(ctx, `
			DELETE FROM `+table+` WHERE ctid = ANY(ARRAY(
				SELECT b.ctid FROM `+table+` b
				LEFT JOIN breaker_states s ON s.endpoint_id = b.endpoint_id
				WHERE s.endpoint_id IS NULL OR b.generation < s.generation OR b.bucket_start < clock_timestamp() - $1::interval
				LIMIT $2 FOR UPDATE OF b SKIP LOCKED))`, age, limit)
		if err != nil {
			return n, fmt.Errorf("prune %s: %w", table, err)
		}
		n += tag.RowsAffected()
	}
	return n, nil
}

// readMerged reads the consecutive runs' merge: each endpoint's count
// before it.
func readMerged(br pgx.BatchResults, merged map[string]int) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var before int
		if err := rows.Scan(&id, &before); err != nil {
			return err
		}
		merged[id] = before
	}
	return rows.Err()
}

// readEvidence reads the breakers and window buckets a flush asked for.
func readEvidence(br pgx.BatchResults) ([]Evidence, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Evidence
	for rows.Next() {
		var (
			now     time.Time
			bStarts []time.Time
			bSucc   []int32
			bFail   []int32
		)
		id, b, err := scanBreaker(rows, &now, &bStarts, &bSucc, &bFail)
		if err != nil {
			return nil, err
		}
		ev := Evidence{EndpointID: id, Breaker: b, Now: now.UTC()}
		for i := range bStarts {
			ev.Buckets = append(ev.Buckets, breaker.Bucket{Start: bStarts[i].UTC(), Successes: int(bSucc[i]), Failures: int(bFail[i])})
		}
		out = append(out, ev)
	}
	return out, rows.Err()
}
