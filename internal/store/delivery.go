package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Delivery statuses. DeliveryDelivering is never stored: it is derived when a
// pending or waiting delivery's River job is running.
const (
	DeliveryPending    = "pending"
	DeliveryDelivering = "delivering"
	DeliveryDelivered  = "delivered"
	DeliveryFailed     = "failed"
	DeliveryWaiting    = "waiting"
	DeliveryHeld       = "held"
	// DeliveryExpired is final: retention reached the delivery, or its
	// payload, before it was delivered or failed (last_error says which).
	DeliveryExpired = "expired"
)

// Delivery is one message on its way to one endpoint.
type Delivery struct {
	ID           string
	MessageID    string
	EndpointID   string
	TenantID     string
	Status       string
	AttemptCount int
	Series       int
	// SeriesBase is AttemptCount when the current series began.
	SeriesBase       int
	JobID            *int64
	LastAttemptAt    *time.Time
	NextAttemptAt    *time.Time
	LastStatusCode   *int
	LastError        *string
	BreakerOpenUntil *time.Time
	DeliveredAt      *time.Time
	CreatedAt        time.Time
	UpdatedAt        time.Time
}

const deliveryColumns = `d.id, d.message_id, d.endpoint_id, d.tenant_id,
	CASE WHEN d.status IN ('pending', 'waiting') AND j.state = 'running' THEN 'delivering' ELSE d.status END,
	d.attempt_count, d.series, d.series_base, d.job_id, d.last_attempt_at, d.next_attempt_at, d.last_status_code,
	d.last_error, d.breaker_open_until, d.delivered_at, d.created_at, d.updated_at`

const deliveryFrom = ` FROM deliveries d LEFT JOIN river_job j ON j.id = d.job_id `

func scanDelivery(row pgx.Row, extra ...any) (Delivery, error) {
	var d Delivery
	err := row.Scan(append([]any{&d.ID, &d.MessageID, &d.EndpointID, &d.TenantID, &d.Status, &d.AttemptCount, &d.Series, &d.SeriesBase,
		&d.JobID, &d.LastAttemptAt, &d.NextAttemptAt, &d.LastStatusCode, &d.LastError,
		&d.BreakerOpenUntil, &d.DeliveredAt, &d.CreatedAt, &d.UpdatedAt}, extra...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return Delivery{}, ErrNotFound
	}
	return d, err
}

// GetDelivery returns one delivery.
func (s *Store) GetDelivery(ctx context.Context, id string) (Delivery, error) {
	d, err := scanDelivery(s.pool.QueryRow(ctx, `SELECT `+deliveryColumns+deliveryFrom+`WHERE d.id = $1`, id))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Delivery{}, fmt.Errorf("load delivery: %w", err)
	}
	return d, err
}

func (s *Store) listDeliveries(ctx context.Context, where string, args ...any) ([]Delivery, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+deliveryColumns+deliveryFrom+`WHERE `+where+` ORDER BY d.id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	defer rows.Close()
	out := []Delivery{}
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, fmt.Errorf("list deliveries: %w", err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// ErrNotRetryable is returned by RetryDelivery for a delivery that is not failed.
var ErrNotRetryable = errors.New("only a failed delivery can be retried")

// ErrPayloadExpired is returned by RetryDelivery when payload retention
// has dropped the message's payload: there is nothing left to send.
var ErrPayloadExpired = errors.New("the message's payload has expired")

// RetryDelivery re-queues a failed delivery as a new attempt series.
func (s *Store) RetryDelivery(ctx context.Context, id string, enq Enqueuer) (Delivery, error) {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		d, err := scanDelivery(tx.QueryRow(ctx, `SELECT `+deliveryColumns+deliveryFrom+`WHERE d.id = $1 FOR UPDATE OF d`, id))
		if err != nil {
			return err
		}
		if d.Status != DeliveryFailed {
			return ErrNotRetryable
		}
		msg, err := s.messageTx(ctx, tx, d.MessageID)
		if err != nil {
			return err
		}
		fifo, err := fifoEndpoints(ctx, tx, []string{d.EndpointID})
		if err != nil {
			return err
		}
		if fifo[d.EndpointID] {
			return s.requeueFIFO(ctx, tx, map[string][]string{d.EndpointID: {d.ID}}, enq)
		}
		d.Series++
		d.SeriesBase = d.AttemptCount
		jobIDs, err := enq.EnqueueTx(ctx, tx, queueAll(msg, []Delivery{d}))
		if err != nil {
			return fmt.Errorf("enqueue retry: %w", err)
		}
		_, err = tx.Exec(ctx, `
			UPDATE deliveries SET status = 'pending', series = $2, series_base = attempt_count, job_id = $3,
				next_attempt_at = NULL, updated_at = now()
			WHERE id = $1`, id, d.Series, jobIDs[0])
		if err != nil {
			return fmt.Errorf("requeue delivery: %w", err)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotRetryable) || errors.Is(err, ErrPayloadExpired) {
			return Delivery{}, err
		}
		return Delivery{}, fmt.Errorf("retry delivery: %w", err)
	}
	return s.GetDelivery(ctx, id)
}

func (s *Store) messageTx(ctx context.Context, tx pgx.Tx, id string) (Message, error) {
	var m Message
	var payload *string
	err := tx.QueryRow(ctx, `
		SELECT m.id, m.tenant_id, m.event_type, p.payload::text, m.created_at
		FROM messages m LEFT JOIN message_payloads p ON p.message_id = m.id WHERE m.id = $1`, id).
		Scan(&m.ID, &m.TenantID, &m.EventType, &payload, &m.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		// Retention dropped the message after its delivery was read.
		return Message{}, ErrPayloadExpired
	}
	if err != nil {
		return Message{}, fmt.Errorf("load message: %w", err)
	}
	if payload == nil {
		return Message{}, ErrPayloadExpired
	}
	m.Payload = []byte(*payload)
	return m, nil
}

// Progress is what a re-run job checks before sending: the delivery's
// stored status and series, and the job that owns it (nil while parked).
type Progress struct {
	Status string
	Series int
	JobID  *int64
	// AttemptCount is the attempts recorded in every series, SeriesBase
	// its value when the current series began: the next attempt's number
	// and its place in the retry schedule follow from them, never from
	// how often a job ran.
	AttemptCount int
	SeriesBase   int
}

// DeliveryProgress returns a delivery's Progress: what a re-run job checks
// so it does not resend what an earlier run already recorded, nor send a
// delivery another job (or the unparker) owns now.
func (s *Store) DeliveryProgress(ctx context.Context, id string) (Progress, error) {
	var p Progress
	err := s.pool.QueryRow(ctx, `SELECT status, series, job_id, attempt_count, series_base FROM deliveries WHERE id = $1`, id).
		Scan(&p.Status, &p.Series, &p.JobID, &p.AttemptCount, &p.SeriesBase)
	if errors.Is(err, pgx.ErrNoRows) {
		return Progress{}, ErrNotFound
	}
	if err != nil {
		return Progress{}, fmt.Errorf("load delivery progress: %w", err)
	}
	return p, nil
}

// requeueFIFOOf puts the deliveries of queue whose endpoints are FIFO back
// in their queues (requeueFIFO) and returns the others.
func (s *Store) requeueFIFOOf(ctx context.Context, tx pgx.Tx, queue []QueuedDelivery, enq Enqueuer) ([]QueuedDelivery, error) {
	eps := make([]string, 0, len(queue))
	for _, q := range queue {
		eps = append(eps, q.EndpointID)
	}
	fifo, err := fifoEndpoints(ctx, tx, eps)
	if err != nil || len(fifo) == 0 {
		return queue, err
	}
	var (
		rest    []QueuedDelivery
		ordered []QueuedDelivery
	)
	for _, q := range queue {
		if fifo[q.EndpointID] {
			ordered = append(ordered, q)
		} else {
			rest = append(rest, q)
		}
	}
	slices.SortFunc(ordered, func(a, b QueuedDelivery) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	byEndpoint := make(map[string][]string)
	for _, q := range ordered {
		byEndpoint[q.EndpointID] = append(byEndpoint[q.EndpointID], q.ID)
	}
	return rest, s.requeueFIFO(ctx, tx, byEndpoint, enq)
}

// RetryDeliveries re-queues failed deliveries as RetryDelivery does, all
// in one transaction: one statement locks them, one reads whether their
// payloads remain, one River insert queues them and one statement updates
// them. It answers each id in order: nil when queued, else why not
// (ErrNotFound, also for a delivery of a tenant tenants does not hold;
// ErrNotRetryable; ErrPayloadExpired). An id given twice
// is answered the same both times. The error is for the transaction as a
// whole, when nothing was queued.
func (s *Store) RetryDeliveries(ctx context.Context, ids []string, tenants Tenants, enq Enqueuer) ([]error, error) {
	out := make([]error, len(ids))
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		for i := range out {
			out[i] = ErrNotFound
		}
		// In id order, so two bulk retries lock rows in the same order.
		rows, err := tx.Query(ctx, `SELECT `+deliveryColumns+deliveryFrom+`
			WHERE d.id = ANY($1) AND ($3::boolean OR d.tenant_id = $2) ORDER BY d.id FOR UPDATE OF d`, customPlan, ids, tenants.id, tenants.all)
		if err != nil {
			return fmt.Errorf("lock deliveries: %w", err)
		}
		found := map[string]Delivery{}
		for rows.Next() {
			d, err := scanDelivery(rows)
			if err != nil {
				rows.Close()
				return fmt.Errorf("lock deliveries: %w", err)
			}
			found[d.ID] = d
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("lock deliveries: %w", err)
		}
		var msgIDs []string
		for _, d := range found {
			if d.Status == DeliveryFailed {
				msgIDs = append(msgIDs, d.MessageID)
			}
		}
		// The messages whose payload is still there, with their event type.
		eventTypes := map[string]string{}
		if len(msgIDs) > 0 {
			rows, err := tx.Query(ctx, `
				SELECT m.id, m.event_type FROM messages m JOIN message_payloads p ON p.message_id = m.id
				WHERE m.id = ANY($1)`, customPlan, msgIDs)
			if err != nil {
				return fmt.Errorf("load messages: %w", err)
			}
			for rows.Next() {
				var id, et string
				if err := rows.Scan(&id, &et); err != nil {
					rows.Close()
					return fmt.Errorf("load messages: %w", err)
				}
				eventTypes[id] = et
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return fmt.Errorf("load messages: %w", err)
			}
		}
		var queue []QueuedDelivery
		queued := map[string]bool{}
		for i, id := range ids {
			d, ok := found[id]
			switch {
			case !ok:
				continue
			case d.Status != DeliveryFailed:
				out[i] = ErrNotRetryable
				continue
			}
			et, ok := eventTypes[d.MessageID]
			if !ok {
				out[i] = ErrPayloadExpired
				continue
			}
			out[i] = nil
			if queued[id] {
				continue
			}
			queued[id] = true
			d.Series++
			d.SeriesBase = d.AttemptCount
			queue = append(queue, QueuedDelivery{Delivery: d, EventType: et})
		}
		if len(queue) == 0 {
			return nil
		}
		if queue, err = s.requeueFIFOOf(ctx, tx, queue, enq); err != nil || len(queue) == 0 {
			return err
		}
		jobIDs, err := enq.EnqueueTx(ctx, tx, queue)
		if err != nil {
			return fmt.Errorf("enqueue retries: %w", err)
		}
		qids := make([]string, len(queue))
		series := make([]int32, len(queue))
		for i, q := range queue {
			qids[i], series[i] = q.ID, int32(q.Series)
		}
		_, err = tx.Exec(ctx, `
			UPDATE deliveries d SET status = 'pending', series = u.series, series_base = d.attempt_count, job_id = u.job_id,
				next_attempt_at = NULL, updated_at = now()
			FROM unnest($1::text[], $2::int[], $3::bigint[]) AS u(id, series, job_id)
			WHERE d.id = u.id`, customPlan, qids, series, jobIDs)
		if err != nil {
			return fmt.Errorf("requeue deliveries: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("retry deliveries: %w", err)
	}
	return out, nil
}
