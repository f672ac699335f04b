package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// A FIFO endpoint's queue is its deliveries, in created_at order (then id).
// Its head is its oldest delivery that is not final (pending, waiting or
// held): the only one with a River job. The others wait behind it with no
// job, status waiting and park_reason ParkFIFO ("in line"). Whoever makes
// the head final gives the next one its job in the same transaction (the
// ledger after an attempt, Skip and the retries below; the unparker's pass
// catches up on the rest, such as a head retention expired), so the
// endpoint never has two deliveries of its queue in flight and a later
// one is never sent before an earlier one is final (a head's retry is a
// new job too: requeueRetries). Every transaction that adds to a queue or
// moves it locks the endpoint's fifo_queues row (in endpoint id order when
// it takes several), after any delivery rows it locks, then reads the
// deliveries in a statement of its own, so it sees what the previous
// holder of the lock committed; a head is given its job only if no other
// transaction holds its row (releaseHead).

// ParkFIFO is the park_reason of a delivery waiting in a FIFO queue
// behind its head.
const ParkFIFO = "fifo"

// ErrNotSkippable is returned by SkipDelivery for a delivery that does not
// block its endpoint's queue.
var ErrNotSkippable = errors.New("only the failed delivery that blocks its endpoint's FIFO queue can be skipped")

// blockerFailed says whether the delivery named by a fifo_queues row q as
// blocking its queue still does: a blocked_by that was retried since, or
// that retention dropped, blocks nothing.
const blockerFailed = `EXISTS (SELECT 1 FROM deliveries b WHERE b.id = q.blocked_by AND b.status = 'failed')`

// blockedByColumn is the delivery blocking the FIFO queue of the endpoint
// in the query's id column; blockedByColumnQualified of e.id.
const (
	blockedByColumn          = `(SELECT q.blocked_by FROM fifo_queues q WHERE q.endpoint_id = id AND ` + blockerFailed + `)`
	blockedByColumnQualified = `(SELECT q.blocked_by FROM fifo_queues q WHERE q.endpoint_id = e.id AND ` + blockerFailed + `)`
)

// openQueue makes sure a FIFO endpoint has its queue row.
func openQueue(ctx context.Context, tx pgx.Tx, endpointID string) error {
	if _, err := tx.Exec(ctx, `INSERT INTO fifo_queues (endpoint_id) VALUES ($1) ON CONFLICT (endpoint_id) DO NOTHING`, endpointID); err != nil {
		return fmt.Errorf("open fifo queue: %w", err)
	}
	return nil
}

// setOrdering follows an endpoint's change of ordering. To FIFO: the queue
// row is made, and every delivery accepted from now on is stamped after
// those already queued, which keep their jobs and go first. To unordered:
// a block is lifted, and the deliveries still in line are parked
// deliveries like any other, which the unparker releases at its pace.
func (s *Store) setOrdering(ctx context.Context, tx pgx.Tx, e *Endpoint) error {
	if e.Ordering == OrderingFIFO {
		return openQueue(ctx, tx, e.ID)
	}
	if _, err := tx.Exec(ctx, `UPDATE fifo_queues SET blocked_by = NULL WHERE endpoint_id = $1`, e.ID); err != nil {
		return fmt.Errorf("lift fifo block: %w", err)
	}
	e.BlockedBy = nil
	return nil
}

// lockQueues locks the queue rows of endpoints, in id order, and returns
// the endpoints that have one.
func lockQueues(ctx context.Context, tx pgx.Tx, endpointIDs []string) (map[string]bool, error) {
	ids := slices.Clone(endpointIDs)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	rows, err := tx.Query(ctx, `SELECT endpoint_id FROM fifo_queues WHERE endpoint_id = ANY($1) ORDER BY endpoint_id FOR UPDATE`, ids)
	if err != nil {
		return nil, fmt.Errorf("lock fifo queues: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("lock fifo queues: %w", err)
	}
	out := make(map[string]bool, len(found))
	for _, id := range found {
		out[id] = true
	}
	return out, nil
}

// queueSlot is where a group's deliveries to one FIFO endpoint go: their
// created_at stamps start at First, a microsecond apart, and Idle says
// the queue has no delivery that is not final and no block, so the first
// of them is its head.
type queueSlot struct {
	First time.Time
	Idle  bool
}

// stampQueues reserves created_at stamps for counts[endpoint] new
// deliveries of each FIFO endpoint, after every delivery already in its
// queue. The caller holds the queue locks (lockQueues); endpoints without
// a queue row are left out of the answer.
func stampQueues(ctx context.Context, tx pgx.Tx, counts map[string]int) (map[string]queueSlot, error) {
	ids := make([]string, 0, len(counts))
	ns := make([]int32, 0, len(counts))
	for id, n := range counts {
		ids = append(ids, id)
		ns = append(ns, int32(n))
	}
	rows, err := tx.Query(ctx, `
		UPDATE fifo_queues q
		SET stamp = greatest(statement_timestamp(), q.stamp + interval '1 microsecond') + (c.n - 1) * interval '1 microsecond'
		FROM unnest($1::text[], $2::int[]) AS c(endpoint_id, n)
		WHERE q.endpoint_id = c.endpoint_id
		RETURNING q.endpoint_id, q.stamp - (c.n - 1) * interval '1 microsecond',
			NOT (q.blocked_by IS NOT NULL AND `+blockerFailed+`) AND NOT EXISTS (
				SELECT 1 FROM deliveries d WHERE d.endpoint_id = q.endpoint_id AND d.status IN ('pending', 'waiting', 'held'))`,
		ids, ns)
	if err != nil {
		return nil, fmt.Errorf("stamp fifo deliveries: %w", err)
	}
	out := make(map[string]queueSlot, len(ids))
	for rows.Next() {
		var (
			id   string
			slot queueSlot
		)
		if err := rows.Scan(&id, &slot.First, &slot.Idle); err != nil {
			rows.Close()
			return nil, fmt.Errorf("stamp fifo deliveries: %w", err)
		}
		out[id] = slot
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("stamp fifo deliveries: %w", err)
	}
	return out, nil
}

// queueHeadSQL reads, for each queue row among $1, its endpoint's
// ordering options, its block and its head: the oldest delivery that is
// not final. The oldest created_at is the least of the first of each
// status, each an ordered probe of deliveries_endpoint_status_idx per
// partition; ties (deliveries queued before the endpoint became FIFO, in
// one transaction) go by id.
const queueHeadSQL = `
	SELECT q.endpoint_id, e.ordering, e.on_exhausted, e.status = 'enabled', q.blocked_by, q.blocked_by IS NOT NULL AND ` + blockerFailed + `,
		h.id, h.status, h.job_id IS NOT NULL
	FROM fifo_queues q JOIN endpoints e ON e.id = q.endpoint_id AND e.deleted_at IS NULL
	LEFT JOIN LATERAL (
		SELECT d.id, d.status, d.job_id FROM deliveries d
		WHERE d.endpoint_id = q.endpoint_id AND d.status IN ('pending', 'waiting', 'held') AND d.created_at = least(
			(SELECT x.created_at FROM deliveries x WHERE x.endpoint_id = q.endpoint_id AND x.status = 'pending' ORDER BY x.created_at LIMIT 1),
			(SELECT x.created_at FROM deliveries x WHERE x.endpoint_id = q.endpoint_id AND x.status = 'waiting' ORDER BY x.created_at LIMIT 1),
			(SELECT x.created_at FROM deliveries x WHERE x.endpoint_id = q.endpoint_id AND x.status = 'held' ORDER BY x.created_at LIMIT 1))
		ORDER BY d.id LIMIT 1
	) h ON true
	WHERE q.endpoint_id = ANY($1)
	ORDER BY q.endpoint_id`

// advanceQueues moves the FIFO queues of endpointIDs: a queue whose head
// waits with no job gets the head sent, unless the queue is blocked. A
// head waits with no job when it is in line (ParkFIFO) or, with parked,
// when its breaker or a recovery parked it, or it is held and its
// endpoint enabled again: only the unparker, which knows the breaker lets
// traffic through and releases an enabled endpoint's held deliveries,
// passes parked. failed names, per
// endpoint, a delivery of its queue whose retries this transaction
// exhausted: with on_exhausted block it stops the queue instead. The
// caller holds the queue locks.
func (s *Store) advanceQueues(ctx context.Context, tx pgx.Tx, endpointIDs []string, failed map[string]string, parked bool, enq Enqueuer) error {
	type queue struct {
		endpointID, ordering, onExhausted string
		enabled                           bool
		blockedBy                         *string
		blocked                           bool
		headID, headStatus                *string
		headJob                           *bool
	}
	rows, err := tx.Query(ctx, queueHeadSQL, endpointIDs)
	if err != nil {
		return fmt.Errorf("read fifo heads: %w", err)
	}
	var queues []queue
	for rows.Next() {
		var q queue
		if err := rows.Scan(&q.endpointID, &q.ordering, &q.onExhausted, &q.enabled, &q.blockedBy, &q.blocked, &q.headID, &q.headStatus, &q.headJob); err != nil {
			rows.Close()
			return fmt.Errorf("read fifo heads: %w", err)
		}
		queues = append(queues, q)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read fifo heads: %w", err)
	}
	for _, q := range queues {
		if q.ordering != OrderingFIFO {
			continue
		}
		if id := failed[q.endpointID]; id != "" && q.onExhausted == ExhaustedBlock {
			if _, err := tx.Exec(ctx, `UPDATE fifo_queues SET blocked_by = $2 WHERE endpoint_id = $1`, q.endpointID, id); err != nil {
				return fmt.Errorf("block fifo queue: %w", err)
			}
			continue
		}
		if q.blocked {
			continue
		}
		if q.blockedBy != nil {
			// Its blocker was retried, or is gone.
			if _, err := tx.Exec(ctx, `UPDATE fifo_queues SET blocked_by = NULL WHERE endpoint_id = $1`, q.endpointID); err != nil {
				return fmt.Errorf("lift fifo block: %w", err)
			}
		}
		if q.headID == nil || *q.headJob {
			continue
		}
		heldRelease := *q.headStatus == DeliveryHeld && parked && q.enabled
		if *q.headStatus != DeliveryWaiting && !heldRelease {
			continue
		}
		if err := releaseHead(ctx, tx, *q.headID, parked, enq); err != nil {
			return err
		}
	}
	return nil
}

// releaseHead gives a queue's head, waiting with no job (or, with parked,
// held), its job. A head
// another transaction has locked is left for whoever changes it: waiting
// for the row could deadlock with a ledger flush holding it and waiting
// for the queue lock, and skipping to the next row would break the order.
func releaseHead(ctx context.Context, tx pgx.Tx, id string, parked bool, enq Enqueuer) error {
	var q QueuedDelivery
	d, err := scanDelivery(tx.QueryRow(ctx, `SELECT `+deliveryColumns+`, m.event_type`+deliveryFrom+`
		JOIN messages m ON m.id = d.message_id
		WHERE d.id = $1 AND d.job_id IS NULL
			AND ((d.status = 'waiting' AND ($2 OR d.park_reason = 'fifo')) OR (d.status = 'held' AND $2))
		FOR UPDATE OF d SKIP LOCKED`, id, parked), &q.EventType)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read fifo head: %w", err)
	}
	q.Delivery = d
	jobIDs, err := enq.EnqueueTx(ctx, tx, []QueuedDelivery{q})
	if err != nil {
		return fmt.Errorf("enqueue fifo head: %w", err)
	}
	if _, err := tx.Exec(ctx, `
		UPDATE deliveries SET status = 'pending', job_id = $2, next_attempt_at = NULL,
			breaker_open_until = NULL, park_reason = NULL, updated_at = now()
		WHERE id = $1`, id, jobIDs[0]); err != nil {
		return fmt.Errorf("release fifo head: %w", err)
	}
	return nil
}

// requeueRetries gives each of deliveries, pending a retry this
// transaction planned (and locked), a new job due at its next_attempt_at
// (StatusUpdate.Requeue). One in scheduled (StatusUpdate.RequeueScheduled)
// is scheduled at its time, so it waits in River with no write until then
// and never stands in the way of fresh messages; any other (a FIFO head's,
// or one due within River's scheduler interval) is available at once and
// waits for its time in its worker (NotBefore).
func requeueRetries(ctx context.Context, tx pgx.Tx, ids []string, scheduled map[string]bool, enq Enqueuer) error {
	if _, err := giveOwnJobs(ctx, tx, `d.id = ANY($1) AND d.status = 'pending'`, []any{ids},
		func(q *QueuedDelivery) {
			if scheduled[q.ID] {
				q.ScheduledAt = q.NextAttemptAt
			} else {
				q.NotBefore = q.NextAttemptAt
			}
		}, enq); err != nil {
		return fmt.Errorf("requeue retries: %w", err)
	}
	return nil
}

// AdvanceQueue moves one FIFO endpoint's queue (advanceQueues) with its
// parked head released too: the unparker's pass, for an endpoint whose
// breaker lets traffic through.
func (s *Store) AdvanceQueue(ctx context.Context, endpointID string, enq Enqueuer) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := lockQueues(ctx, tx, []string{endpointID}); err != nil {
			return err
		}
		return s.advanceQueues(ctx, tx, []string{endpointID}, nil, true, enq)
	})
}

// requeueInLine puts deliveries of a FIFO endpoint, failed and locked by
// the caller with the queue, back in line as new attempt series: behind
// every delivery already queued, in the order given, except the one that
// blocks the queue, which keeps its place at the head. So a queue never
// gains a delivery older than the one it may be sending.
func requeueInLine(ctx context.Context, tx pgx.Tx, endpointID string, ids []string) error {
	_, err := tx.Exec(ctx, `
		WITH q AS (SELECT blocked_by, stamp FROM fifo_queues WHERE endpoint_id = $1),
		t AS (
			SELECT r.id, q.blocked_by IS NOT DISTINCT FROM r.id AS head,
				greatest(statement_timestamp(), q.stamp + interval '1 microsecond') + (r.ord - 1) * interval '1 microsecond' AS stamp
			FROM unnest($2::text[]) WITH ORDINALITY AS r(id, ord), q
		), u AS (
			UPDATE deliveries d SET status = 'waiting', job_id = NULL, park_reason = 'fifo',
				series = d.series + 1, series_base = d.attempt_count, next_attempt_at = NULL,
				breaker_open_until = NULL, updated_at = now(),
				created_at = CASE WHEN t.head THEN d.created_at ELSE t.stamp END
			FROM t WHERE d.id = t.id AND d.id = ANY($2)
			RETURNING d.created_at
		)
		UPDATE fifo_queues SET stamp = greatest(stamp, (SELECT max(created_at) FROM u)),
			blocked_by = CASE WHEN blocked_by = ANY($2) THEN NULL ELSE blocked_by END
		WHERE endpoint_id = $1`, customPlan, endpointID, ids)
	if err != nil {
		return fmt.Errorf("requeue fifo deliveries: %w", err)
	}
	return nil
}

// fifoEndpoints returns which of endpointIDs are FIFO endpoints.
func fifoEndpoints(ctx context.Context, tx pgx.Tx, endpointIDs []string) (map[string]bool, error) {
	rows, err := tx.Query(ctx, `SELECT id FROM endpoints WHERE id = ANY($1) AND ordering = 'fifo'`, endpointIDs)
	if err != nil {
		return nil, fmt.Errorf("read endpoint ordering: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read endpoint ordering: %w", err)
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}

// requeueFIFO puts the given failed deliveries, locked by the caller, back
// in their endpoints' queues (requeueInLine) and moves the queues.
// byEndpoint holds each endpoint's deliveries in (created_at, id) order.
func (s *Store) requeueFIFO(ctx context.Context, tx pgx.Tx, byEndpoint map[string][]string, enq Enqueuer) error {
	eps := make([]string, 0, len(byEndpoint))
	for ep := range byEndpoint {
		eps = append(eps, ep)
	}
	if _, err := lockQueues(ctx, tx, eps); err != nil {
		return err
	}
	for _, ep := range eps {
		if err := requeueInLine(ctx, tx, ep, byEndpoint[ep]); err != nil {
			return err
		}
	}
	return s.advanceQueues(ctx, tx, eps, nil, false, enq)
}

// SkipDelivery lets the FIFO queue that a failed delivery blocks (its
// endpoint's on_exhausted is block) go on without it: the delivery stays
// failed, and the next one is sent. Any other delivery gives
// ErrNotSkippable. actor is recorded with the endpoint's events.
func (s *Store) SkipDelivery(ctx context.Context, id, actor string, enq Enqueuer) (Delivery, error) {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var endpointID string
		err := tx.QueryRow(ctx, `SELECT endpoint_id FROM deliveries WHERE id = $1`, id).Scan(&endpointID)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("load delivery: %w", err)
		}
		if _, err := lockQueues(ctx, tx, []string{endpointID}); err != nil {
			return err
		}
		var blocks bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM fifo_queues q WHERE q.endpoint_id = $1 AND q.blocked_by = $2 AND `+blockerFailed+`)`,
			endpointID, id).Scan(&blocks); err != nil {
			return fmt.Errorf("read fifo block: %w", err)
		}
		if !blocks {
			return ErrNotSkippable
		}
		if _, err := tx.Exec(ctx, `UPDATE fifo_queues SET blocked_by = NULL WHERE endpoint_id = $1`, endpointID); err != nil {
			return fmt.Errorf("lift fifo block: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO endpoint_events (endpoint_id, kind, details, actor) VALUES ($1, 'skipped', jsonb_build_object('delivery_id', $2::text), $3)`,
			endpointID, id, actor); err != nil {
			return fmt.Errorf("record skip: %w", err)
		}
		return s.advanceQueues(ctx, tx, []string{endpointID}, nil, false, enq)
	})
	if err != nil {
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotSkippable) {
			return Delivery{}, err
		}
		return Delivery{}, fmt.Errorf("skip delivery: %w", err)
	}
	return s.GetDelivery(ctx, id)
}
