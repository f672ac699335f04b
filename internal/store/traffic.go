package store

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/internal/trafficclass"
)

// measureTrafficSQL reads an endpoint's traffic for reclassification ($1:
// the endpoint, $2: the history window).
const measureTrafficSQL = `
		WITH bounds AS (
			SELECT greatest(date_trunc('minute', now() - $2::interval), date_trunc('minute', e.created_at)) AS lo,
				date_trunc('minute', now()) AS hi
			FROM endpoints e WHERE e.id = $1
		), minutes AS (
			SELECT generate_series(lo, hi - interval '1 minute', interval '1 minute') AS m FROM bounds
		), counted AS (
			SELECT attempted_at, classification = 'failure' AS failed
			FROM delivery_attempts, bounds
			WHERE endpoint_id = $1 AND attempted_at >= bounds.lo AND attempted_at < bounds.hi
				-- bounds.lo's lower limit as a stable expression: Postgres
				-- skips the attempt partitions before it.
				AND attempted_at >= date_trunc('minute', now() - $2::interval)
				AND classification IN ('success', 'failure')
		), per_minute AS (
			SELECT date_trunc('minute', attempted_at) AS m, count(*) AS n FROM counted GROUP BY 1
		), closed_spans AS (
			-- Periods the breaker was open, half-open or isolated: from a
			-- transition away from closed to the next transition.
			SELECT at AS start, coalesce(lead(at) OVER (ORDER BY id), now()) AS stop, to_state
			FROM breaker_transitions WHERE endpoint_id = $1
		), five AS (
			SELECT date_bin('5 minutes', attempted_at, timestamptz '2000-01-01') AS b,
				avg(failed::int)::float8 AS rate
			FROM counted GROUP BY 1
		)
		SELECT
			coalesce((SELECT array_agg(coalesce(p.n, 0)::float8 ORDER BY minutes.m) FROM minutes LEFT JOIN per_minute p USING (m)), '{}'),
			coalesce((SELECT array_agg(rate ORDER BY b) FROM five WHERE NOT EXISTS (
				SELECT 1 FROM closed_spans c WHERE c.to_state <> 'closed'
					AND c.start < five.b + interval '5 minutes' AND c.stop > five.b)), '{}')`

// MeasureTraffic reads an endpoint's delivery log over the last
// trafficclass.HistoryWindow (or since the endpoint was created, if later):
// its per-minute count of counted attempts (success or failure), idle
// minutes included, and its 5-minute failure rates outside the periods its
// breaker was not closed, and turns them into a Measurement.
func (s *Store) MeasureTraffic(ctx context.Context, endpointID string) (trafficclass.Measurement, error) {
	var perMinute, fiveMinute []float64
	err := s.pool.QueryRow(ctx, measureTrafficSQL,
		endpointID, trafficclass.HistoryWindow).Scan(&perMinute, &fiveMinute)
	if errors.Is(err, pgx.ErrNoRows) {
		return trafficclass.Measurement{}, ErrNotFound
	}
	if err != nil {
		return trafficclass.Measurement{}, fmt.Errorf("measure traffic: %w", err)
	}
	return trafficclass.Measure(perMinute, fiveMinute), nil
}

// Reclassification is the outcome of classifying one endpoint.
type Reclassification struct {
	EndpointID   string
	OldClass     string
	NewClass     string
	Measurement  trafficclass.Measurement
	Reason       string
	Changed      bool
	TrafficClass string // the endpoint's configured class ("auto" or a name)
}

// ErrNotAuto is returned when reclassifying an endpoint with an explicit class.
var ErrNotAuto = fmt.Errorf("%w: the endpoint has an explicit traffic class; set it to auto to classify it from its traffic", ErrConflict)

// Classify measures an endpoint and names the class its traffic implies,
// without changing anything.
func (s *Store) Classify(ctx context.Context, endpointID string, classes []trafficclass.Class) (Reclassification, error) {
	e, err := s.GetEndpoint(ctx, endpointID)
	if err != nil {
		return Reclassification{}, err
	}
	m, err := s.MeasureTraffic(ctx, endpointID)
	if err != nil {
		return Reclassification{}, err
	}
	name, reason := trafficclass.Classify(m, classes)
	return Reclassification{
		EndpointID: e.ID, OldClass: e.EffectiveClass(), NewClass: name, Measurement: m, Reason: reason,
		Changed: name != e.EffectiveClass(), TrafficClass: e.TrafficClass,
	}, nil
}

// Reclassify classifies an auto endpoint and, when the class changes,
// assigns it, records the change (old, new, figures) and notifies
// dispatchers. An endpoint with an explicit class gives ErrNotAuto.
func (s *Store) Reclassify(ctx context.Context, endpointID string, classes []trafficclass.Class) (Reclassification, error) {
	r, err := s.Classify(ctx, endpointID, classes)
	if err != nil {
		return Reclassification{}, err
	}
	if r.TrafficClass != trafficclass.Auto {
		return r, ErrNotAuto
	}
	if !r.Changed {
		return r, nil
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			WITH u AS (
				UPDATE endpoints SET assigned_class = $2, updated_at = now()
				WHERE id = $1 AND traffic_class = 'auto' AND deleted_at IS NULL RETURNING id
			) SELECT pg_notify('`+EndpointChannel+`', id) FROM u`, endpointID, r.NewClass)
		if err != nil {
			return fmt.Errorf("assign class: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return ErrNotAuto
		}
		_, err = tx.Exec(ctx, `
			INSERT INTO class_changes (endpoint_id, old_class, new_class, quiet_rps, healthy_error_rate, minutes, reason)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			endpointID, r.OldClass, r.NewClass, finite(r.Measurement.QuietRPS), finite(r.Measurement.HealthyErrorRate),
			r.Measurement.Minutes, r.Reason)
		if err != nil {
			return fmt.Errorf("record class change: %w", err)
		}
		return nil
	})
	if err != nil {
		return Reclassification{}, err
	}
	return r, nil
}

// AutoEndpointIDs lists live endpoints whose class is auto, in id order,
// after the cursor.
func (s *Store) AutoEndpointIDs(ctx context.Context, after string, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT id FROM endpoints WHERE traffic_class = 'auto' AND deleted_at IS NULL AND id > $1 ORDER BY id LIMIT $2`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list auto endpoints: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// ListClassChanges returns an endpoint's class changes, newest first.
func (s *Store) ListClassChanges(ctx context.Context, endpointID string, limit int) ([]ClassChange, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT endpoint_id, old_class, new_class, quiet_rps, healthy_error_rate, minutes, reason, at
		FROM class_changes WHERE endpoint_id = $1 ORDER BY id DESC LIMIT $2`, endpointID, limit)
	if err != nil {
		return nil, fmt.Errorf("list class changes: %w", err)
	}
	defer rows.Close()
	var out []ClassChange
	for rows.Next() {
		var c ClassChange
		if err := rows.Scan(&c.EndpointID, &c.OldClass, &c.NewClass, &c.Measurement.QuietRPS, &c.Measurement.HealthyErrorRate,
			&c.Measurement.Minutes, &c.Reason, &c.At); err != nil {
			return nil, fmt.Errorf("list class changes: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// finite maps NaN and infinities (no data) to -1 for storage.
func finite(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return -1
	}
	return x
}
