package store

import (
	"context"
	"errors"
	"fmt"
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
}

// DeliveryProgress returns a delivery's Progress: what a re-run job checks
// so it does not resend what an earlier run already recorded, nor send a
// delivery another job (or the unparker) owns now.
func (s *Store) DeliveryProgress(ctx context.Context, id string) (Progress, error) {
	var p Progress
	err := s.pool.QueryRow(ctx, `SELECT status, series, job_id FROM deliveries WHERE id = $1`, id).Scan(&p.Status, &p.Series, &p.JobID)
	if errors.Is(err, pgx.ErrNoRows) {
		return Progress{}, ErrNotFound
	}
	if err != nil {
		return Progress{}, fmt.Errorf("load delivery progress: %w", err)
	}
	return p, nil
}
