package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/internal/breaker"
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

// StatusUpdate changes a delivery's status after an attempt or a refusal.
// It applies only to the delivery's current attempt series, never changes a
// delivered or expired delivery, and a waiting status only replaces pending
// or waiting.
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
	// Park, with status waiting, detaches the delivery from its job: it
	// waits without one until ReleaseParked queues it again.
	Park bool
	// JobID is the job that made the update (0: none known). A park
	// applies only while that job owns the delivery (its job_id), so a
	// stale job can never detach the job that owns it now.
	JobID int64
}

// AuthRule is a class's 401/403 auto-disable rule.
type AuthRule struct {
	// After is the number of consecutive auth failures that disables.
	After int
	// MinDuration is how long the streak must span at least.
	MinDuration time.Duration
}

// LedgerBatch is what one ledger flush writes.
type LedgerBatch struct {
	Attempts []Attempt
	Updates  []StatusUpdate
	// AuthRules holds the auto-disable rule of each endpoint with an
	// attempt in the batch; endpoints without one are never disabled.
	AuthRules map[string]AuthRule
}

// AutoDisable is an endpoint the ledger disabled for a wall of auth
// failures.
type AutoDisable struct {
	EndpointID string
	TenantID   string
	URL        string
	EventID    int64
	Failures   int
	FirstAt    time.Time
	LastAt     time.Time
}

// LedgerResult is what a ledger flush did beyond writing.
type LedgerResult struct {
	// Disabled lists the endpoints disabled for auth failures.
	Disabled []AutoDisable
	// HoldRefused names deliveries whose held status was not applied
	// because their endpoint is enabled again: their jobs must run again.
	HoldRefused map[string]bool
}

// AfterDisable runs inside the ledger's transaction for the endpoints it
// just disabled (to queue their operational webhooks atomically).
type AfterDisable func(ctx context.Context, tx pgx.Tx, disabled []AutoDisable) error

// RecordLedger writes a batch of attempts and status updates in one
// transaction (see RecordBatch), without auth rules.
func (s *Store) RecordLedger(ctx context.Context, attempts []Attempt, updates []StatusUpdate) error {
	_, err := s.RecordBatch(ctx, LedgerBatch{Attempts: attempts, Updates: updates}, nil)
	return err
}

// DefaultAuthRule is the auto-disable rule of an endpoint whose class
// could not be read.
var DefaultAuthRule = AuthRule{After: 10, MinDuration: 5 * time.Minute}

// RecordBatch writes a ledger batch in one transaction: the attempts by
// COPY, the status updates by one UPDATE over arrays, and the auth-failure
// streaks of the batch's endpoints; an endpoint whose streak reaches its
// rule is disabled with reason auth_failures in the same transaction, so
// each attempt counts exactly once. after (may be nil) runs in the
// transaction for the endpoints disabled.
func (s *Store) RecordBatch(ctx context.Context, b LedgerBatch, after AfterDisable) (LedgerResult, error) {
	attempts, updates := b.Attempts, b.Updates
	var res LedgerResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		res = LedgerResult{}
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
		var err error
		if res.Disabled, err = applyAuthStreaks(ctx, tx, attempts, b.AuthRules); err != nil {
			return err
		}
		if len(res.Disabled) > 0 && after != nil {
			if err := after(ctx, tx, res.Disabled); err != nil {
				return err
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
			parks     = make([]bool, n)
			jobs      = make([]*int64, n)
		)
		for i, u := range updates {
			parks[i] = u.Park && u.Status == DeliveryWaiting
			if u.JobID != 0 {
				jobs[i] = &u.JobID
			}
			ids[i], series[i], statuses[i], counts[i] = u.DeliveryID, int32(u.Series), u.Status, int32(u.AttemptCount)
			lastAt[i], nextAt[i], lastErrs[i], openUntil[i] = u.LastAttemptAt, u.NextAttemptAt, u.LastError, u.BreakerOpenUntil
			if u.LastStatusCode != nil {
				c := int32(*u.LastStatusCode)
				codes[i] = &c
			}
		}
		// A hold applies only while the endpoint is still disabled (the
		// endpoint row is share-locked against a concurrent enable);
		// otherwise the caller runs the job again.
		rows, err := tx.Query(ctx, `
			UPDATE deliveries d SET
				status = u.status,
				attempt_count = greatest(d.attempt_count, u.attempt_count),
				last_attempt_at = coalesce(u.last_attempt_at, d.last_attempt_at),
				next_attempt_at = CASE WHEN u.status = 'pending' THEN u.next_attempt_at ELSE NULL END,
				last_status_code = CASE WHEN u.last_attempt_at IS NULL THEN d.last_status_code ELSE u.last_status_code END,
				last_error = CASE WHEN u.last_attempt_at IS NULL THEN coalesce(u.last_error, d.last_error) ELSE u.last_error END,
				breaker_open_until = CASE WHEN u.status = 'waiting' THEN u.breaker_open_until ELSE NULL END,
				delivered_at = CASE WHEN u.status = 'delivered' THEN coalesce(u.last_attempt_at, now()) ELSE d.delivered_at END,
				job_id = CASE WHEN u.park THEN NULL ELSE d.job_id END,
				updated_at = now()
			FROM unnest($1::text[], $2::int[], $3::text[], $4::int[], $5::timestamptz[],
				$6::timestamptz[], $7::int[], $8::text[], $9::timestamptz[], $10::bool[], $11::bigint[])
				AS u(id, series, status, attempt_count, last_attempt_at, next_attempt_at,
					last_status_code, last_error, breaker_open_until, park, job_id)
			WHERE d.id = u.id AND d.series = u.series AND d.status NOT IN ('delivered', 'expired')
				AND (u.status <> 'waiting' OR d.status IN ('pending', 'waiting'))
				AND (NOT u.park OR u.job_id IS NULL OR d.job_id = u.job_id)
				AND (u.status <> 'held' OR EXISTS (
					SELECT 1 FROM endpoints e WHERE e.id = d.endpoint_id AND e.status = 'disabled' FOR SHARE))
			RETURNING d.id, u.status`, customPlan,
			ids, series, statuses, counts, lastAt, nextAt, codes, lastErrs, openUntil, parks, jobs)
		if err != nil {
			return fmt.Errorf("update delivery statuses: %w", err)
		}
		held := map[string]bool{}
		for rows.Next() {
			var id, status string
			if err := rows.Scan(&id, &status); err != nil {
				rows.Close()
				return fmt.Errorf("update delivery statuses: %w", err)
			}
			if status == DeliveryHeld {
				held[id] = true
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("update delivery statuses: %w", err)
		}
		for _, u := range updates {
			if u.Status == DeliveryHeld && !held[u.DeliveryID] {
				if res.HoldRefused == nil {
					res.HoldRefused = map[string]bool{}
				}
				res.HoldRefused[u.DeliveryID] = true
			}
		}
		return nil
	})
	if err != nil {
		return LedgerResult{}, err
	}
	return res, nil
}

// mergeUpdates folds the updates of one delivery within a batch into one, in
// order, by the same rules the UPDATE applies across batches: a newer series
// replaces an older one, nothing replaces delivered or expired, waiting only replaces
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
		if m.Status == DeliveryDelivered || m.Status == DeliveryExpired || (u.Status == DeliveryWaiting && m.Status != DeliveryPending && m.Status != DeliveryWaiting) {
			continue
		}
		m.Status, m.NextAttemptAt, m.BreakerOpenUntil, m.Park, m.JobID = u.Status, u.NextAttemptAt, u.BreakerOpenUntil, u.Park, u.JobID
	}
	return out
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

// authSummary is one endpoint's auth outcomes within a batch, in order.
type authSummary struct {
	reset   bool // a non-auth outcome happened: the streak restarts after it
	count   int  // auth failures after the last reset (or all, without one)
	firstAt time.Time
	lastAt  time.Time
}

// applyAuthStreaks folds the batch's attempts into the endpoints' auth
// streaks and disables the endpoints whose streak reached their rule. A
// blocked attempt (refused by the SSRF guard) says nothing of credentials
// and leaves the streak alone; any other non-auth outcome resets it.
func applyAuthStreaks(ctx context.Context, tx pgx.Tx, attempts []Attempt, rules map[string]AuthRule) ([]AutoDisable, error) {
	sums := map[string]*authSummary{}
	var order []string
	for _, a := range attempts {
		if a.Classification == "blocked" {
			continue
		}
		sm := sums[a.EndpointID]
		if sm == nil {
			sm = &authSummary{}
			sums[a.EndpointID] = sm
			order = append(order, a.EndpointID)
		}
		if a.Classification != "auth_failure" {
			sm.reset, sm.count, sm.firstAt, sm.lastAt = true, 0, time.Time{}, time.Time{}
			continue
		}
		if sm.count == 0 {
			sm.firstAt = a.AttemptedAt
		}
		sm.count++
		sm.lastAt = a.AttemptedAt
	}
	var (
		resetIDs      []string
		ids           []string
		resets        []bool
		counts        []int32
		firsts, lasts []time.Time
	)
	for _, id := range order {
		sm := sums[id]
		if sm.count == 0 {
			resetIDs = append(resetIDs, id)
			continue
		}
		ids, resets, counts = append(ids, id), append(resets, sm.reset), append(counts, int32(sm.count))
		firsts, lasts = append(firsts, sm.firstAt), append(lasts, sm.lastAt)
	}
	if len(resetIDs) > 0 {
		// Touches only endpoints with a streak running: healthy ones cost
		// an index probe, no write.
		if _, err := tx.Exec(ctx, `UPDATE auth_streaks SET failures = 0, first_at = NULL WHERE endpoint_id = ANY($1) AND failures > 0`, customPlan, resetIDs); err != nil {
			return nil, fmt.Errorf("reset auth streaks: %w", err)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	// One statement per kind of summary: a batch that saw a reset replaces
	// the streak, one that did not extends it.
	var due []AutoDisable
	for _, restart := range []bool{true, false} {
		var sIDs []string
		var sCounts []int32
		var sFirsts, sLasts []time.Time
		for i := range ids {
			if resets[i] == restart {
				sIDs, sCounts, sFirsts, sLasts = append(sIDs, ids[i]), append(sCounts, counts[i]), append(sFirsts, firsts[i]), append(sLasts, lasts[i])
			}
		}
		if len(sIDs) == 0 {
			continue
		}
		onConflict := `failures = a.failures + EXCLUDED.failures,
			first_at = CASE WHEN a.failures = 0 THEN EXCLUDED.first_at ELSE a.first_at END`
		if restart {
			onConflict = `failures = EXCLUDED.failures, first_at = EXCLUDED.first_at`
		}
		rows, err := tx.Query(ctx, `
			INSERT INTO auth_streaks AS a (endpoint_id, failures, first_at, last_at)
			SELECT * FROM unnest($1::text[], $2::int[], $3::timestamptz[], $4::timestamptz[]) ORDER BY 1
			ON CONFLICT (endpoint_id) DO UPDATE SET `+onConflict+`, last_at = EXCLUDED.last_at
			RETURNING endpoint_id, failures, first_at, last_at`,
			sIDs, sCounts, sFirsts, sLasts)
		if err != nil {
			return nil, fmt.Errorf("count auth failures: %w", err)
		}
		for rows.Next() {
			var d AutoDisable
			if err := rows.Scan(&d.EndpointID, &d.Failures, &d.FirstAt, &d.LastAt); err != nil {
				rows.Close()
				return nil, fmt.Errorf("count auth failures: %w", err)
			}
			rule, ok := rules[d.EndpointID]
			if ok && rule.After > 0 && d.Failures >= rule.After && d.LastAt.Sub(d.FirstAt) >= rule.MinDuration {
				due = append(due, d)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("count auth failures: %w", err)
		}
	}
	var disabled []AutoDisable
	for _, d := range due {
		details, _ := json.Marshal(map[string]any{"failures": d.Failures, "first_at": d.FirstAt, "last_at": d.LastAt})
		err := tx.QueryRow(ctx, `
			WITH u AS (
				UPDATE endpoints SET status = 'disabled', disabled_reason = 'auth_failures', updated_at = now()
				WHERE id = $1 AND status = 'enabled' AND deleted_at IS NULL
				RETURNING id, tenant_id, url
			), ev AS (
				INSERT INTO endpoint_events (endpoint_id, kind, reason, details, actor)
				SELECT id, 'disabled', 'auth_failures', $2, 'dispatcher' FROM u
				RETURNING id
			), n AS (SELECT pg_notify('`+EndpointChannel+`', id) FROM u)
			SELECT u.tenant_id, u.url, (SELECT id FROM ev), (SELECT count(*) FROM n) FROM u`,
			d.EndpointID, details).Scan(&d.TenantID, &d.URL, &d.EventID, new(int))
		if errors.Is(err, pgx.ErrNoRows) {
			continue // already disabled
		}
		if err != nil {
			return nil, fmt.Errorf("disable endpoint: %w", err)
		}
		disabled = append(disabled, d)
	}
	return disabled, nil
}

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
		e, err = updateEndpointTx(ctx, tx, id, `status = 'enabled', disabled_reason = NULL`)
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
		return nil
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

// releaseChunk gives up to limit of an endpoint's held or parked deliveries,
// oldest first, a job each and makes them pending again. Rows another
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
			breaker_open_until = NULL, updated_at = now()
		FROM unnest($1::text[], $2::bigint[]) AS j(id, job_id) WHERE d.id = j.id AND `+which, customPlan, ids, jobIDs)
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
			(SELECT coalesce(sum(b.failures), 0) FROM breaker_buckets b WHERE b.endpoint_id = s.endpoint_id AND b.generation = s.generation)
		FROM p JOIN breaker_states s ON s.endpoint_id = p.endpoint_id`, maxTrialSlots, ids)
	if err != nil {
		return nil, fmt.Errorf("list parked endpoints: %w", err)
	}
	defer rows.Close()
	var out []ParkedEndpoint
	for rows.Next() {
		var pe ParkedEndpoint
		var now time.Time
		id, b, err := scanBreaker(rows, &pe.Parked, &now, &pe.TrialInFlight, &pe.Queued, &pe.Failures)
		if err != nil {
			return nil, fmt.Errorf("list parked endpoints: %w", err)
		}
		pe.EndpointID, pe.Breaker, pe.Now = id, b, now.UTC()
		out = append(out, pe)
	}
	return out, rows.Err()
}
