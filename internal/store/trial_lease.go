package store

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/internal/breaker"
)

// TrialLeases serialises half-open trials fleet-wide with leases in
// trial_leases: a trial holds one of its endpoint's half_open_concurrency
// slots as a row with a random token and an expiry on the database's clock,
// taken in the same short transaction that admits it on the breaker row.
// No session state is involved, so the trials run on the store's own pool
// (through a transaction-mode pooler too), and no connection's end frees a
// slot: a trial's slot is free only once its Finish deletes the row, or at
// its expiry if the trial never finishes (a dispatcher that died).
//
// Every step (admitting, recording) is one transaction with its own
// deadline, so a stalled database holds neither a worker nor a slot past
// the lease.
type TrialLeases struct {
	store *Store
	// step bounds each trial transaction (default trialStepTimeout).
	step time.Duration
}

// trialStepTimeout bounds each transaction of a trial.
const trialStepTimeout = 5 * time.Second

// TrialStepTimeout bounds each of a trial's transactions: a caller sizing
// a lease keeps this much of it to record the outcome.
const TrialStepTimeout = trialStepTimeout

// ErrTrialLeaseLost is Finish's answer for a trial whose lease expired and
// was taken over by another trial: its outcome is not recorded.
var ErrTrialLeaseLost = errors.New("trial lease lost")

// TrialLeases returns the store's trial slots.
func (s *Store) TrialLeases() *TrialLeases {
	return &TrialLeases{store: s, step: trialStepTimeout}
}

// Trial is an admitted half-open probe holding a lease on its slot.
type Trial struct {
	leases     *TrialLeases
	endpointID string
	slot       int
	token      string
	// ExpiresAt is when the lease ends, on the database's clock.
	ExpiresAt time.Time
	ticket    breaker.Ticket
}

// trialsInFlightSQL counts the unexpired trial leases of endpoint id (an SQL
// expression): the fleet's trials in flight. Every slot counts, not only
// the first half_open_concurrency: a trial admitted before the class's
// concurrency was lowered is still in flight.
func trialsInFlightSQL(id string) string {
	return `(SELECT count(*) FROM trial_leases l WHERE l.endpoint_id = ` + id + ` AND l.expires_at > clock_timestamp())`
}

// trialBreakerSQL locks an endpoint's breaker row ($1) and reads it with the
// database's time and its trials in flight. Every trial step takes the
// breaker row first, so its lease rows change under that lock only.
var trialBreakerSQL = `SELECT ` + breakerColumns + `, clock_timestamp(), ` + trialsInFlightSQL("s.endpoint_id") + `
	FROM breaker_states s WHERE s.endpoint_id = $1 FOR UPDATE OF s`

// trialTakeSQL takes the first free or expired slot of endpoint $1 among
// its first $2 slots for token $3 and holder $4, from $5 (the database's
// time read under the breaker row's lock) until $5 + $6.
const trialTakeSQL = `
	INSERT INTO trial_leases AS l (endpoint_id, slot, token, holder, acquired_at, expires_at)
	SELECT $1::text, g.slot, $3::text, $4::text, $5::timestamptz, $5::timestamptz + $6::interval
	FROM generate_series(0, $2::int - 1) AS g(slot)
	WHERE NOT EXISTS (SELECT 1 FROM trial_leases x WHERE x.endpoint_id = $1::text AND x.slot = g.slot AND x.expires_at > $5::timestamptz)
	ORDER BY g.slot
	LIMIT 1
	ON CONFLICT (endpoint_id, slot) DO UPDATE
		SET token = excluded.token, holder = excluded.holder, acquired_at = excluded.acquired_at, expires_at = excluded.expires_at
		WHERE l.expires_at <= excluded.acquired_at
	RETURNING slot, expires_at`

// Acquire tries to admit a trial to endpointID's breaker under config c at
// the database's time, with a lease of the given length (the attempt's
// timeout and a margin). It returns the Trial (nil unless the decision is
// a Trial admission), the decision, and the breaker as stored afterwards.
// When every slot is taken the decision is Rejected with reason
// half_open_busy.
func (l *TrialLeases) Acquire(ctx context.Context, endpointID string, c breaker.Config, lease time.Duration, meta TransitionMeta) (*Trial, breaker.Decision, breaker.Breaker, error) {
	if lease <= 0 {
		return nil, breaker.Decision{}, breaker.Breaker{}, fmt.Errorf("acquire trial: lease %s is not positive", lease)
	}
	ctx, cancel := context.WithTimeout(ctx, l.step)
	defer cancel()
	var (
		dec   breaker.Decision
		after breaker.Breaker
		tr    *Trial
	)
	err := l.inTx(ctx, func(tx pgx.Tx) error {
		tr, dec, after = nil, breaker.Decision{}, breaker.Breaker{}
		var now time.Time
		var held int
		_, b, err := scanBreaker(tx.QueryRow(ctx, trialBreakerSQL, endpointID), &now, &held)
		if err != nil {
			return fmt.Errorf("lock breaker: %w", err)
		}
		prev := b.Generation
		b.TrialsInFlight = held
		dec = b.Allow(c, now.UTC())
		after = b
		if dec.Admission == breaker.Trial {
			t := &Trial{leases: l, endpointID: endpointID, token: rand.Text(), ticket: dec.Ticket}
			err := tx.QueryRow(ctx, trialTakeSQL, endpointID, c.HalfOpenConcurrency, t.token, meta.Actor, now, lease).Scan(&t.slot, &t.ExpiresAt)
			if errors.Is(err, pgx.ErrNoRows) {
				// Fewer leases in flight than slots means a free one
				// among the first; this only guards the invariant.
				dec = breaker.Decision{Admission: breaker.Rejected, Reason: breaker.ReasonHalfOpenBusy, Transition: dec.Transition}
			} else if err != nil {
				return fmt.Errorf("take trial slot: %w", err)
			} else {
				t.ExpiresAt = t.ExpiresAt.UTC()
				tr = t
			}
		}
		if dec.Transition != nil {
			if _, err := l.store.saveBreakerTx(ctx, tx, endpointID, prev, b, dec.Transition, withConfig(meta, c)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, breaker.Decision{}, breaker.Breaker{}, fmt.Errorf("acquire trial: %w", err)
	}
	return tr, dec, after, nil
}

// Finish records the trial's outcome under config c at the database's time,
// frees its slot and returns the result and the breaker as stored. The
// outcome counts only while the lease row still carries the trial's token
// (an expired lease nobody took over still does): a trial whose lease was
// taken over by another trial records nothing and gets ErrTrialLeaseLost,
// so a late outcome can neither close nor re-open the breaker the other
// trial now probes. On any other error the slot stays taken until the
// lease expires.
func (t *Trial) Finish(ctx context.Context, c breaker.Config, o breaker.Outcome, rnd func() float64, meta TransitionMeta) (breaker.Result, breaker.Breaker, error) {
	ctx, cancel := context.WithTimeout(ctx, t.leases.step)
	defer cancel()
	var (
		res   breaker.Result
		after breaker.Breaker
	)
	err := t.leases.inTx(ctx, func(tx pgx.Tx) error {
		res, after = breaker.Result{}, breaker.Breaker{}
		var now time.Time
		var held int
		_, b, err := scanBreaker(tx.QueryRow(ctx, trialBreakerSQL, t.endpointID), &now, &held)
		if err != nil {
			return fmt.Errorf("lock breaker: %w", err)
		}
		var alive bool
		err = tx.QueryRow(ctx, `DELETE FROM trial_leases WHERE endpoint_id = $1 AND slot = $2 AND token = $3 RETURNING expires_at > $4`,
			t.endpointID, t.slot, t.token, now).Scan(&alive)
		if errors.Is(err, pgx.ErrNoRows) {
			after = b
			return ErrTrialLeaseLost
		}
		if err != nil {
			return fmt.Errorf("free trial slot: %w", err)
		}
		prev := b.Generation
		// The unexpired leases, ours included, are the trials in flight.
		if !alive {
			held++
		}
		b.TrialsInFlight = max(held, 1)
		res = b.Record(c, now.UTC(), t.ticket, o, rnd)
		after = b
		if !res.Applied {
			return nil
		}
		_, err = t.leases.store.saveBreakerTx(ctx, tx, t.endpointID, prev, b, res.Transition, withConfig(meta, c))
		return err
	})
	if err != nil {
		if errors.Is(err, ErrTrialLeaseLost) {
			return breaker.Result{}, after, fmt.Errorf("finish trial of %s: %w", t.endpointID, err)
		}
		return breaker.Result{}, breaker.Breaker{}, fmt.Errorf("finish trial of %s: %w", t.endpointID, err)
	}
	return res, after, nil
}

// beginTries is how many times a trial step begins its transaction: each
// failure drops one dead connection from the pool, and after a restart
// the pool may hold several.
const beginTries = 8

// inTx runs fn in a transaction on the store's pool. A transaction that
// could not begin (on a connection the server had ended: a terminated
// backend, an idle timeout, a pooler's restart) is begun again, on
// another connection: nothing of it reached the database.
func (l *TrialLeases) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	var (
		tx  pgx.Tx
		err error
	)
	for try := 1; try <= beginTries; try++ {
		if tx, err = l.store.pool.Begin(ctx); err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // after a commit: a no-op
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// Ticket returns the trial's ticket.
func (t *Trial) Ticket() breaker.Ticket { return t.ticket }

// Slot returns the trial's slot.
func (t *Trial) Slot() int { return t.slot }

// withConfig is meta with c as its Config.
func withConfig(meta TransitionMeta, c breaker.Config) TransitionMeta {
	meta.Config = &c
	return meta
}
