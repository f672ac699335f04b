package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookd/hookd/internal/breaker"
)

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
			if _, err := p.store.saveBreakerTx(ctx, tx, endpointID, prev, b, dec.Transition, withConfig(meta, c)); err != nil {
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
		_, err = t.pool.store.saveBreakerTx(ctx, tx, t.endpointID, prev, b, res.Transition, withConfig(meta, c))
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

// withConfig is meta with c as its Config.
func withConfig(meta TransitionMeta, c breaker.Config) TransitionMeta {
	meta.Config = &c
	return meta
}
