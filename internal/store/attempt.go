package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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
	// Timeout is the timeout the attempt was given; zero for attempts
	// logged before the log recorded it.
	Timeout time.Duration
	// Claim is the run that made the attempt, for the ledger (not
	// stored): it is logged only while that run holds its delivery, as
	// the run's status update applies only then (StatusUpdate.Claim).
	Claim Claim
}

// AttemptFilter narrows a list of attempts. After is where the previous
// page ended (lists run newest first); its zero value starts at the newest.
type AttemptFilter struct {
	DeliveryID     string
	EndpointID     string
	Classification string
	Since, Until   *time.Time
	After          AttemptKey
	Limit          int
}

// AttemptKey is an attempt's place in a newest-first list: attempts are
// ordered by when they were made (the partition key, so a page reads the
// newest partitions' indexes in order and stops), ties broken by id.
type AttemptKey struct {
	At time.Time
	ID int64
}

// Cursor renders the key as a page cursor: the time in Unix microseconds
// (the column's precision) and the id.
func (k AttemptKey) Cursor() string {
	return strconv.FormatInt(k.At.UnixMicro(), 10) + "_" + strconv.FormatInt(k.ID, 10)
}

// ParseAttemptCursor reads a cursor made by AttemptKey.Cursor.
func ParseAttemptCursor(c string) (AttemptKey, bool) {
	at, id, ok := strings.Cut(c, "_")
	if !ok {
		return AttemptKey{}, false
	}
	us, err1 := strconv.ParseInt(at, 10, 64)
	n, err2 := strconv.ParseInt(id, 10, 64)
	if err1 != nil || err2 != nil || us <= 0 || n <= 0 {
		return AttemptKey{}, false
	}
	return AttemptKey{At: time.UnixMicro(us).UTC(), ID: n}, true
}

// clockSkewMargin is how far before its delivery's id time an attempt may
// be stamped: ids are minted on the api's clock, attempts on the
// database's.
const clockSkewMargin = time.Minute

// listAttemptsSQL lists attempts newest first (see AttemptFilter). It is
// planned for its parameters (customPlan): the optional time bounds then
// select the attempt partitions to read, and the order by attempted_at
// lets an endpoint's page read its (endpoint_id, attempted_at) index
// backwards and stop at the limit, where an order by id alone sorted every
// attempt the endpoint ever had.
const listAttemptsSQL = `
		SELECT id, delivery_id, message_id, endpoint_id, attempt_number, attempted_at, duration_ms,
			status_code, coalesce(error_class, ''), classification, response_excerpt, trial, coalesce(timeout_ms, 0)
		FROM delivery_attempts
		WHERE ($1 = '' OR delivery_id = $1) AND ($2 = '' OR endpoint_id = $2)
			AND ($3 = '' OR classification = $3)
			AND ($4::timestamptz IS NULL OR attempted_at >= $4)
			AND ($5::timestamptz IS NULL OR attempted_at < $5)
			AND ($6::timestamptz IS NULL OR (attempted_at, id) < ($6, $7))
		ORDER BY attempted_at DESC, id DESC LIMIT $8`

// ListAttempts returns attempts newest first. A delivery's attempts are
// read from the partitions since its creation only.
func (s *Store) ListAttempts(ctx context.Context, f AttemptFilter) ([]Attempt, error) {
	var afterAt *time.Time
	if !f.After.At.IsZero() {
		afterAt = &f.After.At
	}
	if f.DeliveryID != "" {
		if created, ok := IDTime(f.DeliveryID); ok {
			if since := created.Add(-clockSkewMargin); f.Since == nil || f.Since.Before(since) {
				f.Since = &since
			}
		}
	}
	rows, err := s.pool.Query(ctx, listAttemptsSQL, customPlan,
		f.DeliveryID, f.EndpointID, f.Classification, f.Since, f.Until, afterAt, f.After.ID, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list attempts: %w", err)
	}
	defer rows.Close()
	out := []Attempt{}
	for rows.Next() {
		var a Attempt
		var (
			ms        float64
			timeoutMS int64
		)
		if err := rows.Scan(&a.ID, &a.DeliveryID, &a.MessageID, &a.EndpointID, &a.AttemptNumber, &a.AttemptedAt,
			&ms, &a.StatusCode, &a.ErrorClass, &a.Classification, &a.ResponseExcerpt, &a.Trial, &timeoutMS); err != nil {
			return nil, fmt.Errorf("list attempts: %w", err)
		}
		a.Duration = time.Duration(ms * float64(time.Millisecond))
		a.Timeout = time.Duration(timeoutMS) * time.Millisecond
		out = append(out, a)
	}
	return out, rows.Err()
}
