package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

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
	// Ordered marks a delivery of a FIFO endpoint: a final status moves
	// its queue in the same transaction (LedgerBatch.Queue).
	Ordered bool
	// Requeue, with status pending after an attempt (a retry planned),
	// gives the delivery a new job in the same transaction
	// (LedgerBatch.Queue), due at NextAttemptAt, and the job that made the
	// attempt ends: River's own retry waits for its completer, which
	// writes a job's retry up to 250 ms later at low load, and a FIFO
	// queue's head holds up every delivery behind it meanwhile.
	Requeue bool
	// Claim is the run that makes the update: it applies only while no
	// later run of the same job has claimed the delivery (ClaimDeliveries).
	Claim Claim
	// RequeueScheduled makes the new job scheduled at NextAttemptAt, so it
	// waits in River with no write until then; otherwise it is available
	// at once and its worker waits for NextAttemptAt (DeliverArgs.NotBefore):
	// a FIFO head's, and a retry due sooner than River's scheduler (which
	// makes scheduled jobs available every 5 s) would make it available.
	RequeueScheduled bool
	// OffSchedule marks an attempt that takes no step of its delivery's
	// retry schedule (series_base moves with attempt_count): one whose
	// request the dispatcher's shutdown cut short.
	OffSchedule bool
}

// LedgerBatch is what one ledger flush writes.
type LedgerBatch struct {
	Attempts []Attempt
	Updates  []StatusUpdate
	// AuthRules holds the auto-disable rule of each endpoint with an
	// attempt in the batch; endpoints without one are never disabled.
	AuthRules map[string]AuthRule
	// Queue gives the next delivery of a FIFO queue whose head this batch
	// made final its job; nil leaves the queues to the unparker's pass.
	Queue Enqueuer
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

// RecordBatch writes a ledger batch in one transaction: the attempts by
// COPY, the status updates by one UPDATE over arrays, and the auth-failure
// streaks of the batch's endpoints; an endpoint whose streak reaches its
// rule is disabled with reason auth_failures in the same transaction, so
// each attempt counts exactly once. after (may be nil) runs in the
// transaction for the endpoints disabled. With operational events on, the
// same transaction emits endpoint.disabled for those endpoints,
// delivery.failed for deliveries whose retries this batch exhausted or
// that it made expired, and delivery.recovered for failed ones it
// delivered.
//
// A batch that needs nothing beyond its statement (no auth failure, no
// FIFO delivery or retry to queue, no operational endpoint to tell) is
// that one statement, in its own implicit transaction; the others run it
// in a transaction with the writes that follow from what it did.
func (s *Store) RecordBatch(ctx context.Context, b LedgerBatch, after AfterDisable) (LedgerResult, error) {
	pool := s.pool
	if lp := s.ledgerPool.Load(); lp != nil {
		pool = lp
	}
	if !s.ledgerNeedsTx(b) {
		w, err := writeLedger(ctx, pool, b.Attempts, b.Updates)
		if err != nil {
			return LedgerResult{}, knownIfSent(err)
		}
		return LedgerResult{HoldRefused: w.holdRefused}, nil
	}
	var res LedgerResult
	err := s.inTxKnown(ctx, pool, func(tx pgx.Tx) error {
		res = LedgerResult{}
		w, err := writeLedger(ctx, tx, b.Attempts, b.Updates)
		if err != nil {
			return err
		}
		if res.Disabled, err = applyAuthStreaks(ctx, tx, w.kept, b.AuthRules); err != nil {
			return err
		}
		if len(res.Disabled) > 0 && after != nil {
			if err := after(ctx, tx, res.Disabled); err != nil {
				return err
			}
		}
		// The operational events of the batch go out with it, in this
		// transaction: no event for a change that rolled back, none lost.
		var events []OperationalEvent
		for _, d := range res.Disabled {
			events = append(events, OperationalEvent{Type: OpEndpointDisabled, At: d.LastAt, EndpointID: d.EndpointID, TenantID: d.TenantID, Data: map[string]any{
				"url": d.URL, "reason": "auth_failures", "failures": d.Failures, "first_failure_at": d.FirstAt, "last_failure_at": d.LastAt,
			}})
		}
		events = append(events, w.events...)
		if len(w.retries) > 0 && b.Queue != nil {
			if err := requeueRetries(ctx, tx, w.retries, w.scheduled, b.Queue); err != nil {
				return err
			}
		}
		if len(w.advance) > 0 && b.Queue != nil {
			if _, err := lockQueues(ctx, tx, w.advance); err != nil {
				return err
			}
			if err := s.advanceQueues(ctx, tx, w.advance, w.failedHeads, false, b.Queue); err != nil {
				return err
			}
		}
		res.HoldRefused = w.holdRefused
		if s.ops != nil && len(events) == 0 {
			// Keeps the store's knowledge of the operational endpoints
			// fresh (a statement per cache TTL), so that the batches after
			// it can tell whether they need this transaction.
			if _, err := s.ops.subscriptions(ctx, tx); err != nil {
				return err
			}
		}
		return s.emitOperational(ctx, tx, events)
	})
	if err != nil {
		return LedgerResult{}, err
	}
	return res, nil
}

// ledgerNeedsTx reports whether batch b may need writes beyond its
// statement (writeLedger), which follow from what the statement did and
// must commit with it: an auth failure's streak (and the disable it may
// bring), a FIFO queue moved on or a retry's job, an operational event.
func (s *Store) ledgerNeedsTx(b LedgerBatch) bool {
	for _, a := range b.Attempts {
		if a.Classification == "auth_failure" {
			return true
		}
	}
	if b.Queue != nil {
		for _, u := range b.Updates {
			if u.Ordered || (u.Requeue && u.Status == DeliveryPending && u.LastAttemptAt != nil) {
				return true
			}
		}
	}
	return s.ops != nil && !s.ops.knownEmpty()
}

// knownIfSent marks the error of a statement run in its own implicit
// transaction as ErrCommitUnknown unless it certainly wrote nothing: the
// server refused it (an error it answered rolls the statement back), or
// it was never sent (no connection to be had).
func knownIfSent(err error) error {
	var pe *pgconn.PgError
	var ce *pgconn.ConnectError
	if errors.As(err, &pe) || errors.As(err, &ce) || pgconn.SafeToRetry(err) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrCommitUnknown, err)
}

// ledgerQuerier is where a ledger statement runs: the pool (its own
// implicit transaction) or a transaction.
type ledgerQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

var (
	_ ledgerQuerier = (*pgxpool.Pool)(nil)
	_ ledgerQuerier = (pgx.Tx)(nil)
)

// ledgerWritten is what a batch's statement did and read.
type ledgerWritten struct {
	// kept are the batch's attempts without those whose run lost its
	// delivery: a later run of the same job claimed it (ClaimDeliveries),
	// as the run of a job rescued from a dispatcher that was frozen or cut
	// off does. The lost run's status update is refused and its attempt
	// not logged: it would log a second attempt of the same number beside
	// the new run's.
	kept []Attempt
	// events are the deliveries' operational events (failed, expired,
	// recovered).
	events []OperationalEvent
	// retries are the deliveries whose retry gets a new job (scheduled:
	// a scheduled one); advance, the FIFO queues whose head the batch
	// made final, failedHeads their heads that failed.
	retries     []string
	scheduled   map[string]bool
	advance     []string
	failedHeads map[string]string
	holdRefused map[string]bool
}

// writeLedger writes a batch in one statement (ledgerWriteSQL): it locks
// the batch's deliveries, reads their claims under the locks, applies the
// status updates, logs the attempts whose run still holds its delivery
// and resets the auth-failure streaks their answers end. The claims are
// read under the locks, taken in the order every writer of several
// deliveries takes them (by id): a claim committed after an unlocked read
// would still refuse the status update, but the lost run's attempt would
// already be in the log. A run names its claim on its status update
// (StatusUpdate.Claim).
func writeLedger(ctx context.Context, q ledgerQuerier, attempts []Attempt, raw []StatusUpdate) (ledgerWritten, error) {
	attempts, raw = dropSuperseded(attempts, raw)
	w := ledgerWritten{kept: attempts}
	updates := mergeUpdates(raw)
	claims := make(map[string]Claim, len(raw))
	for _, u := range raw {
		if u.Claim.JobID != 0 && u.LastAttemptAt != nil {
			claims[u.DeliveryID] = u.Claim
		}
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
		claimJobs = make([]*int64, n)
		claimAtts = make([]int32, n)
		offSched  = make([]bool, n)
	)
	ordered := make(map[string]bool)
	requeue := make(map[string]bool)
	w.scheduled = make(map[string]bool)
	for i, u := range updates {
		if u.Ordered {
			ordered[u.DeliveryID] = true
		}
		if u.Requeue && u.Status == DeliveryPending && u.LastAttemptAt != nil {
			requeue[u.DeliveryID] = true
			if u.RequeueScheduled && !u.Ordered {
				w.scheduled[u.DeliveryID] = true
			}
		}
		parks[i] = u.Park && u.Status == DeliveryWaiting
		offSched[i] = u.OffSchedule && u.LastAttemptAt != nil
		if u.JobID != 0 {
			jobs[i] = &u.JobID
		}
		if u.Claim.JobID != 0 {
			claimJobs[i], claimAtts[i] = &u.Claim.JobID, int32(u.Claim.Attempt)
		}
		ids[i], series[i], statuses[i], counts[i] = u.DeliveryID, int32(u.Series), u.Status, int32(u.AttemptCount)
		lastAt[i], nextAt[i], lastErrs[i], openUntil[i] = u.LastAttemptAt, u.NextAttemptAt, u.LastError, u.BreakerOpenUntil
		if u.LastStatusCode != nil {
			c := int32(*u.LastStatusCode)
			codes[i] = &c
		}
	}
	var (
		claimIDs    = make([]string, 0, len(claims))
		claimJobIDs = make([]int64, 0, len(claims))
		claimRuns   = make([]int32, 0, len(claims))
	)
	for id, c := range claims {
		claimIDs, claimJobIDs, claimRuns = append(claimIDs, id), append(claimJobIDs, c.JobID), append(claimRuns, int32(c.Attempt))
	}
	m := len(attempts)
	var (
		aDeliveries = make([]string, m)
		aMessages   = make([]string, m)
		aEndpoints  = make([]string, m)
		aNumbers    = make([]int32, m)
		aAt         = make([]time.Time, m)
		aDurations  = make([]float64, m)
		aCodes      = make([]*int32, m)
		aClasses    = make([]*string, m)
		aKinds      = make([]string, m)
		aExcerpts   = make([]string, m)
		aTrials     = make([]bool, m)
		aTimeouts   = make([]*int32, m)
	)
	for i, a := range attempts {
		aDeliveries[i], aMessages[i], aEndpoints[i], aNumbers[i] = a.DeliveryID, a.MessageID, a.EndpointID, int32(a.AttemptNumber)
		aAt[i], aDurations[i] = a.AttemptedAt, float64(a.Duration)/float64(time.Millisecond)
		aKinds[i], aExcerpts[i], aTrials[i] = a.Classification, a.ResponseExcerpt, a.Trial
		if a.StatusCode != nil {
			c := int32(*a.StatusCode)
			aCodes[i] = &c
		}
		if a.ErrorClass != "" {
			ec := a.ErrorClass
			aClasses[i] = &ec
		}
		if a.Timeout > 0 {
			ms := int32(a.Timeout.Milliseconds())
			aTimeouts[i] = &ms
		}
	}
	resetEndpoints, resetDeliveries := streakResets(attempts)
	// A hold applies only while the endpoint is still disabled (the
	// endpoint row is share-locked against a concurrent enable);
	// otherwise the caller runs the job again.
	rows, err := q.Query(ctx, ledgerWriteSQL, customPlan,
		ids, series, statuses, counts, lastAt, nextAt, codes, lastErrs, openUntil, parks, jobs, claimJobs, claimAtts, offSched,
		claimIDs, claimJobIDs, claimRuns,
		aDeliveries, aMessages, aEndpoints, aNumbers, aAt, aDurations, aCodes, aClasses, aKinds, aExcerpts, aTrials, aTimeouts,
		resetEndpoints, resetDeliveries)
	if err != nil {
		return w, fmt.Errorf("write ledger batch: %w", err)
	}
	held := map[string]bool{}
	lost := map[string]bool{}
	for rows.Next() {
		var (
			id, endpointID              string
			isLost, updated             bool
			status, messageID, tenantID *string
			failed, recovered           *bool
			attemptCount                *int
			lastError                   *string
			at                          *time.Time
		)
		if err := rows.Scan(&id, &endpointID, &isLost, &updated,
			&status, &failed, &recovered, &messageID, &tenantID, &attemptCount, &lastError, &at); err != nil {
			rows.Close()
			return w, fmt.Errorf("write ledger batch: %w", err)
		}
		if isLost {
			lost[id] = true
		}
		if !updated {
			continue
		}
		if *status == DeliveryHeld {
			held[id] = true
		}
		if requeue[id] && *status == DeliveryPending {
			w.retries = append(w.retries, id)
		}
		if ordered[id] && (*status == DeliveryDelivered || *status == DeliveryFailed || *status == DeliveryExpired) {
			w.advance = append(w.advance, endpointID)
			if *failed && (w.failedHeads[endpointID] == "" || id < w.failedHeads[endpointID]) {
				if w.failedHeads == nil {
					w.failedHeads = map[string]string{}
				}
				w.failedHeads[endpointID] = id
			}
		}
		switch {
		case *recovered:
			w.events = append(w.events, OperationalEvent{Type: OpDeliveryRecovered, At: *at, EndpointID: endpointID, TenantID: *tenantID, Data: map[string]any{
				"delivery_id": id, "message_id": *messageID, "attempts": *attemptCount, "last_error": lastError,
			}})
		case *failed || *status == DeliveryExpired:
			w.events = append(w.events, deliveryFailedEvent(*at, endpointID, *tenantID, id, *messageID, *attemptCount, lastError, *status))
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return w, fmt.Errorf("write ledger batch: %w", err)
	}
	for _, u := range updates {
		if u.Status == DeliveryHeld && !held[u.DeliveryID] {
			if w.holdRefused == nil {
				w.holdRefused = map[string]bool{}
			}
			w.holdRefused[u.DeliveryID] = true
		}
	}
	if len(lost) > 0 {
		w.kept = make([]Attempt, 0, len(attempts))
		for _, a := range attempts {
			if !lost[a.DeliveryID] {
				w.kept = append(w.kept, a)
			}
		}
	}
	return w, nil
}

// dropSuperseded leaves out of a batch the records of a run of a job
// whose delivery a later run of the same job (a higher Claim.Attempt)
// also recorded in the batch. The later run claimed the delivery before
// it sent, so the earlier one had lost it: the statement finds that for
// a run whose successor's claim is already written (lost), but within one
// batch it would merge both runs' updates into one carrying the earlier
// claim, which the delivery refuses, and log both attempts. It happens
// when a run's record waits in its process's ledger while its job, taken
// from it by a rescue, runs again in the same process.
func dropSuperseded(attempts []Attempt, updates []StatusUpdate) ([]Attempt, []StatusUpdate) {
	type run struct {
		delivery string
		job      int64
	}
	latest := map[run]int{}
	note := func(id string, c Claim) {
		if c.JobID == 0 {
			return
		}
		if a, ok := latest[run{id, c.JobID}]; !ok || c.Attempt > a {
			latest[run{id, c.JobID}] = c.Attempt
		}
	}
	for _, a := range attempts {
		note(a.DeliveryID, a.Claim)
	}
	for _, u := range updates {
		note(u.DeliveryID, u.Claim)
	}
	superseded := func(id string, c Claim) bool {
		return c.JobID != 0 && latest[run{id, c.JobID}] > c.Attempt
	}
	if !slices.ContainsFunc(attempts, func(a Attempt) bool { return superseded(a.DeliveryID, a.Claim) }) &&
		!slices.ContainsFunc(updates, func(u StatusUpdate) bool { return superseded(u.DeliveryID, u.Claim) }) {
		return attempts, updates
	}
	keptAttempts := make([]Attempt, 0, len(attempts))
	for _, a := range attempts {
		if !superseded(a.DeliveryID, a.Claim) {
			keptAttempts = append(keptAttempts, a)
		}
	}
	keptUpdates := make([]StatusUpdate, 0, len(updates))
	for _, u := range updates {
		if !superseded(u.DeliveryID, u.Claim) {
			keptUpdates = append(keptUpdates, u)
		}
	}
	return keptAttempts, keptUpdates
}

// deliveryFailedEvent is the delivery.failed event of a delivery that
// became final without being delivered: status failed (its retries
// exhausted) or expired (retention, or its payload's, reached it first).
func deliveryFailedEvent(at time.Time, endpointID, tenantID, id, messageID string, attempts int, lastError *string, status string) OperationalEvent {
	return OperationalEvent{Type: OpDeliveryFailed, At: at, EndpointID: endpointID, TenantID: tenantID, Data: map[string]any{
		"delivery_id": id, "message_id": messageID, "attempts": attempts, "last_error": lastError, "status": status,
	}}
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
			m.OffSchedule = u.OffSchedule
		}
		if m.Status == DeliveryDelivered || m.Status == DeliveryExpired || (u.Status == DeliveryWaiting && m.Status != DeliveryPending && m.Status != DeliveryWaiting) {
			continue
		}
		m.Status, m.NextAttemptAt, m.BreakerOpenUntil, m.Park, m.JobID = u.Status, u.NextAttemptAt, u.BreakerOpenUntil, u.Park, u.JobID
		m.Ordered, m.Requeue, m.RequeueScheduled, m.Claim = m.Ordered || u.Ordered, u.Requeue, u.RequeueScheduled, u.Claim
	}
	return out
}

// ledgerWriteSQL writes a ledger batch (writeLedger): $1-$14 the status
// updates (the delivery ids, the other arrays in step), $15-$17 the
// claims their runs hold, $18-$29 the attempts, $30-$31 the (endpoint,
// delivery) pairs whose attempts reset a streak (streakResets). "d.id =
// ANY($1)" repeats the join on the partition key as a condition the
// planner can prune by: a join alone plans every deliveries partition,
// and with a month of daily partitions it hash-joined over a sequential
// scan of each of them (220 ms for 40 rows over 31 partitions of 10,000
// rows, against 0.3 ms for the index probes of the one partition holding
// them). The rows are locked first, in id order (locked), the order
// HandOff and every writer that locks several deliveries takes them in:
// the update's own order follows its plan, and two writers taking two
// rows in opposite orders deadlock, one of them aborted by Postgres with
// its batch. The update waits for locked through a condition on its
// count, which the planner evaluates once, before the update's first row
// (a one-time filter): a check of each row against locked was planned as
// a nested loop over the locked rows, quadratic in the batch (480
// records: 115,000 rows compared, most of the statement's time). It
// returns a row per delivery of the batch: whether its run's claim was
// lost, and what the update did to it.
const ledgerWriteSQL = `
	WITH locked AS MATERIALIZED (
		SELECT id, endpoint_id, claim_job, claim_attempt FROM deliveries WHERE id = ANY($1) ORDER BY id FOR UPDATE
	), updated AS (
		UPDATE deliveries d SET
		status = u.status,
		attempt_count = greatest(d.attempt_count, u.attempt_count),
		series_base = CASE WHEN u.off_schedule
			THEN d.series_base + greatest(u.attempt_count - d.attempt_count, 0) ELSE d.series_base END,
		last_attempt_at = coalesce(u.last_attempt_at, d.last_attempt_at),
		next_attempt_at = CASE WHEN u.status = 'pending' THEN u.next_attempt_at ELSE NULL END,
		last_status_code = CASE WHEN u.last_attempt_at IS NULL THEN d.last_status_code ELSE u.last_status_code END,
		last_error = CASE WHEN u.last_attempt_at IS NULL THEN coalesce(u.last_error, d.last_error) ELSE u.last_error END,
		breaker_open_until = CASE WHEN u.status = 'waiting' THEN u.breaker_open_until ELSE NULL END,
		delivered_at = CASE WHEN u.status = 'delivered' THEN coalesce(u.last_attempt_at, now()) ELSE d.delivered_at END,
		job_id = CASE WHEN u.park THEN NULL ELSE d.job_id END,
		failed_at = CASE WHEN u.status = 'failed' AND d.status <> 'failed' AND u.last_attempt_at IS NOT NULL
			THEN now() ELSE d.failed_at END,
		recovered_at = CASE WHEN u.status = 'delivered' AND d.failed_at IS NOT NULL THEN now() ELSE d.recovered_at END,
		updated_at = now()
	FROM unnest($1::text[], $2::int[], $3::text[], $4::int[], $5::timestamptz[],
		$6::timestamptz[], $7::int[], $8::text[], $9::timestamptz[], $10::bool[], $11::bigint[], $12::bigint[], $13::int[], $14::bool[])
		AS u(id, series, status, attempt_count, last_attempt_at, next_attempt_at,
			last_status_code, last_error, breaker_open_until, park, job_id, claim_job, claim_attempt, off_schedule)
	WHERE d.id = u.id AND d.id = ANY($1) AND (SELECT count(*) FROM locked) >= 0
		AND d.series = u.series AND d.status NOT IN ('delivered', 'expired')
		AND (u.status <> 'waiting' OR d.status IN ('pending', 'waiting'))
		AND (NOT u.park OR u.job_id IS NULL OR d.job_id = u.job_id)
		AND (u.claim_job IS NULL OR d.claim_job IS DISTINCT FROM u.claim_job OR d.claim_attempt <= u.claim_attempt)
		AND (u.status <> 'held' OR EXISTS (
			SELECT 1 FROM endpoints e WHERE e.id = d.endpoint_id AND e.status = 'disabled' FOR SHARE))
	RETURNING d.id, u.status, coalesce(d.failed_at = now(), false) AS failed, coalesce(d.recovered_at = now(), false) AS recovered,
		d.message_id, d.tenant_id, d.attempt_count, d.last_error, d.updated_at
	), lost AS (
		SELECT l.id FROM locked l
		JOIN unnest($15::text[], $16::bigint[], $17::int[]) AS c(id, job, attempt) ON c.id = l.id
		WHERE l.claim_job = c.job AND l.claim_attempt > c.attempt
	), logged AS (
		INSERT INTO delivery_attempts (delivery_id, message_id, endpoint_id, attempt_number, attempted_at, duration_ms,
			status_code, error_class, classification, response_excerpt, trial, timeout_ms)
		SELECT a.* FROM unnest($18::text[], $19::text[], $20::text[], $21::int[], $22::timestamptz[], $23::float8[],
			$24::int[], $25::text[], $26::text[], $27::text[], $28::bool[], $29::int[])
			AS a(delivery_id, message_id, endpoint_id, attempt_number, attempted_at, duration_ms,
				status_code, error_class, classification, response_excerpt, trial, timeout_ms)
		WHERE a.delivery_id NOT IN (SELECT id FROM lost)
	), reset AS (
		UPDATE auth_streaks SET failures = 0, first_at = NULL
		WHERE endpoint_id IN (SELECT r.endpoint_id FROM unnest($30::text[], $31::text[]) AS r(endpoint_id, delivery_id)
				WHERE r.delivery_id NOT IN (SELECT id FROM lost))
			AND failures > 0
	)
	SELECT l.id, l.endpoint_id, l.id IN (SELECT id FROM lost), u.id IS NOT NULL,
		u.status, u.failed, u.recovered, u.message_id, u.tenant_id, u.attempt_count, u.last_error, u.updated_at
	FROM locked l LEFT JOIN updated u ON u.id = l.id`
