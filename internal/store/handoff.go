package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// HandOff is a delivery of a message job given a job of its own: one
// that must wait (a snooze), which the message job cannot do for one of
// its deliveries without holding up the others.
type HandOff struct {
	DeliveryID string
	// At is when its job becomes available, on the queue's clock.
	At time.Time
	// Unsettled makes the job check the ledger before it sends.
	Unsettled bool
}

// HandOff gives each delivery that the run c of a job still owns (its
// job_id, pending or waiting, and not claimed by a later run of the job)
// a job of its own, in one transaction, and returns how many it handed
// off. A delivery the ledger settled, or gave a job already (a retry
// queued with its attempt's record), is left as it is, so a handoff whose
// answer was lost can be made again.
func (s *Store) HandOff(ctx context.Context, c Claim, hs []HandOff, enq Enqueuer) (int, error) {
	if len(hs) == 0 {
		return 0, nil
	}
	ids := make([]string, len(hs))
	byID := make(map[string]HandOff, len(hs))
	for i, h := range hs {
		ids[i] = h.DeliveryID
		byID[h.DeliveryID] = h
	}
	var n int
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		n, err = giveOwnJobs(ctx, tx, `d.id = ANY($1) AND d.job_id = $2 AND d.status IN ('pending', 'waiting')
				AND `+claimFence("d", "$2::bigint", "$3::int"),
			[]any{ids, c.JobID, c.Attempt}, func(q *QueuedDelivery) {
				h := byID[q.ID]
				q.ScheduledAt, q.Unsettled = &h.At, h.Unsettled
			}, enq)
		if err != nil {
			return fmt.Errorf("hand off: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// giveOwnJobs locks the deliveries that match where (over deliveryFrom,
// with their message's event type), lets set fill in what their jobs
// carry, queues a job for each and stores it as the delivery's job_id, in
// tx. It returns how many it gave a job.
func giveOwnJobs(ctx context.Context, tx pgx.Tx, where string, args []any, set func(*QueuedDelivery), enq Enqueuer) (int, error) {
	rows, err := tx.Query(ctx, `SELECT `+deliveryColumns+`, m.event_type`+deliveryFrom+`
		JOIN messages m ON m.id = d.message_id
		WHERE `+where+`
		ORDER BY d.id
		FOR UPDATE OF d`, append([]any{customPlan}, args...)...)
	if err != nil {
		return 0, fmt.Errorf("read deliveries: %w", err)
	}
	var batch []QueuedDelivery
	for rows.Next() {
		var q QueuedDelivery
		d, err := scanDelivery(rows, &q.EventType)
		if err != nil {
			rows.Close()
			return 0, fmt.Errorf("read deliveries: %w", err)
		}
		q.Delivery = d
		set(&q)
		batch = append(batch, q)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("read deliveries: %w", err)
	}
	if len(batch) == 0 {
		return 0, nil
	}
	jobIDs, err := enq.EnqueueTx(ctx, tx, batch)
	if err != nil {
		return 0, fmt.Errorf("enqueue: %w", err)
	}
	ids := make([]string, len(batch))
	for i, q := range batch {
		ids[i] = q.ID
	}
	if _, err := tx.Exec(ctx, `
		UPDATE deliveries d SET job_id = j.job_id
		FROM unnest($1::text[], $2::bigint[]) AS j(id, job_id) WHERE d.id = j.id AND d.id = ANY($1)`, customPlan, ids, jobIDs); err != nil {
		return 0, fmt.Errorf("store job ids: %w", err)
	}
	return len(batch), nil
}
