package store

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// MinuteCounts are an endpoint's attempts in one minute, by classification.
type MinuteCounts struct {
	// Minute is the start of the minute (UTC, whole minutes).
	Minute      time.Time
	Success     int
	Failure     int
	Ignore      int
	AuthFailure int
	Blocked     int
}

// EndpointStats are an endpoint's attempts per minute over a range of whole
// minutes ending with the current one, and its breaker transitions in that
// range, for the dashboard's chart.
type EndpointStats struct {
	// Now is the database's time the figures were read at.
	Now time.Time
	// From is the start of the first minute; the range runs to Now.
	From time.Time
	// Minutes holds one entry per minute, oldest first, zeros included.
	Minutes []MinuteCounts
	// Transitions are the transitions at or after From, oldest first (at
	// most MaxStatsTransitions, the latest ones).
	Transitions []TransitionRecord
}

// MaxStatsTransitions caps the transitions EndpointStats returns.
const MaxStatsTransitions = 500

// endpointStatsSQL counts an endpoint's attempts per minute ($1: the
// endpoint, $2: the minutes).
const endpointStatsSQL = `
		WITH bounds AS (
			SELECT clock_timestamp() AS now,
				date_trunc('minute', clock_timestamp()) - ($2::int - 1) * interval '1 minute' AS first
		), counts AS (
			SELECT date_trunc('minute', a.attempted_at) AS minute,
				count(*) FILTER (WHERE a.classification = 'success') AS success,
				count(*) FILTER (WHERE a.classification = 'failure') AS failure,
				count(*) FILTER (WHERE a.classification = 'ignore') AS ignore,
				count(*) FILTER (WHERE a.classification = 'auth_failure') AS auth_failure,
				count(*) FILTER (WHERE a.classification = 'blocked') AS blocked
			FROM delivery_attempts a, bounds b
			WHERE a.endpoint_id = $1 AND a.attempted_at >= b.first
				AND a.attempted_at < date_trunc('minute', b.now) + interval '1 minute'
				-- The same range on now() (stable, unlike clock_timestamp()),
				-- a minute wider: it lets Postgres skip the attempt
				-- partitions outside the range.
				AND a.attempted_at >= date_trunc('minute', now()) - $2::int * interval '1 minute'
			GROUP BY 1
		)
		SELECT b.now, m.minute, coalesce(c.success, 0), coalesce(c.failure, 0), coalesce(c.ignore, 0),
			coalesce(c.auth_failure, 0), coalesce(c.blocked, 0)
		FROM bounds b
		CROSS JOIN LATERAL generate_series(b.first, date_trunc('minute', b.now), interval '1 minute') AS m(minute)
		LEFT JOIN counts c ON c.minute = m.minute
		ORDER BY m.minute`

// EndpointStats counts an endpoint's attempts per minute, by
// classification, over the last minutes whole minutes (the current,
// partial one included), at the database's time. It does not check that
// the endpoint exists.
func (s *Store) EndpointStats(ctx context.Context, endpointID string, minutes int) (EndpointStats, error) {
	if minutes < 1 {
		return EndpointStats{}, fmt.Errorf("endpoint stats: minutes must be positive, got %d", minutes)
	}
	// One statement, so the series and the counts share one clock reading;
	// the range scan uses delivery_attempts_endpoint_log_idx.
	rows, err := s.pool.Query(ctx, endpointStatsSQL, endpointID, minutes)
	if err != nil {
		return EndpointStats{}, fmt.Errorf("endpoint stats: %w", err)
	}
	defer rows.Close()
	out := EndpointStats{Minutes: make([]MinuteCounts, 0, minutes)}
	for rows.Next() {
		var m MinuteCounts
		if err := rows.Scan(&out.Now, &m.Minute, &m.Success, &m.Failure, &m.Ignore, &m.AuthFailure, &m.Blocked); err != nil {
			return EndpointStats{}, fmt.Errorf("endpoint stats: %w", err)
		}
		m.Minute = m.Minute.UTC()
		out.Minutes = append(out.Minutes, m)
	}
	if err := rows.Err(); err != nil {
		return EndpointStats{}, fmt.Errorf("endpoint stats: %w", err)
	}
	if len(out.Minutes) == 0 {
		return EndpointStats{}, fmt.Errorf("endpoint stats: no minutes in the range")
	}
	out.Now, out.From = out.Now.UTC(), out.Minutes[0].Minute
	trs, err := s.ListTransitions(ctx, endpointID, &out.From, MaxStatsTransitions)
	if err != nil {
		return EndpointStats{}, fmt.Errorf("endpoint stats: %w", err)
	}
	slices.Reverse(trs)
	out.Transitions = trs
	return out, nil
}
