package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/trafficclass"
)

// Operational events of automatic tuning: about a traffic class, not an
// endpoint.
const (
	OpTrafficClassRecommended = "traffic_class.recommended"
	OpTrafficClassTuned       = "traffic_class.tuned"
)

// ErrTuningBusy is returned when a tuning pass of the class is already
// running somewhere in the fleet.
var ErrTuningBusy = fmt.Errorf("%w: a tuning pass of the class is running", ErrConflict)

// ErrClassChanged is returned when a tuned change finds the class's config
// no longer the one the pass started from.
var ErrClassChanged = fmt.Errorf("%w: the class's config changed since the tuning pass", ErrConflict)

// TuningLockKey is the first key of the per-class advisory lock a tuning
// pass holds; the second is the hash of the class name.
const TuningLockKey = 0x686f6f6b // "hook"

// WithTuningLock runs fn while this process holds the class's tuning lock,
// and returns ErrTuningBusy without running it when another session holds
// it. The lock is a session lock on a connection held for fn's duration
// (a lock nothing but tuning takes: delivery never waits on it). fn's
// context ends if that connection stops answering (checked every
// tuningLockCheck), since the lock went with its session.
func (s *Store) WithTuningLock(ctx context.Context, class string, fn func(context.Context) error) error {
	conn, err := s.lockPool().Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire connection: %w", err)
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, hashtext($2))`, int32(TuningLockKey), class).Scan(&got); err != nil {
		return fmt.Errorf("take tuning lock: %w", err)
	}
	if !got {
		return ErrTuningBusy
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1, hashtext($2))`, int32(TuningLockKey), class)
	}()
	held, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		tick := time.NewTicker(tuningLockCheck)
		defer tick.Stop()
		for {
			select {
			case <-held.Done():
				return
			case <-tick.C:
				if _, err := conn.Exec(held, `SELECT 1`); err != nil && held.Err() == nil {
					lost(fmt.Errorf("tuning lock's connection: %w", err))
					return
				}
			}
		}
	}()
	err = fn(held)
	lost(nil)
	<-watched
	return err
}

// tuningLockCheck is how often a held tuning lock's connection is checked.
const tuningLockCheck = 5 * time.Second

// ClassEndpointIDs returns the live customer endpoints that run under
// class, in id order: those naming it, and the auto ones measured into it
// (or, never measured, of the default class).
func (s *Store) ClassEndpointIDs(ctx context.Context, class string) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id FROM endpoints
		WHERE deleted_at IS NULL AND tenant_id <> $2
			AND (traffic_class = $1 OR (traffic_class = 'auto' AND coalesce(nullif(assigned_class, ''), $3) = $1))
		ORDER BY id`, class, OperationalTenant, trafficclass.DefaultClass)
	if err != nil {
		return nil, fmt.Errorf("list class endpoints: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list class endpoints: %w", err)
	}
	return ids, nil
}

// AttemptOutcome is one attempt as a breaker sees it.
type AttemptOutcome struct {
	ID             int64
	At             time.Time
	Classification string
}

// StreamEndpointOutcomes calls fn with the attempts of endpointID in
// [since, until), in (attempted_at, id) order, as they come off the
// connection: the caller holds no more of the log than it keeps. The
// endpoint's (endpoint_id, attempted_at) index of each partition in the
// range gives them in time order (an incremental sort orders ties by id),
// the partitions outside the range pruned when the query is planned for
// its parameters (customPlan).
func (s *Store) StreamEndpointOutcomes(ctx context.Context, endpointID string, since, until time.Time, fn func(AttemptOutcome) error) error {
	rows, err := s.pool.Query(ctx, `
		SELECT id, attempted_at, classification FROM delivery_attempts
		WHERE endpoint_id = $1 AND attempted_at >= $2 AND attempted_at < $3
		ORDER BY attempted_at, id`, customPlan, endpointID, since, until)
	if err != nil {
		return fmt.Errorf("read endpoint attempts: %w", err)
	}
	// The classification is read in place (a pass reads millions of
	// rows), as one of the constants the CHECK allows.
	var (
		class pgtype.DriverBytes
		o     AttemptOutcome
	)
	_, err = pgx.ForEachRow(rows, []any{&o.ID, &o.At, &class}, func() error {
		o.Classification = classificationOf(class)
		return fn(o)
	})
	if err != nil {
		return fmt.Errorf("read endpoint attempts: %w", err)
	}
	return nil
}

// classificationOf returns an attempt's classification as a constant
// string where it is one of the known ones.
func classificationOf(b []byte) string {
	for _, c := range [...]string{"success", "failure", "ignore", "auth_failure", "blocked"} {
		if string(b) == c {
			return c
		}
	}
	return string(b)
}

// LongestTimeout returns the longest timeout of its own (timeout_ms) among
// endpointIDs; 0 when none has one.
func (s *Store) LongestTimeout(ctx context.Context, endpointIDs []string) (time.Duration, error) {
	var ms int64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(timeout_ms), 0) FROM endpoints WHERE id = ANY($1)`, endpointIDs).Scan(&ms); err != nil {
		return 0, fmt.Errorf("read endpoint timeouts: %w", err)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// ClassAttemptEnds returns, by endpoint, the attempts of endpointIDs that
// ended in [since, until), each At its end (attempted_at plus its
// duration), in order of their ends: when the live breaker counted them.
// An attempt lasts at most lookback, so only attempts started from since
// less lookback are read.
func (s *Store) ClassAttemptEnds(ctx context.Context, endpointIDs []string, since, until time.Time, lookback time.Duration) (map[string][]AttemptOutcome, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT endpoint_id, id, ended, classification FROM (
			SELECT endpoint_id, id, attempted_at + duration_ms * interval '1 millisecond' AS ended, classification
			FROM delivery_attempts
			WHERE endpoint_id = ANY($1) AND attempted_at >= $2 AND attempted_at < $4
		) a
		WHERE ended >= $3 AND ended < $4
		ORDER BY endpoint_id, ended, id`, customPlan, endpointIDs, since.Add(-lookback), since, until)
	if err != nil {
		return nil, fmt.Errorf("read class attempt ends: %w", err)
	}
	out := map[string][]AttemptOutcome{}
	var (
		ep string
		a  AttemptOutcome
	)
	_, err = pgx.ForEachRow(rows, []any{&ep, &a.ID, &a.At, &a.Classification}, func() error {
		out[ep] = append(out[ep], a)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read class attempt ends: %w", err)
	}
	return out, nil
}

// OpenRecord is a recorded trip of an endpoint's breaker from closed, with
// the window that tripped it.
type OpenRecord struct {
	EndpointID   string
	At           time.Time
	Observations int
	Failures     int
	Shadow       bool
}

// ListOpens returns the trips from closed to open of endpoints' breakers in
// [since, until), in time order.
func (s *Store) ListOpens(ctx context.Context, endpointIDs []string, since, until time.Time) ([]OpenRecord, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT endpoint_id, at, observations, failures, shadow FROM breaker_transitions
		WHERE endpoint_id = ANY($1) AND at >= $2 AND at < $3 AND from_state = 'closed' AND to_state = 'open'
		ORDER BY at, id`, endpointIDs, since, until)
	if err != nil {
		return nil, fmt.Errorf("list opens: %w", err)
	}
	var (
		out []OpenRecord
		o   OpenRecord
	)
	_, err = pgx.ForEachRow(rows, []any{&o.EndpointID, &o.At, &o.Observations, &o.Failures, &o.Shadow}, func() error {
		o.At = o.At.UTC()
		out = append(out, o)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list opens: %w", err)
	}
	return out, nil
}

// BusyBreaker returns an endpoint of endpointIDs that takes traffic
// (enabled, not deleted, with an attempt logged since since) and whose
// breaker is not closed (open, half-open or isolated), or "" when there
// is none: an endpoint disabled, or without traffic, whose breaker stays
// open has no incident in progress.
func (s *Store) BusyBreaker(ctx context.Context, endpointIDs []string, since time.Time) (string, error) {
	var id string
	err := s.pool.QueryRow(ctx, `
		SELECT b.endpoint_id FROM breaker_states b JOIN endpoints e ON e.id = b.endpoint_id
		WHERE b.endpoint_id = ANY($1) AND b.state <> 'closed' AND e.status = 'enabled' AND e.deleted_at IS NULL
		  AND EXISTS (SELECT 1 FROM delivery_attempts a WHERE a.endpoint_id = b.endpoint_id AND a.attempted_at >= $2)
		ORDER BY b.endpoint_id LIMIT 1`, endpointIDs, since).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("check class breakers: %w", err)
	}
	return id, nil
}

// Recommendation is a class's latest stored recommendation: its status,
// its body as internal/tuning encodes it, and its shadow's range.
type Recommendation struct {
	Class       string
	Status      string
	Body        json.RawMessage
	ShadowSince *time.Time
	ShadowUntil *time.Time
	UpdatedAt   time.Time
	// Expect, when set on a save, is the status the stored recommendation
	// must still have: a save that finds another (an admin's rejection
	// between a read and the save) fails with ErrRecommendationChanged.
	Expect string
}

// ErrRecommendationChanged is returned when a save expected a status the
// stored recommendation no longer has.
var ErrRecommendationChanged = fmt.Errorf("%w: the recommendation changed", ErrConflict)

// GetRecommendation returns a class's recommendation, ErrNotFound when no
// pass has stored one.
func (s *Store) GetRecommendation(ctx context.Context, class string) (Recommendation, error) {
	r := Recommendation{Class: class}
	err := s.pool.QueryRow(ctx, `
		SELECT status, body, shadow_since, shadow_until, updated_at FROM class_recommendations WHERE class = $1`, class).
		Scan(&r.Status, &r.Body, &r.ShadowSince, &r.ShadowUntil, &r.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Recommendation{}, ErrNotFound
	}
	if err != nil {
		return Recommendation{}, fmt.Errorf("load recommendation: %w", err)
	}
	return r, nil
}

// ListRecommendations returns the recommendations whose status is one of
// statuses, by class.
func (s *Store) ListRecommendations(ctx context.Context, statuses ...string) ([]Recommendation, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT class, status, body, shadow_since, shadow_until, updated_at FROM class_recommendations
		WHERE status = ANY($1) ORDER BY class`, statuses)
	if err != nil {
		return nil, fmt.Errorf("list recommendations: %w", err)
	}
	var (
		out []Recommendation
		r   Recommendation
	)
	_, err = pgx.ForEachRow(rows, []any{&r.Class, &r.Status, &r.Body, &r.ShadowSince, &r.ShadowUntil, &r.UpdatedAt}, func() error {
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list recommendations: %w", err)
	}
	return out, nil
}

// SaveRecommendation stores r as its class's recommendation. When event is
// not empty the operational event (traffic_class.recommended, or
// .tuned) with data is written in the same transaction.
func (s *Store) SaveRecommendation(ctx context.Context, r Recommendation, event string, data map[string]any) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if err := saveRecommendation(ctx, tx, r); err != nil {
			return err
		}
		return s.emitClassEvent(ctx, tx, event, r.Class, data)
	})
}

func saveRecommendation(ctx context.Context, tx pgx.Tx, r Recommendation) error {
	if r.Expect != "" {
		tag, err := tx.Exec(ctx, `
			UPDATE class_recommendations SET status = $2, body = $3, shadow_since = $4, shadow_until = $5, updated_at = now()
			WHERE class = $1 AND status = $6`, r.Class, r.Status, r.Body, r.ShadowSince, r.ShadowUntil, r.Expect)
		if err != nil {
			return fmt.Errorf("save recommendation: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return ErrRecommendationChanged
		}
		return nil
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO class_recommendations (class, status, body, shadow_since, shadow_until, updated_at)
		VALUES ($1, $2, $3, $4, $5, now())
		ON CONFLICT (class) DO UPDATE SET status = EXCLUDED.status, body = EXCLUDED.body,
			shadow_since = EXCLUDED.shadow_since, shadow_until = EXCLUDED.shadow_until, updated_at = now()`,
		r.Class, r.Status, r.Body, r.ShadowSince, r.ShadowUntil)
	if err != nil {
		return fmt.Errorf("save recommendation: %w", err)
	}
	return nil
}

// emitClassEvent writes a traffic_class.* operational event about class.
func (s *Store) emitClassEvent(ctx context.Context, tx pgx.Tx, event, class string, data map[string]any) error {
	if event == "" {
		return nil
	}
	d := map[string]any{"class": class}
	for k, v := range data {
		d[k] = v
	}
	var at time.Time
	if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&at); err != nil {
		return fmt.Errorf("read clock: %w", err)
	}
	return s.emitOperational(ctx, tx, []OperationalEvent{{Type: event, At: at, Data: d}})
}

// Tuning is one tuned change of a class, in its history.
type Tuning struct {
	ID        int64
	Class     string
	At        time.Time
	Actor     string
	OldConfig json.RawMessage
	NewConfig json.RawMessage
	Figures   json.RawMessage
	Evidence  json.RawMessage
	Reasons   json.RawMessage
}

// ApplyTuning sets class's breaker config to next if it still is expect,
// in one transaction: the class (and its NOTIFY, so every dispatcher
// reloads it), the history row t, the recommendation r and the
// traffic_class.tuned event with data. ErrClassChanged when the config is
// no longer expect; ErrNotFound without the class.
func (s *Store) ApplyTuning(ctx context.Context, class string, expect, next breaker.Config, t Tuning, r Recommendation, data map[string]any) (trafficclass.Class, error) {
	var out trafficclass.Class
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		c, err := scanClass(tx.QueryRow(ctx, `SELECT config, builtin FROM traffic_classes WHERE name = $1 FOR UPDATE`, class))
		if err != nil {
			return err
		}
		if c.Breaker != expect {
			return ErrClassChanged
		}
		c.Breaker = next
		body, err := c.MarshalJSON()
		if err != nil {
			return fmt.Errorf("encode class: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE traffic_classes SET config = $2, updated_at = now() WHERE name = $1`, class, body); err != nil {
			return fmt.Errorf("update class: %w", err)
		}
		if _, err := tx.Exec(ctx, `SELECT pg_notify('`+ClassChannel+`', $1)`, class); err != nil {
			return fmt.Errorf("notify class: %w", err)
		}
		if t.Reasons == nil {
			t.Reasons = json.RawMessage(`[]`)
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO class_tunings (class, actor, old_config, new_config, figures, evidence, reasons)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, class, t.Actor, t.OldConfig, t.NewConfig, t.Figures, t.Evidence, t.Reasons); err != nil {
			return fmt.Errorf("record tuning: %w", err)
		}
		r.Class = class
		if err := saveRecommendation(ctx, tx, r); err != nil {
			return err
		}
		out = c
		return s.emitClassEvent(ctx, tx, OpTrafficClassTuned, class, data)
	})
	return out, err
}

// ListTunings returns a class's tuned changes, newest first.
func (s *Store) ListTunings(ctx context.Context, class string, limit int) ([]Tuning, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, class, at, actor, old_config, new_config, figures, evidence, reasons FROM class_tunings
		WHERE class = $1 ORDER BY id DESC LIMIT $2`, class, limit)
	if err != nil {
		return nil, fmt.Errorf("list tunings: %w", err)
	}
	var (
		out = []Tuning{}
		t   Tuning
	)
	_, err = pgx.ForEachRow(rows, []any{&t.ID, &t.Class, &t.At, &t.Actor, &t.OldConfig, &t.NewConfig, &t.Figures, &t.Evidence, &t.Reasons}, func() error {
		t.At = t.At.UTC()
		out = append(out, t)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list tunings: %w", err)
	}
	return out, nil
}
