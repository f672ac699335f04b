package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
)

// Delivery is one message on its way to one endpoint.
type Delivery struct {
	ID               string
	MessageID        string
	EndpointID       string
	TenantID         string
	Status           string
	AttemptCount     int
	Series           int
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
	d.attempt_count, d.series, d.job_id, d.last_attempt_at, d.next_attempt_at, d.last_status_code,
	d.last_error, d.breaker_open_until, d.delivered_at, d.created_at, d.updated_at`

const deliveryFrom = ` FROM deliveries d LEFT JOIN river_job j ON j.id = d.job_id `

func scanDelivery(row pgx.Row) (Delivery, error) {
	var d Delivery
	err := row.Scan(&d.ID, &d.MessageID, &d.EndpointID, &d.TenantID, &d.Status, &d.AttemptCount, &d.Series,
		&d.JobID, &d.LastAttemptAt, &d.NextAttemptAt, &d.LastStatusCode, &d.LastError,
		&d.BreakerOpenUntil, &d.DeliveredAt, &d.CreatedAt, &d.UpdatedAt)
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
		jobIDs, err := enq.EnqueueTx(ctx, tx, msg, []Delivery{d})
		if err != nil {
			return fmt.Errorf("enqueue retry: %w", err)
		}
		_, err = tx.Exec(ctx, `
			UPDATE deliveries SET status = 'pending', series = $2, job_id = $3, next_attempt_at = NULL,
				updated_at = now()
			WHERE id = $1`, id, d.Series, jobIDs[0])
		if err != nil {
			return fmt.Errorf("requeue delivery: %w", err)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotRetryable) {
			return Delivery{}, err
		}
		return Delivery{}, fmt.Errorf("retry delivery: %w", err)
	}
	return s.GetDelivery(ctx, id)
}

func (s *Store) messageTx(ctx context.Context, tx pgx.Tx, id string) (Message, error) {
	var m Message
	var payload string
	err := tx.QueryRow(ctx, `SELECT id, tenant_id, event_type, payload::text, created_at FROM messages WHERE id = $1`, id).
		Scan(&m.ID, &m.TenantID, &m.EventType, &payload, &m.CreatedAt)
	if err != nil {
		return Message{}, fmt.Errorf("load message: %w", err)
	}
	m.Payload = []byte(payload)
	return m, nil
}

// Attempt is one row of the delivery log.
type Attempt struct {
	ID              int64
	DeliveryID      string
	MessageID       string
	EndpointID      string
	AttemptNumber   int
	AttemptedAt     time.Time
	Duration        time.Duration
	StatusCode      *int
	ErrorClass      string
	Classification  string
	ResponseExcerpt string
	Trial           bool
}

// AttemptFilter narrows a list of attempts. After is the id of the last
// attempt of the previous page (lists run newest first).
type AttemptFilter struct {
	DeliveryID     string
	EndpointID     string
	Classification string
	Since, Until   *time.Time
	After          int64
	Limit          int
}

// ListAttempts returns attempts newest first.
func (s *Store) ListAttempts(ctx context.Context, f AttemptFilter) ([]Attempt, error) {
	after := f.After
	if after <= 0 {
		after = 1<<63 - 1
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, delivery_id, message_id, endpoint_id, attempt_number, attempted_at, duration_ms,
			status_code, coalesce(error_class, ''), classification, response_excerpt, trial
		FROM delivery_attempts
		WHERE ($1 = '' OR delivery_id = $1) AND ($2 = '' OR endpoint_id = $2)
			AND ($3 = '' OR classification = $3)
			AND ($4::timestamptz IS NULL OR attempted_at >= $4)
			AND ($5::timestamptz IS NULL OR attempted_at < $5)
			AND id < $6
		ORDER BY id DESC LIMIT $7`,
		f.DeliveryID, f.EndpointID, f.Classification, f.Since, f.Until, after, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list attempts: %w", err)
	}
	defer rows.Close()
	out := []Attempt{}
	for rows.Next() {
		var a Attempt
		var ms float64
		if err := rows.Scan(&a.ID, &a.DeliveryID, &a.MessageID, &a.EndpointID, &a.AttemptNumber, &a.AttemptedAt,
			&ms, &a.StatusCode, &a.ErrorClass, &a.Classification, &a.ResponseExcerpt, &a.Trial); err != nil {
			return nil, fmt.Errorf("list attempts: %w", err)
		}
		a.Duration = time.Duration(ms * float64(time.Millisecond))
		out = append(out, a)
	}
	return out, rows.Err()
}

// AttemptCursor renders an attempt id as a page cursor.
func AttemptCursor(id int64) string { return strconv.FormatInt(id, 10) }

// StatusUpdate changes a delivery's status after an attempt or a refusal.
// It applies only to the delivery's current attempt series, never changes a
// delivered delivery, and a waiting status only replaces pending or waiting.
type StatusUpdate struct {
	DeliveryID       string
	Series           int
	Status           string
	AttemptCount     int
	LastAttemptAt    *time.Time
	NextAttemptAt    *time.Time
	LastStatusCode   *int
	LastError        *string
	BreakerOpenUntil *time.Time
}

// RecordLedger writes a batch of attempts and status updates in one
// transaction: the attempts by COPY, the updates by one UPDATE over arrays.
func (s *Store) RecordLedger(ctx context.Context, attempts []Attempt, updates []StatusUpdate) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if len(attempts) > 0 {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"delivery_attempts"},
				[]string{"delivery_id", "message_id", "endpoint_id", "attempt_number", "attempted_at", "duration_ms",
					"status_code", "error_class", "classification", "response_excerpt", "trial"},
				pgx.CopyFromSlice(len(attempts), func(i int) ([]any, error) {
					a := attempts[i]
					var ec *string
					if a.ErrorClass != "" {
						ec = &a.ErrorClass
					}
					return []any{a.DeliveryID, a.MessageID, a.EndpointID, a.AttemptNumber, a.AttemptedAt,
						float64(a.Duration) / float64(time.Millisecond), a.StatusCode, ec, a.Classification,
						a.ResponseExcerpt, a.Trial}, nil
				}))
			if err != nil {
				return fmt.Errorf("copy attempts: %w", err)
			}
		}
		updates = mergeUpdates(updates)
		if len(updates) == 0 {
			return nil
		}
		n := len(updates)
		var (
			ids       = make([]string, n)
			series    = make([]int32, n)
			statuses  = make([]string, n)
			counts    = make([]int32, n)
			lastAt    = make([]*time.Time, n)
			nextAt    = make([]*time.Time, n)
			codes     = make([]*int32, n)
			lastErrs  = make([]*string, n)
			openUntil = make([]*time.Time, n)
		)
		for i, u := range updates {
			ids[i], series[i], statuses[i], counts[i] = u.DeliveryID, int32(u.Series), u.Status, int32(u.AttemptCount)
			lastAt[i], nextAt[i], lastErrs[i], openUntil[i] = u.LastAttemptAt, u.NextAttemptAt, u.LastError, u.BreakerOpenUntil
			if u.LastStatusCode != nil {
				c := int32(*u.LastStatusCode)
				codes[i] = &c
			}
		}
		_, err := tx.Exec(ctx, `
			UPDATE deliveries d SET
				status = u.status,
				attempt_count = greatest(d.attempt_count, u.attempt_count),
				last_attempt_at = coalesce(u.last_attempt_at, d.last_attempt_at),
				next_attempt_at = CASE WHEN u.status = 'pending' THEN u.next_attempt_at ELSE NULL END,
				last_status_code = CASE WHEN u.last_attempt_at IS NULL THEN d.last_status_code ELSE u.last_status_code END,
				last_error = CASE WHEN u.last_attempt_at IS NULL THEN coalesce(u.last_error, d.last_error) ELSE u.last_error END,
				breaker_open_until = CASE WHEN u.status = 'waiting' THEN u.breaker_open_until ELSE NULL END,
				delivered_at = CASE WHEN u.status = 'delivered' THEN coalesce(u.last_attempt_at, now()) ELSE d.delivered_at END,
				updated_at = now()
			FROM unnest($1::text[], $2::int[], $3::text[], $4::int[], $5::timestamptz[],
				$6::timestamptz[], $7::int[], $8::text[], $9::timestamptz[])
				AS u(id, series, status, attempt_count, last_attempt_at, next_attempt_at,
					last_status_code, last_error, breaker_open_until)
			WHERE d.id = u.id AND d.series = u.series AND d.status <> 'delivered'
				AND (u.status <> 'waiting' OR d.status IN ('pending', 'waiting'))`,
			ids, series, statuses, counts, lastAt, nextAt, codes, lastErrs, openUntil)
		if err != nil {
			return fmt.Errorf("update delivery statuses: %w", err)
		}
		return nil
	})
}

// mergeUpdates folds the updates of one delivery within a batch into one, in
// order, by the same rules the UPDATE applies across batches: a newer series
// replaces an older one, nothing replaces delivered, waiting only replaces
// pending or waiting, and the attempt fields come from the latest update
// that carries an attempt.
func mergeUpdates(updates []StatusUpdate) []StatusUpdate {
	index := make(map[string]int, len(updates))
	out := make([]StatusUpdate, 0, len(updates))
	for _, u := range updates {
		i, ok := index[u.DeliveryID]
		if !ok || u.Series > out[i].Series {
			if !ok {
				index[u.DeliveryID] = len(out)
				out = append(out, u)
			} else {
				out[i] = u
			}
			continue
		}
		m := &out[i]
		if u.Series < m.Series {
			continue
		}
		if u.LastAttemptAt != nil {
			m.AttemptCount = max(m.AttemptCount, u.AttemptCount)
			m.LastAttemptAt, m.LastStatusCode, m.LastError = u.LastAttemptAt, u.LastStatusCode, u.LastError
		}
		if m.Status == DeliveryDelivered || (u.Status == DeliveryWaiting && m.Status != DeliveryPending && m.Status != DeliveryWaiting) {
			continue
		}
		m.Status, m.NextAttemptAt, m.BreakerOpenUntil = u.Status, u.NextAttemptAt, u.BreakerOpenUntil
	}
	return out
}

// DeliveryProgress returns a delivery's stored status and series: what a
// re-run job checks so it does not resend what an earlier run already
// recorded.
func (s *Store) DeliveryProgress(ctx context.Context, id string) (status string, series int, err error) {
	err = s.pool.QueryRow(ctx, `SELECT status, series FROM deliveries WHERE id = $1`, id).Scan(&status, &series)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, ErrNotFound
	}
	if err != nil {
		return "", 0, fmt.Errorf("load delivery progress: %w", err)
	}
	return status, series, nil
}
