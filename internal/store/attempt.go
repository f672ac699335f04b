package store

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

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

// clockSkewMargin is how far before its delivery's id time an attempt may
// be stamped: ids are minted on the api's clock, attempts on the
// database's.
const clockSkewMargin = time.Minute

// listAttemptsSQL lists attempts newest first (see AttemptFilter). It is
// planned for its parameters (customPlan): the optional time bounds then
// select the attempt partitions to read.
const listAttemptsSQL = `
		SELECT id, delivery_id, message_id, endpoint_id, attempt_number, attempted_at, duration_ms,
			status_code, coalesce(error_class, ''), classification, response_excerpt, trial
		FROM delivery_attempts
		WHERE ($1 = '' OR delivery_id = $1) AND ($2 = '' OR endpoint_id = $2)
			AND ($3 = '' OR classification = $3)
			AND ($4::timestamptz IS NULL OR attempted_at >= $4)
			AND ($5::timestamptz IS NULL OR attempted_at < $5)
			AND id < $6
		ORDER BY id DESC LIMIT $7`

// ListAttempts returns attempts newest first. A delivery's attempts are
// read from the partitions since its creation only.
func (s *Store) ListAttempts(ctx context.Context, f AttemptFilter) ([]Attempt, error) {
	after := f.After
	if after <= 0 {
		after = 1<<63 - 1
	}
	if f.DeliveryID != "" {
		if created, ok := IDTime(f.DeliveryID); ok {
			if since := created.Add(-clockSkewMargin); f.Since == nil || f.Since.Before(since) {
				f.Since = &since
			}
		}
	}
	rows, err := s.pool.Query(ctx, listAttemptsSQL, customPlan,
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
