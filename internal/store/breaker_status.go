package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/internal/breaker"
)

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
		LEFT JOIN `+breakerBucketRows+` b ON b.endpoint_id = s.endpoint_id AND b.generation = s.generation
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
	// Tripped is the transition that took a breaker that is not closed
	// out of closed, with the window that tripped it (the window itself
	// starts empty on each open); nil for a closed breaker.
	Tripped *breaker.Transition
}

// trips returns, for each of ids, the last transition of its breaker out
// of closed (shadow ones aside): the trip of a breaker that is not closed
// now, with the window's figures at that moment.
func (s *Store) trips(ctx context.Context, ids []string) (map[string]breaker.Transition, error) {
	out := map[string]breaker.Transition{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `
		SELECT i.id, t.from_state, t.to_state, t.at, t.reason, t.failure_rate, t.observations, t.failures, t.consecutive
		FROM unnest($1::text[]) AS i(id) CROSS JOIN LATERAL (
			SELECT from_state, to_state, at, reason, failure_rate, observations, failures, consecutive FROM breaker_transitions
			WHERE endpoint_id = i.id AND from_state = 'closed' AND to_state <> 'closed' AND NOT shadow
			ORDER BY id DESC LIMIT 1) t`, ids)
	if err != nil {
		return nil, fmt.Errorf("load breaker trips: %w", err)
	}
	var (
		id       string
		from, to string
		t        breaker.Transition
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &from, &to, &t.At, &t.Reason, &t.FailureRate, &t.Observations, &t.Failures, &t.Consecutive}, func() error {
		t.From, _ = breaker.ParseState(from)
		t.To, _ = breaker.ParseState(to)
		t.At = t.At.UTC()
		out[id] = t
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load breaker trips: %w", err)
	}
	return out, nil
}

// trialInFlightSQL reports whether the endpoint $1 has a trial in flight.
var trialInFlightSQL = trialsInFlightSQL("$1") + ` > 0`

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
		endpointID).Scan(&out.TrialInFlight, &out.TripsLast24h)
	if err != nil {
		return BreakerSummary{}, fmt.Errorf("load breaker details: %w", err)
	}
	if st.Breaker.State != breaker.StateClosed {
		trips, err := s.trips(ctx, []string{endpointID})
		if err != nil {
			return BreakerSummary{}, err
		}
		if t, ok := trips[endpointID]; ok {
			out.Tripped = &t
		}
	}
	return out, nil
}

// BreakerFilter narrows the breaker list.
type BreakerFilter struct {
	// State is closed, open, half_open or isolated (effective state: an
	// open breaker past its open_until counts as half_open), or empty.
	State string
	// Tenants is whose endpoints are listed.
	Tenants Tenants
	Page    Page
}

// ListBreakers returns a page of live customer endpoints (never
// operational ones) in id order with their breakers. configFor gives each endpoint's breaker config (its class).
func (s *Store) ListBreakers(ctx context.Context, f BreakerFilter, configFor func(Endpoint) breaker.Config) ([]BreakerSummary, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT `+endpointColumnsQualified+`, `+breakerColumns+`, clock_timestamp(), s.updated_at
		FROM endpoints e JOIN breaker_states s ON s.endpoint_id = e.id
		WHERE e.deleted_at IS NULL AND ($6::boolean OR e.tenant_id = $1) AND e.tenant_id <> $5 AND e.id > $2
			AND CASE $3
				WHEN '' THEN true
				WHEN 'open' THEN s.state = 'open' AND s.open_until > clock_timestamp()
				WHEN 'half_open' THEN s.state = 'half_open' OR (s.state = 'open' AND s.open_until <= clock_timestamp())
				ELSE s.state = $3 END
		ORDER BY e.id LIMIT $4`, f.Tenants.id, f.Page.After, f.State, f.Page.Limit, OperationalTenant, f.Tenants.all)
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
			creds   string
		)
		dest := append(endpointDest(&e, &creds), &bID, &bstate, &b.Generation, &opened, &until, &b.TrialSuccesses, &b.OpenStreak, &b.Trips, &b.Consecutive, &now, &updated)
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list breakers: %w", err)
		}
		if err := s.openEndpointSecrets(&e, creds); err != nil {
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
	cfgs := make([]breaker.Config, len(out))
	var longest time.Duration
	for i, sum := range out {
		ids[i] = sum.Endpoint.ID
		cfgs[i] = configFor(sum.Endpoint)
		longest = max(longest, cfgs[i].Window)
		out[i].Status.Breaker.Window = breaker.NewWindow(cfgs[i])
	}
	index := make(map[string]int, len(ids))
	for i, id := range ids {
		index[id] = i
	}
	brows, err := s.pool.Query(ctx, `
		SELECT b.endpoint_id, b.bucket_start, b.successes, b.failures
		FROM `+breakerBucketRows+` b JOIN breaker_states s ON s.endpoint_id = b.endpoint_id AND s.generation = b.generation
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
			`+trialsInFlightSQL("i.id")+` > 0
		FROM unnest($1::text[]) AS i(id)`, ids)
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
	var notClosed []string
	for i := range out {
		st := &out[i].Status
		st.Observations, st.Failures = st.Breaker.Window.Counts(st.Now)
		if st.Breaker.State != breaker.StateClosed {
			notClosed = append(notClosed, st.EndpointID)
		}
	}
	trips, err := s.trips(ctx, notClosed)
	if err != nil {
		return nil, err
	}
	for i := range out {
		if t, ok := trips[out[i].Status.EndpointID]; ok {
			out[i].Tripped = &t
		}
	}
	return out, nil
}
