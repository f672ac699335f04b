package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/internal/breaker"
)

// EnableEndpoint enables an endpoint, resets its auth-failure streak and
// stamps it for the release of its held deliveries, in one transaction
// that touches no delivery, and returns the endpoint and how many held
// deliveries it has. The dispatchers' unparker releases them in the
// background, oldest first at a pace (see ReleaseParked), resuming after
// any restart: the held deliveries of an enabled endpoint are what is left
// to release.
func (s *Store) EnableEndpoint(ctx context.Context, id, actor string) (Endpoint, int, error) {
	var (
		e    Endpoint
		held int
	)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// Counted before the endpoint row is locked: a count of millions
		// takes a while, and a ledger batch holding a delivery of this
		// endpoint would wait on the lock for it. A hold committing
		// between the two is released all the same, uncounted.
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND status = 'held'`, id).Scan(&held); err != nil {
			return fmt.Errorf("count held deliveries: %w", err)
		}
		var err error
		e, err = s.updateEndpointTx(ctx, tx, id, `status = 'enabled', disabled_reason = NULL, release_held_since = now()`)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM auth_streaks WHERE endpoint_id = $1`, id); err != nil {
			return fmt.Errorf("reset auth streak: %w", err)
		}
		_, err = tx.Exec(ctx, `INSERT INTO endpoint_events (endpoint_id, kind, reason, details, actor) VALUES ($1, 'enabled', '', jsonb_build_object('released', $2::int), $3)`, id, held, actor)
		if err != nil {
			return fmt.Errorf("record enable: %w", err)
		}
		ev := endpointEvent(OpEndpointEnabled, e)
		ev.Data["released"] = held
		return s.emitOperational(ctx, tx, []OperationalEvent{ev})
	})
	if err != nil {
		return Endpoint{}, 0, err
	}
	return e, held, nil
}

// Which waiting deliveries releaseChunk queues again.
const (
	releaseHeld   = `d.status = 'held'`
	releaseParked = `d.status = 'waiting' AND d.job_id IS NULL`
)

// releaseChunk gives up to limit of an endpoint's held or parked deliveries
// (parked by the breaker or by a recovery alike), oldest first, a job each
// and makes them pending again. Rows another
// transaction is releasing are skipped, so concurrent releasers never queue
// a delivery twice. Each job keeps the delivery's place in its retry
// schedule and attempt numbering.
func releaseChunk(ctx context.Context, tx pgx.Tx, endpointID, which string, limit int, enq Enqueuer) ([]Released, error) {
	rows, err := tx.Query(ctx, `
		SELECT `+deliveryColumns+`, m.event_type`+deliveryFrom+`
		JOIN messages m ON m.id = d.message_id
		WHERE d.endpoint_id = $1 AND `+which+`
		ORDER BY d.created_at, d.id LIMIT $2
		FOR UPDATE OF d SKIP LOCKED`, endpointID, limit)
	if err != nil {
		return nil, fmt.Errorf("list deliveries to release: %w", err)
	}
	var batch []QueuedDelivery
	for rows.Next() {
		// Jobs carry no payload: the worker loads it (and expires a
		// delivery whose payload retention dropped).
		var q QueuedDelivery
		d, err := scanDelivery(rows, &q.EventType)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("list deliveries to release: %w", err)
		}
		q.Delivery = d
		batch = append(batch, q)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list deliveries to release: %w", err)
	}
	if len(batch) == 0 {
		return nil, nil
	}
	jobIDs, err := enq.EnqueueTx(ctx, tx, batch)
	if err != nil {
		return nil, fmt.Errorf("enqueue released deliveries: %w", err)
	}
	ids := make([]string, len(batch))
	released := make([]Released, len(batch))
	for i, q := range batch {
		ids[i] = q.ID
		released[i] = Released{ID: q.ID, Attempts: q.AttemptCount}
	}
	// Compare-and-set on what was selected: a row that is no longer held
	// or parked is not given a second job.
	tag, err := tx.Exec(ctx, `
		UPDATE deliveries d SET status = 'pending', job_id = j.job_id, next_attempt_at = NULL,
			breaker_open_until = NULL, park_reason = NULL, updated_at = now()
		FROM unnest($1::text[], $2::bigint[]) AS j(id, job_id) WHERE d.id = j.id AND d.id = ANY($1) AND `+which, customPlan, ids, jobIDs)
	if err != nil {
		return nil, fmt.Errorf("release deliveries: %w", err)
	}
	if int(tag.RowsAffected()) != len(batch) {
		// Rows locked FOR UPDATE cannot change under us: this is a bug,
		// and the jobs just queued must not commit.
		return nil, fmt.Errorf("release deliveries: %d of %d rows still releasable", tag.RowsAffected(), len(batch))
	}
	return released, nil
}

// Released is a delivery a release gave a job again, and the attempts
// it had then: what ReleaseOutcomes compares with.
type Released struct {
	ID       string
	Attempts int
}

// ReleaseParked queues up to limit of an endpoint's waiting deliveries
// again, in one transaction, and returns them: first its held ones,
// oldest first, while it is enabled (see EnableEndpoint), then its parked
// ones, oldest first.
func (s *Store) ReleaseParked(ctx context.Context, endpointID string, limit int, enq Enqueuer) ([]Released, error) {
	var out []Released
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// Share-locked, so a disable waits for the release rather than
		// holding deliveries this transaction queues (a hold takes the
		// same share lock, after its delivery row's).
		var enabled bool
		err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM endpoints WHERE id = $1 AND status = 'enabled' AND deleted_at IS NULL FOR SHARE)`, endpointID).Scan(&enabled)
		if err != nil {
			return fmt.Errorf("lock endpoint: %w", err)
		}
		if enabled {
			if out, err = releaseChunk(ctx, tx, endpointID, releaseHeld, limit, enq); err != nil {
				return err
			}
		}
		if len(out) < limit {
			more, err := releaseChunk(ctx, tx, endpointID, releaseParked, limit-len(out), enq)
			if err != nil {
				return err
			}
			out = append(out, more...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReleaseOutcome is what became of a released delivery since its release.
type ReleaseOutcome int

const (
	// ReleaseOutstanding: not attempted yet, as far as the ledger knows.
	ReleaseOutstanding ReleaseOutcome = iota
	// ReleaseDelivered: delivered.
	ReleaseDelivered
	// ReleaseFailed: attempted since its release and not delivered (its
	// retry scheduled, failed for good, or parked again after it).
	ReleaseFailed
	// ReleaseGone: no longer waiting for an attempt from its release:
	// parked or held again without one, expired, retried by hand, or
	// deleted.
	ReleaseGone
)

// ReleaseOutcomes reads what became of released deliveries, in the order
// given: the ledger records an attempt's outcome before its job
// finishes, so a delivery leaves the queue already counted here, where
// the breaker's shared counts follow only at their next flush.
func (s *Store) ReleaseOutcomes(ctx context.Context, released []Released) ([]ReleaseOutcome, error) {
	ids := make([]string, len(released))
	attempts := make([]int32, len(released))
	for i, r := range released {
		ids[i], attempts[i] = r.ID, int32(r.Attempts)
	}
	// "id = ANY($1)" inside the join lets the planner prune the partitions
	// (see ledgerWriteSQL); planned for its ids at every call (customPlan),
	// as a lookup of keys in a fast-growing table.
	rows, err := s.pool.Query(ctx, `
		SELECT CASE
			WHEN d.id IS NULL THEN $3::int
			WHEN d.status = 'delivered' THEN $4::int
			WHEN d.attempt_count > r.attempts THEN $5::int
			WHEN d.status = 'pending' AND d.job_id IS NOT NULL THEN $6::int
			ELSE $3::int END
		FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS r(id, attempts, ord)
		LEFT JOIN (SELECT id, status, attempt_count, job_id FROM deliveries WHERE id = ANY($1)) d ON d.id = r.id
		ORDER BY r.ord`, customPlan, ids, attempts, int(ReleaseGone), int(ReleaseDelivered), int(ReleaseFailed), int(ReleaseOutstanding))
	if err != nil {
		return nil, fmt.Errorf("read release outcomes: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[ReleaseOutcome])
	if err != nil {
		return nil, fmt.Errorf("read release outcomes: %w", err)
	}
	if len(out) != len(released) {
		return nil, fmt.Errorf("read release outcomes: %d rows for %d deliveries", len(out), len(released))
	}
	return out, nil
}

// EndHeldRelease clears an endpoint's release stamp (see EnableEndpoint)
// once there is nothing left for it to release: the endpoint is disabled
// or gone, or it has no held delivery and was stamped at least linger ago
// (a message whose insert read the endpoint still disabled may commit a
// held delivery just after the enable). It reports whether it cleared it.
func (s *Store) EndHeldRelease(ctx context.Context, endpointID string, linger time.Duration) (bool, error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE endpoints e SET release_held_since = NULL
		WHERE e.id = $1 AND e.release_held_since IS NOT NULL
			AND (e.status <> 'enabled' OR e.deleted_at IS NOT NULL
				OR (e.release_held_since <= now() - $2::interval
					AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.endpoint_id = e.id AND d.status = 'held')))`,
		endpointID, linger)
	if err != nil {
		return false, fmt.Errorf("end held release: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// ParkedEndpoint is an endpoint with deliveries to release, and its
// breaker.
type ParkedEndpoint struct {
	EndpointID string
	Parked     int
	// Held counts, up to heldCounted, the held deliveries of an enabled
	// endpoint stamped for their release (see EnableEndpoint).
	Held int
	// ReleasingHeld says the endpoint is stamped for the release of its
	// held deliveries (see EndHeldRelease).
	ReleasingHeld bool
	Breaker       breaker.Breaker
	Now           time.Time
	TrialInFlight bool
	// Queued counts the endpoint's deliveries that have a job due now
	// (queued, running, or snoozed): the backlog a release adds to.
	Queued int
	// Failures counts the failures in the shared buckets of the breaker's
	// current generation: for a closed breaker, those since it closed.
	Failures int
	// FIFO marks an endpoint whose parked deliveries are a FIFO queue:
	// released one at a time by AdvanceQueue, never at a pace.
	FIFO bool
}

// Backlog is how many deliveries are waiting for their release.
func (pe ParkedEndpoint) Backlog() int { return pe.Parked + pe.Held }

// heldCounted bounds the held deliveries ParkedEndpoints counts per
// endpoint: a release window is far smaller, and an endpoint disabled for
// days may hold millions.
const heldCounted = 1000

// ParkedEndpoints lists the endpoints that have parked deliveries or are
// stamped for the release of their held ones (of ids only, when ids is not
// nil), with their breakers at the database's time and whether a trial is
// in flight.
func (s *Store) ParkedEndpoints(ctx context.Context, ids []string) ([]ParkedEndpoint, error) {
	return s.parkedEndpoints(ctx, ids, 0, 1)
}

// ParkedEndpointsOfShard is ParkedEndpoints over every endpoint of one
// shard of n (shard in [0, n)): the endpoints are split among the fleet's
// dispatchers by a hash of their ids (EndpointShard), so each endpoint's
// backlog is paced by one of them and the fleet lists the parked
// deliveries once per pass, not once per dispatcher.
func (s *Store) ParkedEndpointsOfShard(ctx context.Context, shard, n int) ([]ParkedEndpoint, error) {
	if n < 1 || shard < 0 || shard >= n {
		return nil, fmt.Errorf("list parked endpoints: shard %d of %d", shard, n)
	}
	return s.parkedEndpoints(ctx, nil, shard, n)
}

// endpointShardSQL is the predicate for an endpoint id column in shard $3
// of $4.
const endpointShardSQL = `(hashtext(%s) & 2147483647) %% $4 = $3`

func (s *Store) parkedEndpoints(ctx context.Context, ids []string, shard, n int) ([]ParkedEndpoint, error) {
	rows, err := s.pool.Query(ctx, `
		WITH p AS (
			SELECT endpoint_id, count(*) AS parked FROM deliveries
			WHERE status = 'waiting' AND job_id IS NULL AND ($1::text[] IS NULL OR endpoint_id = ANY($1))
				AND ($4 = 1 OR `+fmt.Sprintf(endpointShardSQL, "endpoint_id")+`)
			GROUP BY endpoint_id
		), h AS (
			SELECT e.id AS endpoint_id, CASE WHEN e.status = 'enabled' AND e.deleted_at IS NULL THEN (
				SELECT count(*) FROM (SELECT 1 FROM deliveries d WHERE d.endpoint_id = e.id AND d.status = 'held' LIMIT $2) c
			) ELSE 0 END AS held
			FROM endpoints e WHERE e.release_held_since IS NOT NULL AND ($1::text[] IS NULL OR e.id = ANY($1))
				AND ($4 = 1 OR `+fmt.Sprintf(endpointShardSQL, "e.id")+`)
		), x AS (
			SELECT coalesce(p.endpoint_id, h.endpoint_id) AS endpoint_id, coalesce(p.parked, 0) AS parked,
				coalesce(h.held, 0) AS held, h.endpoint_id IS NOT NULL AS releasing_held
			FROM p FULL JOIN h ON h.endpoint_id = p.endpoint_id
		)
		SELECT `+breakerColumns+`, x.parked, x.held, x.releasing_held, clock_timestamp(),
			`+trialsInFlightSQL("s.endpoint_id")+` > 0,
			(SELECT count(*) FROM deliveries q WHERE q.endpoint_id = x.endpoint_id AND q.status IN ('pending', 'waiting')
				AND q.job_id IS NOT NULL AND (q.next_attempt_at IS NULL OR q.next_attempt_at <= clock_timestamp())),
			(SELECT coalesce(sum(b.failures), 0) FROM `+breakerBucketRows+` b WHERE b.endpoint_id = s.endpoint_id AND b.generation = s.generation),
			EXISTS (SELECT 1 FROM endpoints e WHERE e.id = x.endpoint_id AND e.ordering = 'fifo')
		FROM x JOIN breaker_states s ON s.endpoint_id = x.endpoint_id`, ids, heldCounted, shard, n)
	if err != nil {
		return nil, fmt.Errorf("list parked endpoints: %w", err)
	}
	defer rows.Close()
	var out []ParkedEndpoint
	for rows.Next() {
		var pe ParkedEndpoint
		var now time.Time
		id, b, err := scanBreaker(rows, &pe.Parked, &pe.Held, &pe.ReleasingHeld, &now, &pe.TrialInFlight, &pe.Queued, &pe.Failures, &pe.FIFO)
		if err != nil {
			return nil, fmt.Errorf("list parked endpoints: %w", err)
		}
		pe.EndpointID, pe.Breaker, pe.Now = id, b, now.UTC()
		out = append(out, pe)
	}
	return out, rows.Err()
}
