package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookd/hookd/internal/breaker"
)

// BreakerChannel is the NOTIFY channel that carries every breaker
// transition (a BreakerNotice), so every dispatcher's cached view follows
// within milliseconds. Nothing is notified per delivery.
const BreakerChannel = "hookd_breaker"

// BreakerNotice is the payload of a transition notification.
type BreakerNotice struct {
	EndpointID string
	State      breaker.State
	Generation int64
	OpenUntil  time.Time
}

// String encodes n as "endpoint|state|generation|open_until_unix_micro".
func (n BreakerNotice) String() string {
	var until int64
	if !n.OpenUntil.IsZero() {
		until = n.OpenUntil.UnixMicro()
	}
	return fmt.Sprintf("%s|%s|%d|%d", n.EndpointID, n.State, n.Generation, until)
}

// ParseBreakerNotice decodes a notification payload.
func ParseBreakerNotice(s string) (BreakerNotice, error) {
	parts := strings.Split(s, "|")
	if len(parts) != 4 {
		return BreakerNotice{}, fmt.Errorf("breaker notice %q: want 4 fields", s)
	}
	st, err := breaker.ParseState(parts[1])
	if err != nil {
		return BreakerNotice{}, fmt.Errorf("breaker notice: %w", err)
	}
	gen, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return BreakerNotice{}, fmt.Errorf("breaker notice generation: %w", err)
	}
	until, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil {
		return BreakerNotice{}, fmt.Errorf("breaker notice open_until: %w", err)
	}
	n := BreakerNotice{EndpointID: parts[0], State: st, Generation: gen}
	if until != 0 {
		n.OpenUntil = time.UnixMicro(until).UTC()
	}
	return n, nil
}

const breakerColumns = `s.endpoint_id, s.state, s.generation, s.opened_at, s.open_until,
	s.trial_successes, s.open_streak, s.trips, s.consecutive_failures`

// scanBreaker reads breakerColumns (and any extra destinations) into a
// breaker.Breaker with an empty window.
func scanBreaker(row pgx.Row, extra ...any) (string, breaker.Breaker, error) {
	var (
		id                string
		state             string
		b                 breaker.Breaker
		openedAt, openTil *time.Time
	)
	dest := append([]any{&id, &state, &b.Generation, &openedAt, &openTil, &b.TrialSuccesses, &b.OpenStreak, &b.Trips, &b.Consecutive}, extra...)
	if err := row.Scan(dest...); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return "", breaker.Breaker{}, ErrNotFound
		}
		return "", breaker.Breaker{}, err
	}
	st, err := breaker.ParseState(state)
	if err != nil {
		return "", breaker.Breaker{}, err
	}
	b.State = st
	if openedAt != nil {
		b.OpenedAt = openedAt.UTC()
	}
	if openTil != nil {
		b.OpenUntil = openTil.UTC()
	}
	return id, b, nil
}

// LoadBreakers returns the stored breakers of the given endpoints, or of
// every endpoint when ids is nil. Windows are empty.
func (s *Store) LoadBreakers(ctx context.Context, ids []string) (map[string]breaker.Breaker, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+breakerColumns+` FROM breaker_states s WHERE $1::text[] IS NULL OR s.endpoint_id = ANY($1)`, customPlan, ids)
	if err != nil {
		return nil, fmt.Errorf("load breakers: %w", err)
	}
	defer rows.Close()
	out := map[string]breaker.Breaker{}
	for rows.Next() {
		id, b, err := scanBreaker(rows)
		if err != nil {
			return nil, fmt.Errorf("load breakers: %w", err)
		}
		out[id] = b
	}
	return out, rows.Err()
}

// OutcomeCount is what one process counted for one endpoint, generation and
// bucket since its last flush.
type OutcomeCount struct {
	EndpointID  string
	Generation  int64
	BucketStart time.Time
	Successes   int
	Failures    int
}

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

// FlushOutcomes adds a process's counts to the shared buckets and merges its
// consecutive runs, both only for breakers still closed at the counted
// generation (older outcomes are dropped), deletes the buckets of the
// endpoints in prune that have left their window (so an active endpoint
// keeps about BucketsPerWindow rows), then returns the shared evidence of
// the endpoints in want. One transaction, one network round trip.
func (s *Store) FlushOutcomes(ctx context.Context, counts []OutcomeCount, runs []RunCount, want, prune []EvidenceRequest) ([]Evidence, error) {
	var (
		ids      = make([]string, len(counts))
		gens     = make([]int64, len(counts))
		starts   = make([]time.Time, len(counts))
		succ     = make([]int32, len(counts))
		fail     = make([]int32, len(counts))
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
	)
	for i, p := range prune {
		pruneIDs[i], pruneWin[i] = p.EndpointID, breaker.BucketSpan(p.Window)
	}
	for i, c := range counts {
		ids[i], gens[i], starts[i], succ[i], fail[i] = c.EndpointID, c.Generation, c.BucketStart, int32(c.Successes), int32(c.Failures)
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
	var out []Evidence
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		batch.Queue(`
			SELECT 1 FROM breaker_states WHERE endpoint_id = ANY($1::text[])
			ORDER BY endpoint_id FOR UPDATE`, runIDs)
		batch.Queue(`
			INSERT INTO breaker_buckets AS bb (endpoint_id, generation, bucket_start, successes, failures)
			SELECT i.endpoint_id, i.generation, i.bucket_start, i.successes, i.failures
			FROM unnest($1::text[], $2::bigint[], $3::timestamptz[], $4::int[], $5::int[])
				AS i(endpoint_id, generation, bucket_start, successes, failures)
			JOIN breaker_states s ON s.endpoint_id = i.endpoint_id AND s.generation = i.generation AND s.state = 'closed'
			ORDER BY 1, 2, 3
			ON CONFLICT (endpoint_id, generation, bucket_start) DO UPDATE
				SET successes = bb.successes + EXCLUDED.successes, failures = bb.failures + EXCLUDED.failures`,
			ids, gens, starts, succ, fail)
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
		batch.Queue(`
			SELECT `+breakerColumns+`, clock_timestamp(),
				coalesce(array_agg(b.bucket_start ORDER BY b.bucket_start) FILTER (WHERE b.bucket_start IS NOT NULL), '{}'),
				coalesce(array_agg(b.successes ORDER BY b.bucket_start) FILTER (WHERE b.bucket_start IS NOT NULL), '{}'),
				coalesce(array_agg(b.failures ORDER BY b.bucket_start) FILTER (WHERE b.bucket_start IS NOT NULL), '{}')
			FROM unnest($1::text[], $2::interval[]) AS w(endpoint_id, span)
			JOIN breaker_states s ON s.endpoint_id = w.endpoint_id
			LEFT JOIN breaker_buckets b ON b.endpoint_id = s.endpoint_id AND b.generation = s.generation
				AND b.bucket_start > clock_timestamp() - w.span
			GROUP BY s.endpoint_id`,
			wantIDs, wantWin)
		batch.Queue(`
			DELETE FROM breaker_buckets WHERE ctid = ANY(ARRAY(
				SELECT b.ctid FROM breaker_buckets b
				JOIN unnest($1::text[], $2::interval[]) AS w(endpoint_id, span) ON b.endpoint_id = w.endpoint_id
				WHERE b.bucket_start < clock_timestamp() - w.span
				FOR UPDATE OF b SKIP LOCKED))`,
			pruneIDs, pruneWin)
		br := tx.SendBatch(ctx, batch)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("lock breakers: %w", err)
		}
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("add to breaker buckets: %w", err)
		}
		rows, err := br.Query()
		if err != nil {
			return fmt.Errorf("merge consecutive runs: %w", err)
		}
		merged := map[string]int{}
		for rows.Next() {
			var id string
			var before int
			if err := rows.Scan(&id, &before); err != nil {
				rows.Close()
				return fmt.Errorf("merge consecutive runs: %w", err)
			}
			merged[id] = before
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("merge consecutive runs: %w", err)
		}
		rows, err = br.Query()
		if err != nil {
			return fmt.Errorf("read breaker evidence: %w", err)
		}
		for rows.Next() {
			var (
				now     time.Time
				bStarts []time.Time
				bSucc   []int32
				bFail   []int32
			)
			id, b, err := scanBreaker(rows, &now, &bStarts, &bSucc, &bFail)
			if err != nil {
				rows.Close()
				return fmt.Errorf("read breaker evidence: %w", err)
			}
			ev := Evidence{EndpointID: id, Breaker: b, Now: now.UTC()}
			for i := range bStarts {
				ev.Buckets = append(ev.Buckets, breaker.Bucket{Start: bStarts[i].UTC(), Successes: int(bSucc[i]), Failures: int(bFail[i])})
			}
			out = append(out, ev)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read breaker evidence: %w", err)
		}
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("prune breaker buckets: %w", err)
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

// TransitionMeta says who made a transition and why.
type TransitionMeta struct {
	// Actor is the dispatcher process or operator that made it.
	Actor string
	// Note is a free-text why (an operator's reason).
	Note string
	// Shadow marks a would-be transition of a class in shadow mode.
	Shadow bool
}

// saveBreakerSQL writes a breaker's stored fields versioned on the
// generation it had before, records the transition and notifies, in one
// statement. It returns one row when it won.
const saveBreakerSQL = `
	WITH u AS (
		UPDATE breaker_states SET state = $3, generation = $4, opened_at = $5, open_until = $6,
			trial_successes = $7, open_streak = $8, trips = $9, consecutive_failures = $10, updated_at = now()
		WHERE endpoint_id = $1 AND generation = $2
		RETURNING endpoint_id
	), t AS (
		INSERT INTO breaker_transitions (endpoint_id, from_state, to_state, generation, at, reason, failure_rate,
			observations, failures, consecutive, open_until, actor, note, shadow)
		SELECT endpoint_id, $11, $3, $4, $12, $13, $14, $15, $16, $17, $6, $18, $19, $20 FROM u
		WHERE $11 <> ''
		RETURNING id
	), n AS (
		SELECT pg_notify('` + BreakerChannel + `', $21) FROM u WHERE $11 <> ''
	)
	SELECT u.endpoint_id, (SELECT count(*) FROM t), (SELECT count(*) FROM n) FROM u`

func saveBreakerArgs(id string, prev int64, b breaker.Breaker, t *breaker.Transition, meta TransitionMeta) []any {
	var openedAt, openUntil *time.Time
	if !b.OpenedAt.IsZero() {
		openedAt = &b.OpenedAt
	}
	if !b.OpenUntil.IsZero() {
		openUntil = &b.OpenUntil
	}
	args := []any{id, prev, b.State.String(), b.Generation, openedAt, openUntil, b.TrialSuccesses, b.OpenStreak, b.Trips, b.Consecutive}
	if t == nil {
		return append(args, "", time.Time{}, "", 0.0, 0, 0, 0, meta.Actor, meta.Note, meta.Shadow, "")
	}
	notice := BreakerNotice{EndpointID: id, State: b.State, Generation: b.Generation, OpenUntil: b.OpenUntil}
	return append(args, t.From.String(), t.At, t.Reason, t.FailureRate, t.Observations, t.Failures, t.Consecutive,
		meta.Actor, meta.Note, meta.Shadow, notice.String())
}

// CommitTransition stores b, which made transition t from a breaker stored
// at generation prev, with its history row and notification. It returns
// false, writing nothing, when another process changed the breaker first.
func (s *Store) CommitTransition(ctx context.Context, endpointID string, prev int64, b breaker.Breaker, t breaker.Transition, meta TransitionMeta) (bool, error) {
	return saveBreaker(ctx, s.pool, endpointID, prev, b, &t, meta)
}

type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func saveBreaker(ctx context.Context, q queryRower, id string, prev int64, b breaker.Breaker, t *breaker.Transition, meta TransitionMeta) (bool, error) {
	var got string
	var nt, nn int
	err := q.QueryRow(ctx, saveBreakerSQL, saveBreakerArgs(id, prev, b, t, meta)...).Scan(&got, &nt, &nn)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("save breaker: %w", err)
	}
	return true, nil
}

// PruneBuckets deletes buckets of past generations and buckets older than
// keep, at most limit rows, and returns how many went. Rows a flush has
// locked are skipped (whoever locked them deletes or updates them), so a
// prune never waits on a flush in a cycle.
func (s *Store) PruneBuckets(ctx context.Context, keep time.Duration, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, `
		DELETE FROM breaker_buckets WHERE ctid = ANY(ARRAY(
			SELECT b.ctid FROM breaker_buckets b
			LEFT JOIN breaker_states s ON s.endpoint_id = b.endpoint_id
			WHERE s.endpoint_id IS NULL OR b.generation < s.generation OR b.bucket_start < clock_timestamp() - $1::interval
			LIMIT $2 FOR UPDATE OF b SKIP LOCKED))`, keep, limit)
	if err != nil {
		return 0, fmt.Errorf("prune breaker buckets: %w", err)
	}
	return tag.RowsAffected(), nil
}

// TrialPool serialises half-open trials fleet-wide. A trial holds a
// session-level advisory lock, one per trial slot (half_open_concurrency
// slots per endpoint), on a dedicated connection for as long as its request
// runs; no transaction stays open meanwhile. If the process dies its
// connection closes and Postgres releases the lock at once, so another
// worker can probe; idle_session_timeout on these connections bounds a host
// that vanished without closing its sockets.
//
// A worker never waits for a trial connection: a slot token (one per pool
// connection) is taken without blocking, so a full pool answers "busy" at
// once, and every step of a trial (taking the lock, reading and writing the
// breaker, recording the outcome, unlocking) has its own deadline, so a
// stalled database cannot hold a worker, a lock or a connection for good.
type TrialPool struct {
	pool   *pgxpool.Pool
	store  *Store
	tokens chan struct{}
	// step bounds each trial step (default trialStepTimeout).
	step time.Duration
}

// trialStepTimeout bounds each statement group of a trial.
const trialStepTimeout = 5 * time.Second

// OpenTrialPool opens the trial pool: size connections at most, each ended
// by the server after idleTimeout without a statement; appName names the pool's sessions in pg_stat_activity.
func (s *Store) OpenTrialPool(ctx context.Context, url string, size int32, idleTimeout time.Duration, appName string) (*TrialPool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", redactURLError(err))
	}
	pc.MaxConns = size
	pc.MinConns = 0
	pc.MaxConnIdleTime = idleTimeout / 2
	pc.ConnConfig.RuntimeParams["application_name"] = appName
	pc.ConnConfig.RuntimeParams["idle_session_timeout"] = strconv.FormatInt(idleTimeout.Milliseconds(), 10)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open trial pool: %w", err)
	}
	return &TrialPool{pool: pool, store: s, tokens: make(chan struct{}, size), step: trialStepTimeout}, nil
}

// Close closes the pool.
func (p *TrialPool) Close() { p.pool.Close() }

// Trial is an admitted half-open probe holding its slot's lock.
type Trial struct {
	pool       *TrialPool
	conn       *pgxpool.Conn
	endpointID string
	lockKey    int64
	ticket     breaker.Ticket
}

// trialKeySQL is the advisory lock key of trial slot slot of endpoint id
// (both SQL expressions): the one definition every statement uses.
func trialKeySQL(id, slot string) string {
	return `hashtextextended('hookd-trial/' || ` + id + ` || '/' || ` + slot + `, 0)`
}

// trialsHeldSQL counts the granted trial slot locks of endpoint id among
// its first slots slots (SQL expressions), this session's own included.
// pg_locks splits a bigint advisory key into classid (high 32 bits) and
// objid (low 32 bits).
func trialsHeldSQL(id, slots string) string {
	k := trialKeySQL(id, "slot")
	return `(SELECT count(*) FROM pg_locks l, generate_series(0, ` + slots + ` - 1) AS slot
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
			AND l.classid::bigint = (` + k + ` >> 32) & 4294967295
			AND l.objid::bigint = ` + k + ` & 4294967295)`
}

// trialLockSQL takes the first free slot lock of an endpoint, if any.
var trialLockSQL = `
	SELECT k FROM (
		SELECT ` + trialKeySQL("$1", "slot") + ` AS k
		FROM generate_series(0, $2 - 1) AS slot
	) keys
	WHERE pg_try_advisory_lock(k)
	LIMIT 1`

// trialBreakerSQL locks an endpoint's breaker row ($1) and reads it with the
// database's time and the trial slot locks held among its $2 slots.
var trialBreakerSQL = `SELECT ` + breakerColumns + `, clock_timestamp(), ` + trialsHeldSQL("s.endpoint_id", "$2") + `
	FROM breaker_states s WHERE s.endpoint_id = $1 FOR UPDATE OF s`

// Acquire tries to admit a trial to endpointID's breaker under config c at
// the database's time. It returns the Trial (nil unless the decision is a
// Trial admission), the decision, and the breaker as stored afterwards. When
// every slot is taken the decision is Rejected with reason half_open_busy.
//
// When every connection of this process's pool is held by a trial in flight
// it answers Rejected with reason half_open_busy at once, without waiting.
func (p *TrialPool) Acquire(ctx context.Context, endpointID string, c breaker.Config, meta TransitionMeta) (*Trial, breaker.Decision, breaker.Breaker, error) {
	busy := breaker.Decision{Admission: breaker.Rejected, Reason: breaker.ReasonHalfOpenBusy}
	select {
	case p.tokens <- struct{}{}:
	default:
		return nil, busy, breaker.Breaker{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.step)
	defer cancel()
	// With a token the pool has a connection to spare: this waits at most
	// for a new connection to be dialled, within the step's deadline.
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		<-p.tokens
		return nil, breaker.Decision{}, breaker.Breaker{}, fmt.Errorf("acquire trial connection: %w", err)
	}
	t := &Trial{pool: p, conn: conn, endpointID: endpointID}
	err = conn.QueryRow(ctx, trialLockSQL, endpointID, c.HalfOpenConcurrency).Scan(&t.lockKey)
	if errors.Is(err, pgx.ErrNoRows) {
		t.conn, t.lockKey = nil, 0
		conn.Release()
		<-p.tokens
		return nil, busy, breaker.Breaker{}, nil
	}
	if err != nil {
		// The lock may have been taken with its answer lost: close the
		// connection, which releases it on the server.
		cctx, cancelClose := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = conn.Conn().Close(cctx)
		cancelClose()
		conn.Release()
		<-p.tokens
		return nil, breaker.Decision{}, breaker.Breaker{}, fmt.Errorf("take trial lock: %w", err)
	}
	var (
		dec   breaker.Decision
		after breaker.Breaker
	)
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var now time.Time
		var held int
		_, b, err := scanBreaker(tx.QueryRow(ctx, trialBreakerSQL, endpointID, c.HalfOpenConcurrency), &now, &held)
		if err != nil {
			return fmt.Errorf("lock breaker: %w", err)
		}
		prev := b.Generation
		// The slot locks are the fleet's count of trials in flight; ours,
		// just taken, is not yet one of them.
		b.TrialsInFlight = max(held-1, 0)
		dec = b.Allow(c, now.UTC())
		after = b
		if dec.Transition != nil {
			if _, err := saveBreaker(ctx, tx, endpointID, prev, b, dec.Transition, meta); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || dec.Admission != breaker.Trial {
		t.release(ctx)
		return nil, dec, after, err
	}
	t.ticket = dec.Ticket
	return t, dec, after, nil
}

// Finish records the trial's outcome under config c at the database's time,
// releases its slot and returns the result and the breaker as stored.
func (t *Trial) Finish(ctx context.Context, c breaker.Config, o breaker.Outcome, rnd func() float64, meta TransitionMeta) (breaker.Result, breaker.Breaker, error) {
	defer t.release(ctx)
	ctx, cancel := context.WithTimeout(ctx, t.pool.step)
	defer cancel()
	var (
		res   breaker.Result
		after breaker.Breaker
	)
	err := pgx.BeginFunc(ctx, t.conn, func(tx pgx.Tx) error {
		var now time.Time
		var held int
		_, b, err := scanBreaker(tx.QueryRow(ctx, trialBreakerSQL, t.endpointID, c.HalfOpenConcurrency), &now, &held)
		if err != nil {
			return fmt.Errorf("lock breaker: %w", err)
		}
		prev := b.Generation
		// The slot locks held, ours included, are the trials in flight.
		b.TrialsInFlight = max(held, 1)
		res = b.Record(c, now.UTC(), t.ticket, o, rnd)
		after = b
		if !res.Applied {
			return nil
		}
		_, err = saveBreaker(ctx, tx, t.endpointID, prev, b, res.Transition, meta)
		return err
	})
	return res, after, err
}

// Ticket returns the trial's ticket.
func (t *Trial) Ticket() breaker.Ticket { return t.ticket }

// release unlocks the slot and returns the connection. A connection that
// broke is closed, which releases the lock on the server.
func (t *Trial) release(ctx context.Context) {
	if t.conn == nil {
		return
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.pool.step)
	defer cancel()
	if _, err := t.conn.Exec(uctx, `SELECT pg_advisory_unlock($1)`, t.lockKey); err != nil {
		_ = t.conn.Conn().Close(uctx)
	}
	t.conn.Release()
	t.conn = nil
	<-t.pool.tokens
}

// BreakerStatus is a breaker as the API shows it: its stored fields and
// the current window's counts at the database's time.
type BreakerStatus struct {
	EndpointID   string
	Breaker      breaker.Breaker
	Observations int
	Failures     int
	Now          time.Time
	UpdatedAt    time.Time
}

// GetBreakerStatus returns an endpoint's breaker with its window counts
// over the last window (as breaker.Window counts them: BucketsPerWindow
// aligned buckets ending with the current one).
func (s *Store) GetBreakerStatus(ctx context.Context, endpointID string, c breaker.Config) (BreakerStatus, error) {
	var (
		st      BreakerStatus
		starts  []time.Time
		succ    []int32
		fail    []int32
		updated time.Time
	)
	id, b, err := scanBreaker(s.pool.QueryRow(ctx, `
		SELECT `+breakerColumns+`, clock_timestamp(), s.updated_at,
			coalesce(array_agg(b.bucket_start ORDER BY b.bucket_start) FILTER (WHERE b.bucket_start IS NOT NULL), '{}'),
			coalesce(array_agg(b.successes ORDER BY b.bucket_start) FILTER (WHERE b.bucket_start IS NOT NULL), '{}'),
			coalesce(array_agg(b.failures ORDER BY b.bucket_start) FILTER (WHERE b.bucket_start IS NOT NULL), '{}')
		FROM breaker_states s
		JOIN endpoints e ON e.id = s.endpoint_id AND e.deleted_at IS NULL
		LEFT JOIN breaker_buckets b ON b.endpoint_id = s.endpoint_id AND b.generation = s.generation
			AND b.bucket_start > clock_timestamp() - $2::interval
		WHERE s.endpoint_id = $1
		GROUP BY s.endpoint_id`, endpointID, breaker.BucketSpan(c.Window)), &st.Now, &updated, &starts, &succ, &fail)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return BreakerStatus{}, err
		}
		return BreakerStatus{}, fmt.Errorf("load breaker: %w", err)
	}
	b.Window = breaker.NewWindow(c)
	for i := range starts {
		b.Window.Add(starts[i], int(succ[i]), int(fail[i]))
	}
	st.EndpointID, st.Breaker, st.UpdatedAt, st.Now = id, b, updated, st.Now.UTC()
	st.Observations, st.Failures = b.Window.Counts(st.Now)
	return st, nil
}

// Operator actions on a breaker.
const (
	OperatorReset   = "reset"
	OperatorIsolate = "isolate"
)

// OperateBreaker resets (close now, fresh window) or isolates (held open
// until a reset) an endpoint's breaker at the database's time, recording
// who and why with the transition.
func (s *Store) OperateBreaker(ctx context.Context, endpointID, action string, c breaker.Config, meta TransitionMeta) (breaker.Transition, error) {
	var t breaker.Transition
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var now time.Time
		_, b, err := scanBreaker(tx.QueryRow(ctx, `
			SELECT `+breakerColumns+`, clock_timestamp() FROM breaker_states s
			JOIN endpoints e ON e.id = s.endpoint_id AND e.deleted_at IS NULL
			WHERE s.endpoint_id = $1 FOR UPDATE OF s`, endpointID), &now)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				return err
			}
			return fmt.Errorf("lock breaker: %w", err)
		}
		prev := b.Generation
		switch action {
		case OperatorReset:
			t = b.Reset(c, now.UTC())
		case OperatorIsolate:
			t = b.Isolate(c, now.UTC())
		default:
			return fmt.Errorf("breaker action %q: want reset or isolate", action)
		}
		_, err = saveBreaker(ctx, tx, endpointID, prev, b, &t, meta)
		return err
	})
	return t, err
}

// TransitionRecord is one row of the transition history.
type TransitionRecord struct {
	ID         int64
	EndpointID string
	Transition breaker.Transition
	Actor      string
	Note       string
	Shadow     bool
}

// ListTransitions returns an endpoint's latest transitions, newest first.
func (s *Store) ListTransitions(ctx context.Context, endpointID string, since *time.Time, limit int) ([]TransitionRecord, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, endpoint_id, from_state, to_state, generation, at, reason, failure_rate, observations, failures,
			consecutive, open_until, actor, note, shadow
		FROM breaker_transitions
		WHERE endpoint_id = $1 AND ($2::timestamptz IS NULL OR at >= $2)
		ORDER BY id DESC LIMIT $3`, endpointID, since, limit)
	if err != nil {
		return nil, fmt.Errorf("list transitions: %w", err)
	}
	defer rows.Close()
	out := []TransitionRecord{}
	for rows.Next() {
		var (
			r         TransitionRecord
			from, to  string
			openUntil *time.Time
		)
		if err := rows.Scan(&r.ID, &r.EndpointID, &from, &to, &r.Transition.Generation, &r.Transition.At, &r.Transition.Reason,
			&r.Transition.FailureRate, &r.Transition.Observations, &r.Transition.Failures, &r.Transition.Consecutive,
			&openUntil, &r.Actor, &r.Note, &r.Shadow); err != nil {
			return nil, fmt.Errorf("list transitions: %w", err)
		}
		r.Transition.From, _ = breaker.ParseState(from)
		r.Transition.To, _ = breaker.ParseState(to)
		if openUntil != nil {
			r.Transition.OpenUntil = openUntil.UTC()
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// EpisodeStart returns when the endpoint's breaker last left the closed
// state (to open or isolated): the start of the episode a close ends,
// re-opens after failed trials included. Shadow picks the would-be history
// of a class in shadow mode or the enforced one. ErrNotFound when the
// breaker never left closed.
func (s *Store) EpisodeStart(ctx context.Context, endpointID string, shadow bool) (time.Time, error) {
	var at time.Time
	err := s.pool.QueryRow(ctx, `
		SELECT at FROM breaker_transitions
		WHERE endpoint_id = $1 AND from_state = 'closed' AND to_state <> 'closed' AND shadow = $2
		ORDER BY id DESC LIMIT 1`, endpointID, shadow).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, ErrNotFound
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("breaker episode start: %w", err)
	}
	return at, nil
}

// BreakerSummary is what the breaker list shows of one endpoint.
type BreakerSummary struct {
	Status        BreakerStatus
	Endpoint      Endpoint
	TrialInFlight bool
	TripsLast24h  int
}

// trialInFlightSQL reports whether any trial slot lock of the endpoint $1
// with $2 slots is held.
var trialInFlightSQL = trialsHeldSQL("$1", "$2") + ` > 0`

// BreakerDetails returns an endpoint's breaker status with whether a trial
// is in flight and its opens in the last 24 hours.
func (s *Store) BreakerDetails(ctx context.Context, endpointID string, c breaker.Config) (BreakerSummary, error) {
	st, err := s.GetBreakerStatus(ctx, endpointID, c)
	if err != nil {
		return BreakerSummary{}, err
	}
	out := BreakerSummary{Status: st}
	err = s.pool.QueryRow(ctx, `SELECT `+trialInFlightSQL+`,
		(SELECT count(*) FROM breaker_transitions WHERE endpoint_id = $1 AND to_state = 'open' AND NOT shadow AND at > now() - interval '24 hours')`,
		endpointID, c.HalfOpenConcurrency).Scan(&out.TrialInFlight, &out.TripsLast24h)
	if err != nil {
		return BreakerSummary{}, fmt.Errorf("load breaker details: %w", err)
	}
	return out, nil
}

// BreakerFilter narrows the breaker list.
type BreakerFilter struct {
	// State is closed, open, half_open or isolated (effective state: an
	// open breaker past its open_until counts as half_open), or empty.
	State    string
	TenantID string
	Page     Page
}

// ListBreakers returns a page of live endpoints in id order with their
// breakers. configFor gives each endpoint's breaker config (its class).
func (s *Store) ListBreakers(ctx context.Context, f BreakerFilter, configFor func(Endpoint) breaker.Config) ([]BreakerSummary, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT `+endpointColumnsQualified+`, `+breakerColumns+`, clock_timestamp(), s.updated_at
		FROM endpoints e JOIN breaker_states s ON s.endpoint_id = e.id
		WHERE e.deleted_at IS NULL AND ($1 = '' OR e.tenant_id = $1) AND e.id > $2
			AND CASE $3
				WHEN '' THEN true
				WHEN 'open' THEN s.state = 'open' AND s.open_until > clock_timestamp()
				WHEN 'half_open' THEN s.state = 'half_open' OR (s.state = 'open' AND s.open_until <= clock_timestamp())
				ELSE s.state = $3 END
		ORDER BY e.id LIMIT $4`, f.TenantID, f.Page.After, f.State, f.Page.Limit)
	if err != nil {
		return nil, fmt.Errorf("list breakers: %w", err)
	}
	var out []BreakerSummary
	for rows.Next() {
		var (
			sum     BreakerSummary
			e       Endpoint
			bID     string
			bstate  string
			b       breaker.Breaker
			opened  *time.Time
			until   *time.Time
			now     time.Time
			updated time.Time
		)
		dest := append(endpointDest(&e), &bID, &bstate, &b.Generation, &opened, &until, &b.TrialSuccesses, &b.OpenStreak, &b.Trips, &b.Consecutive, &now, &updated)
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list breakers: %w", err)
		}
		b.State, _ = breaker.ParseState(bstate)
		if opened != nil {
			b.OpenedAt = opened.UTC()
		}
		if until != nil {
			b.OpenUntil = until.UTC()
		}
		sum.Endpoint = e
		sum.Status = BreakerStatus{EndpointID: e.ID, Breaker: b, Now: now.UTC(), UpdatedAt: updated}
		out = append(out, sum)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list breakers: %w", err)
	}
	if len(out) == 0 {
		return out, nil
	}
	ids := make([]string, len(out))
	slots := make([]int32, len(out))
	cfgs := make([]breaker.Config, len(out))
	var longest time.Duration
	for i, sum := range out {
		ids[i] = sum.Endpoint.ID
		cfgs[i] = configFor(sum.Endpoint)
		slots[i] = int32(max(cfgs[i].HalfOpenConcurrency, 1))
		longest = max(longest, cfgs[i].Window)
		out[i].Status.Breaker.Window = breaker.NewWindow(cfgs[i])
	}
	index := make(map[string]int, len(ids))
	for i, id := range ids {
		index[id] = i
	}
	brows, err := s.pool.Query(ctx, `
		SELECT b.endpoint_id, b.bucket_start, b.successes, b.failures
		FROM breaker_buckets b JOIN breaker_states s ON s.endpoint_id = b.endpoint_id AND s.generation = b.generation
		WHERE b.endpoint_id = ANY($1) AND b.bucket_start > clock_timestamp() - $2::interval`, customPlan, ids, breaker.BucketSpan(longest))
	if err != nil {
		return nil, fmt.Errorf("list breaker windows: %w", err)
	}
	for brows.Next() {
		var id string
		var start time.Time
		var su, fa int
		if err := brows.Scan(&id, &start, &su, &fa); err != nil {
			brows.Close()
			return nil, fmt.Errorf("list breaker windows: %w", err)
		}
		out[index[id]].Status.Breaker.Window.Add(start, su, fa)
	}
	brows.Close()
	if err := brows.Err(); err != nil {
		return nil, fmt.Errorf("list breaker windows: %w", err)
	}
	xrows, err := s.pool.Query(ctx, `
		SELECT i.id,
			(SELECT count(*) FROM breaker_transitions t WHERE t.endpoint_id = i.id AND t.to_state = 'open' AND NOT t.shadow AND t.at > now() - interval '24 hours'),
			`+trialsHeldSQL("i.id", "i.slots")+` > 0
		FROM unnest($1::text[], $2::int[]) AS i(id, slots)`, ids, slots)
	if err != nil {
		return nil, fmt.Errorf("list breaker activity: %w", err)
	}
	defer xrows.Close()
	for xrows.Next() {
		var id string
		var trips int
		var trial bool
		if err := xrows.Scan(&id, &trips, &trial); err != nil {
			return nil, fmt.Errorf("list breaker activity: %w", err)
		}
		out[index[id]].TripsLast24h, out[index[id]].TrialInFlight = trips, trial
	}
	if err := xrows.Err(); err != nil {
		return nil, fmt.Errorf("list breaker activity: %w", err)
	}
	for i := range out {
		st := &out[i].Status
		st.Observations, st.Failures = st.Breaker.Window.Counts(st.Now)
	}
	return out, nil
}
