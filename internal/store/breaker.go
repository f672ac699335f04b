package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/internal/breaker"
)

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

// TransitionMeta says who made a transition and why.
type TransitionMeta struct {
	// Actor is the dispatcher process or operator that made it.
	Actor string
	// Note is a free-text why (an operator's reason).
	Note string
	// Shadow marks a would-be transition of a class in shadow mode.
	Shadow bool
	// Config, when known, is the breaker config the transition was
	// decided under: its thresholds go into the breaker.opened event.
	Config *breaker.Config
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
// With operational events on and a receiver for its event, the breaker
// and the event are written in one transaction.
func (s *Store) CommitTransition(ctx context.Context, endpointID string, prev int64, b breaker.Breaker, t breaker.Transition, meta TransitionMeta) (bool, error) {
	if typ := breakerEventType(&t, meta); typ != "" {
		wanted, err := s.operationalWanted(ctx, s.pool, typ)
		if err != nil {
			return false, err
		}
		if wanted {
			var won bool
			err := s.inTx(ctx, func(tx pgx.Tx) error {
				var err error
				won, err = s.saveBreakerTx(ctx, tx, endpointID, prev, b, &t, meta)
				return err
			})
			return won, err
		}
	}
	return saveBreaker(ctx, s.pool, endpointID, prev, b, &t, meta)
}

// breakerEventType is the operational event of transition t: breaker.opened
// (open, or isolated by an operator) or breaker.closed, or none (half-open,
// a shadow breaker, no change).
func breakerEventType(t *breaker.Transition, meta TransitionMeta) string {
	if t == nil || meta.Shadow || t.From == t.To {
		return ""
	}
	switch t.To {
	case breaker.StateOpen, breaker.StateIsolated:
		return OpBreakerOpened
	case breaker.StateClosed:
		return OpBreakerClosed
	}
	return ""
}

// saveBreakerTx is saveBreaker in tx, emitting the transition's
// operational event when it won.
func (s *Store) saveBreakerTx(ctx context.Context, tx pgx.Tx, id string, prev int64, b breaker.Breaker, t *breaker.Transition, meta TransitionMeta) (bool, error) {
	won, err := saveBreaker(ctx, tx, id, prev, b, t, meta)
	if err != nil || !won {
		return won, err
	}
	typ := breakerEventType(t, meta)
	if typ == "" {
		return true, nil
	}
	data := map[string]any{"reason": t.Reason, "from": t.From.String(), "to": t.To.String(), "generation": t.Generation}
	if typ == OpBreakerOpened {
		data["failure_rate"], data["requests"], data["failures"], data["consecutive_failures"] = t.FailureRate, t.Observations, t.Failures, t.Consecutive
		data["open_until"] = t.OpenUntil.UTC()
		if c := meta.Config; c != nil {
			data["trip"], data["threshold"], data["min_requests"], data["window_seconds"] = string(c.Trip), c.FailureRateThreshold, c.MinThroughput, c.Window.Seconds()
			data["consecutive_threshold"] = c.ConsecutiveFailures
		}
	}
	return true, s.emitOperational(ctx, tx, []OperationalEvent{{Type: typ, At: t.At, EndpointID: id, Data: data}})
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
