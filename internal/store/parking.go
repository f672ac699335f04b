package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/internal/breaker"
)

// EnableEndpoint enables an endpoint, resets its auth-failure streak and
// releases every held delivery in creation order (each gets a job), in one
// transaction. It returns the endpoint and how many deliveries it released.
func (s *Store) EnableEndpoint(ctx context.Context, id, actor string, enq Enqueuer) (Endpoint, int, error) {
	var (
		e        Endpoint
		released int
	)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		e, err = s.updateEndpointTx(ctx, tx, id, `status = 'enabled', disabled_reason = NULL`)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM auth_streaks WHERE endpoint_id = $1`, id); err != nil {
			return fmt.Errorf("reset auth streak: %w", err)
		}
		for {
			n, err := releaseChunk(ctx, tx, id, releaseHeld, 500, enq)
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
			released += n
		}
		_, err = tx.Exec(ctx, `INSERT INTO endpoint_events (endpoint_id, kind, reason, details, actor) VALUES ($1, 'enabled', '', jsonb_build_object('released', $2::int), $3)`, id, released, actor)
		if err != nil {
			return fmt.Errorf("record enable: %w", err)
		}
		ev := endpointEvent(OpEndpointEnabled, e)
		ev.Data["released"] = released
		return s.emitOperational(ctx, tx, []OperationalEvent{ev})
	})
	if err != nil {
		return Endpoint{}, 0, err
	}
	return e, released, nil
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
func releaseChunk(ctx context.Context, tx pgx.Tx, endpointID, which string, limit int, enq Enqueuer) (int, error) {
	rows, err := tx.Query(ctx, `
		SELECT `+deliveryColumns+`, m.event_type`+deliveryFrom+`
		JOIN messages m ON m.id = d.message_id
		WHERE d.endpoint_id = $1 AND `+which+`
		ORDER BY d.created_at, d.id LIMIT $2
		FOR UPDATE OF d SKIP LOCKED`, endpointID, limit)
	if err != nil {
		return 0, fmt.Errorf("list deliveries to release: %w", err)
	}
	var batch []QueuedDelivery
	for rows.Next() {
		// Jobs carry no payload: the worker loads it (and expires a
		// delivery whose payload retention dropped).
		var q QueuedDelivery
		d, err := scanDelivery(rows, &q.EventType)
		if err != nil {
			rows.Close()
			return 0, fmt.Errorf("list deliveries to release: %w", err)
		}
		q.Delivery = d
		batch = append(batch, q)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("list deliveries to release: %w", err)
	}
	if len(batch) == 0 {
		return 0, nil
	}
	jobIDs, err := enq.EnqueueTx(ctx, tx, batch)
	if err != nil {
		return 0, fmt.Errorf("enqueue released deliveries: %w", err)
	}
	ids := make([]string, len(batch))
	for i, q := range batch {
		ids[i] = q.ID
	}
	// Compare-and-set on what was selected: a row that is no longer held
	// or parked is not given a second job.
	tag, err := tx.Exec(ctx, `
		UPDATE deliveries d SET status = 'pending', job_id = j.job_id, next_attempt_at = NULL,
			breaker_open_until = NULL, park_reason = NULL, updated_at = now()
		FROM unnest($1::text[], $2::bigint[]) AS j(id, job_id) WHERE d.id = j.id AND d.id = ANY($1) AND `+which, customPlan, ids, jobIDs)
	if err != nil {
		return 0, fmt.Errorf("release deliveries: %w", err)
	}
	if int(tag.RowsAffected()) != len(batch) {
		// Rows locked FOR UPDATE cannot change under us: this is a bug,
		// and the jobs just queued must not commit.
		return 0, fmt.Errorf("release deliveries: %d of %d rows still releasable", tag.RowsAffected(), len(batch))
	}
	return len(batch), nil
}

// ReleaseParked queues up to limit of an endpoint's parked deliveries
// again, oldest first, in one transaction, and returns how many.
func (s *Store) ReleaseParked(ctx context.Context, endpointID string, limit int, enq Enqueuer) (int, error) {
	var n int
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		n, err = releaseChunk(ctx, tx, endpointID, releaseParked, limit, enq)
		return err
	})
	return n, err
}

// ParkedEndpoint is an endpoint with parked deliveries, and its breaker.
type ParkedEndpoint struct {
	EndpointID    string
	Parked        int
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

// maxTrialSlots bounds the trial slots ParkedEndpoints looks at when it
// asks whether a probe is in flight.
const maxTrialSlots = 16

// ParkedEndpoints lists the endpoints that have parked deliveries (of ids
// only, when ids is not nil), with their breakers at the database's time
// and whether a trial is in flight.
func (s *Store) ParkedEndpoints(ctx context.Context, ids []string) ([]ParkedEndpoint, error) {
	rows, err := s.pool.Query(ctx, `
		WITH p AS (
			SELECT endpoint_id, count(*) AS parked FROM deliveries
			WHERE status = 'waiting' AND job_id IS NULL AND ($2::text[] IS NULL OR endpoint_id = ANY($2))
			GROUP BY endpoint_id
		)
		SELECT `+breakerColumns+`, p.parked, clock_timestamp(),
			`+trialsHeldSQL("s.endpoint_id", "$1")+` > 0,
			(SELECT count(*) FROM deliveries q WHERE q.endpoint_id = p.endpoint_id AND q.status IN ('pending', 'waiting')
				AND q.job_id IS NOT NULL AND (q.next_attempt_at IS NULL OR q.next_attempt_at <= clock_timestamp())),
			(SELECT coalesce(sum(b.failures), 0) FROM breaker_buckets b WHERE b.endpoint_id = s.endpoint_id AND b.generation = s.generation),
			EXISTS (SELECT 1 FROM endpoints e WHERE e.id = p.endpoint_id AND e.ordering = 'fifo')
		FROM p JOIN breaker_states s ON s.endpoint_id = p.endpoint_id`, maxTrialSlots, ids)
	if err != nil {
		return nil, fmt.Errorf("list parked endpoints: %w", err)
	}
	defer rows.Close()
	var out []ParkedEndpoint
	for rows.Next() {
		var pe ParkedEndpoint
		var now time.Time
		id, b, err := scanBreaker(rows, &pe.Parked, &now, &pe.TrialInFlight, &pe.Queued, &pe.Failures, &pe.FIFO)
		if err != nil {
			return nil, fmt.Errorf("list parked endpoints: %w", err)
		}
		pe.EndpointID, pe.Breaker, pe.Now = id, b, now.UTC()
		out = append(out, pe)
	}
	return out, rows.Err()
}
