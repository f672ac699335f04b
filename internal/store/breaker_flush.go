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
	Successes   int
	Failures    int
	// Shard names the process that counted (its fleet ID): each process
	// adds to rows of its own (breaker_tallies), never waiting for
	// another's flush.
	Shard string
}

// breakerBucketRows are every process's bucket rows, of both tables
// (migration 0044): readers add up the rows of a bucket as
// they add up buckets (breaker.Window.Add). Conditions on the columns
// reach each table's primary key through the UNION ALL.
const breakerBucketRows = `(SELECT endpoint_id, generation, bucket_start, successes, failures FROM breaker_tallies
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
	// Shard, in a prune request, limits the prune to one process's
	// tallies (its OutcomeCount.Shard): each process deletes the old rows
	// it wrote, once, rather than every process every row of the
	// endpoint. Empty prunes every process's.
	Shard string
	// Generation, in a prune request, is the generation whose old
	// buckets go (the breaker's current one); the periodic prune takes
	// the others'.
	Generation int64
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

// FlushOutcomes adds a process's counts to the shared buckets and merges its
// consecutive runs, both only for breakers still closed at the counted
// generation (older outcomes are dropped), deletes the buckets of the
// endpoints in prune that have left their window (so an active endpoint
// keeps about BucketsPerWindow rows), then returns the shared evidence of
// the endpoints in want. One transaction, one network round trip; a flush
// that reads nothing back (no runs, nothing in want) is one statement.
func (s *Store) FlushOutcomes(ctx context.Context, counts []OutcomeCount, runs []RunCount, want, prune []EvidenceRequest) ([]Evidence, error) {
	var (
		ids      = make([]string, len(counts))
		gens     = make([]int64, len(counts))
		starts   = make([]time.Time, len(counts))
		succ     = make([]int32, len(counts))
		fail     = make([]int32, len(counts))
		shards   = make([]string, len(counts))
		runIDs   = make([]string, len(runs))
		runGens  = make([]int64, len(runs))
		runFails = make([]int32, len(runs))
		runPre   = make([]int32, len(runs))
		runMax   = make([]int32, len(runs))
		runSuf   = make([]int32, len(runs))
		runMixed = make([]bool, len(runs))
		wantIDs  = make([]string, len(want))
		wantWin  = make([]time.Duration, len(want))
		pruneIDs = make([]string, len(prune))
		pruneWin = make([]time.Duration, len(prune))
		pruneOf  = make([]string, len(prune))
		pruneGen = make([]int64, len(prune))
	)
	for i, p := range prune {
		pruneIDs[i], pruneWin[i], pruneOf[i], pruneGen[i] = p.EndpointID, breaker.BucketSpan(p.Window), p.Shard, p.Generation
	}
	for i, c := range counts {
		ids[i], gens[i], starts[i], succ[i], fail[i], shards[i] = c.EndpointID, c.Generation, c.BucketStart, int32(c.Successes), int32(c.Failures), c.Shard
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
		return nil, s.addAndPruneTallies(ctx, counts, prune, ids, gens, starts, succ, fail, shards, pruneIDs, pruneWin, pruneOf, pruneGen)
	}
	var out []Evidence
	err := s.inTx(ctx, func(tx pgx.Tx) error {
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
		if len(counts) > 0 {
			batch.Queue(addTalliesSQL(1),
				ids, gens, starts, succ, fail, shards)
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
		if len(prune) > 0 {
			batch.Queue(pruneTalliesSQL(1),
				pruneIDs, pruneWin, pruneOf, pruneGen)
			// The previous version's table (breaker_buckets, written only
			// during a rolling upgrade) is left to the periodic prune
			// (PruneBuckets): its rows past a window are never read, and
			// deleting them here was one more statement in every flush.
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
		if len(counts) > 0 {
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
		if len(prune) > 0 {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("prune breaker buckets: %w", err)
			}
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

// addAndPruneTallies is a flush that adds counts and prunes old buckets and
// reads nothing back: one statement, its own transaction (no BEGIN,
// COMMIT or plan setting). It is the flush of a fleet whose traffic
// succeeds, and every dispatcher sends one per hold, so its statements
// are a share of every delivery's.
func (s *Store) addAndPruneTallies(ctx context.Context, counts []OutcomeCount, prune []EvidenceRequest, args ...any) error {
	var sql string
	switch {
	case len(counts) > 0 && len(prune) > 0:
		// Data-modifying CTEs run to completion whether read or not; the
		// two reach different rows (this bucket's, buckets past a window).
		sql = "WITH added AS (" + addTalliesSQL(1) + "), pruned AS (" + pruneTalliesSQL(7) + ") SELECT"
	case len(counts) > 0:
		sql, args = addTalliesSQL(1), args[:6]
	case len(prune) > 0:
		sql, args = pruneTalliesSQL(1), args[6:]
	default:
		return nil
	}
	if _, err := s.pool.Exec(ctx, sql, append([]any{customPlan}, args...)...); err != nil {
		return fmt.Errorf("add to breaker buckets: %w", err)
	}
	return nil
}

// addTalliesSQL adds a process's counts to its own rows (its shard) of
// breakers still closed at the counted generation; its six arrays are
// parameters $first on.
func addTalliesSQL(first int) string {
	return fmt.Sprintf(`
		INSERT INTO breaker_tallies AS bb (endpoint_id, generation, bucket_start, shard, successes, failures)
		SELECT i.endpoint_id, i.generation, i.bucket_start, i.shard, i.successes, i.failures
		FROM unnest($%d::text[], $%d::bigint[], $%d::timestamptz[], $%d::int[], $%d::int[], $%d::text[])
			AS i(endpoint_id, generation, bucket_start, successes, failures, shard)
		-- One probe of the key per counted endpoint: a join let the
		-- planner hash every breaker of the fleet at every flush
		-- (LIMIT keeps the subquery from being made a join again).
		CROSS JOIN LATERAL (SELECT 1 FROM breaker_states s
			WHERE s.endpoint_id = i.endpoint_id AND s.generation = i.generation AND s.state = 'closed' LIMIT 1) s
		ORDER BY 1, 2, 3, 4
		ON CONFLICT (endpoint_id, generation, bucket_start, shard) DO UPDATE
			SET successes = bb.successes + EXCLUDED.successes, failures = bb.failures + EXCLUDED.failures`,
		first, first+1, first+2, first+3, first+4, first+5)
}

// pruneTalliesSQL deletes the buckets that left their endpoint's window
// (of one shard, or every shard's for an empty one); its four arrays are
// parameters $first on.
func pruneTalliesSQL(first int) string {
	return fmt.Sprintf(`
		DELETE FROM breaker_tallies WHERE ctid = ANY(ARRAY(
			SELECT b.ctid FROM unnest($%d::text[], $%d::interval[], $%d::text[], $%d::bigint[]) AS w(endpoint_id, span, shard, generation)
			-- Per endpoint, the key's range of its old buckets alone:
			-- a join let the planner read every process's rows of
			-- every endpoint (the table grows with the fleet) at
			-- every flush. Older generations go with the periodic
			-- prune (PruneBuckets).
			CROSS JOIN LATERAL (SELECT t.ctid FROM breaker_tallies t
				WHERE t.endpoint_id = w.endpoint_id AND t.generation = w.generation
					AND t.bucket_start < clock_timestamp() - w.span AND (w.shard = '' OR t.shard = w.shard)
				FOR UPDATE OF t SKIP LOCKED) b))`,
		first, first+1, first+2, first+3)
}

// PruneBuckets deletes buckets of past generations and buckets older than
// keep, at most limit rows, and returns how many went. Rows a flush has
// locked are skipped (whoever locked them deletes or updates them), so a
// prune never waits on a flush in a cycle.
func (s *Store) PruneBuckets(ctx context.Context, keep time.Duration, limit int) (int64, error) {
	var n int64
	for _, table := range []string{"breaker_tallies", "breaker_buckets"} {
		tag, err := s.pool.Exec(ctx, `
			DELETE FROM `+table+` WHERE ctid = ANY(ARRAY(
				SELECT b.ctid FROM `+table+` b
				LEFT JOIN breaker_states s ON s.endpoint_id = b.endpoint_id
				WHERE s.endpoint_id IS NULL OR b.generation < s.generation OR b.bucket_start < clock_timestamp() - $1::interval
				LIMIT $2 FOR UPDATE OF b SKIP LOCKED))`, keep, limit)
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
