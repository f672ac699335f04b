package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookd/hookd/internal/destination"
	"github.com/hookd/hookd/internal/store"
)

// This file is one attempt of one delivery, top to bottom: a run of a
// delivery job (Worker.Work) or one of a message job's runs
// (MessageWorker.Work) calls work, which decides whether the attempt is
// made now, makes it, and records it. The numbers: run.jobAttempt is
// River's count of the job's runs; run.deliveryAttempts and
// run.seriesAttempts are the delivery's recorded attempts, in every
// series and in its current one, and give the attempt its number and
// its place in the retry schedule.

// riverSchedulerInterval is how often River's scheduler makes scheduled
// jobs available (its default, which a client cannot change): a job
// scheduled at t runs up to this much after t.
const riverSchedulerInterval = 5 * time.Second

// notBeforeHorizon is the longest a job waits in Work for its NotBefore;
// a later one snoozes. It holds one worker per FIFO endpoint whose head
// is retried, and stays within JobTimeoutMargin.
const notBeforeHorizon = time.Second

// attemptError is returned for an attempt that will be retried; River
// records its text in the job's errors.
type attemptError struct {
	status int
	class  ErrorClass
}

func (e *attemptError) Error() string {
	if e.status != 0 {
		return fmt.Sprintf("attempt answered %d", e.status)
	}
	return fmt.Sprintf("attempt transport error: %s", e.class)
}

// run is one delivery's turn in a job: a delivery job's own, or one of the
// deliveries of a message job (MessageArgs).
type run struct {
	// jobID is the job that owns the delivery while it runs.
	jobID int64
	// jobAttempt is River's attempt number of that job: how often the job
	// ran, which says nothing of how often its delivery was attempted.
	jobAttempt int
	// deliveryAttempts is the delivery's attempts recorded before this
	// run, in every series, and seriesAttempts those of its current
	// series: the run's attempt is number deliveryAttempts+1 and its retry
	// follows schedule step seriesAttempts+1. They come from the
	// delivery's record (its job's arguments, written from it, or the
	// ledger read on a rerun), never from jobAttempt.
	deliveryAttempts, seriesAttempts int
	// rerun marks a run of a job that ran before (with any attempt
	// number): it checks the ledger before it sends.
	rerun    bool
	args     DeliverArgs
	metadata []byte
	// shared marks one of a message job's deliveries: it is not retried
	// or snoozed with the job; a retry is queued by the ledger with the
	// attempt's record (StatusUpdate.Requeue) and a wait (a snooze's
	// error) is handed to a job of its own by the message worker.
	shared bool
	// unsettled is set on a shared run whose record may have committed
	// unacknowledged: the job it is handed to checks the ledger first.
	unsettled bool

	// claimed is the delivery's progress as the job's batch claim found
	// it (a message job run again claims all of its deliveries in one
	// statement), when claimDone; nil there: not the run's to send.
	claimed   *store.Progress
	claimDone bool

	// startBy is when, on this process's clock, the run's attempt must
	// have a place within the request bounds: the start budget after the
	// run began. A run that waited past it for a place goes without.
	startBy time.Time
	// sendBy is when, on the database-synced clock, the run must have
	// started its request, or send nothing (Worker.sendBy).
	sendBy time.Time
	// leasedFrom is when the run began, on the local clock (the fleet
	// lease's): the lease must have held since then for it to send.
	leasedFrom time.Time

	// What a panic in the run must put right (recoverPanic): the
	// endpoint, once loaded; the breaker's admission, until its outcome
	// is reported; whether the ledger was given the run's record.
	target   *Target
	finish   func(context.Context, Outcome)
	recorded bool
}

// Work runs a delivery job: one attempt of its delivery.
func (w *Worker) Work(ctx context.Context, job *river.Job[DeliverArgs]) error {
	err := w.work(ctx, &run{jobID: job.ID, jobAttempt: job.Attempt, args: job.Args, metadata: job.Metadata,
		startBy: w.deps.LocalNow().Add(w.cfg.StartBudget), sendBy: w.sendBy(job.JobRow), leasedFrom: w.deps.LocalNow()})
	var wait *waitError
	if errors.As(err, &wait) {
		// The delivery's own job waits, snoozed: River gives a snoozed job
		// its attempt number back.
		return river.JobSnooze(wait.d)
	}
	return err
}

// waitError ends a run that sent nothing and used no attempt: its
// delivery must wait d (a limit, a busy trial, an unreachable database)
// before it is tried again. A delivery job snoozes for it; a message job
// hands the delivery to a job of its own, due then.
type waitError struct{ d time.Duration }

func (e *waitError) Error() string { return fmt.Sprintf("delivery waits %s", e.d) }

// waitFor is the error of a run whose delivery must wait d.
func waitFor(d time.Duration) error { return &waitError{d: d} }

// work is one run of one delivery, in three steps read top to bottom
// below: decide whether its attempt is made now, make it, record it. Its
// error says what comes next: nil, the run is over (recorded, final,
// handed on, or not the run's); a *waitError, the delivery waits with
// no attempt used; an *attemptError (a delivery job's only, the time in
// retryAt for NextRetry), River retries the job for the delivery's next
// attempt; any other error, River retries the job.
func (w *Worker) work(ctx context.Context, r *run) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = w.recoverPanic(ctx, r, p)
		}
	}()
	ctx, a, err := w.decide(ctx, r)
	if a == nil {
		return err
	}
	defer a.end()
	res := w.attempt(ctx, r, a)
	return w.record(ctx, r, a, res)
}

// admitted is an attempt decide let through: everything it holds until
// the attempt is recorded (end gives it all back).
type admitted struct {
	target *Target
	// number is the delivery's attempt number: its attempts recorded
	// before this run, plus one. Never the job's (run.jobAttempt).
	number  int
	adm     Admission
	payload []byte
	span    trace.Span

	// releaseRequest gives back the place within the process's and the
	// host's bounds (once the request has ended); releaseSlot the
	// endpoint's slot, with the request's duration (once an answer is
	// in, or after the record for a transport failure, which the
	// endpoint may not have seen end yet).
	releaseRequest func()
	releaseSlot    func()
	took           time.Duration
}

// end gives back what the attempt held; each part once.
func (a *admitted) end() {
	a.releaseRequest()
	a.releaseSlot()
	a.span.End()
}

// decide is everything before a request: whether the run still owns
// its delivery and what the ledger holds of it, a FIFO retry's wait, the
// endpoint (gone, disabled), its rate limit, its concurrency slot, a
// place within the request bounds, the breaker's admission, the payload
// and the send deadline. It returns the attempt to make, or nil and the
// run's error.
func (w *Worker) decide(ctx context.Context, r *run) (_ context.Context, _ *admitted, err error) {
	args := r.args
	r.deliveryAttempts, r.seriesAttempts = args.AttemptOffset, args.ScheduleOffset
	var parkUnconfirmed bool
	if !r.shared {
		if _, parkUnconfirmed = w.unconfirmed.LoadAndDelete(r.jobID); parkUnconfirmed {
			w.nUnconfirmed.Add(-1)
		}
	}
	// expiresIn is how long until retention may make the delivery expired.
	expiresIn, limited := w.untilExpiry(args.DeliveryID)
	nearExpiry := limited && expiresIn < w.timeoutFor(args.EndpointID)
	if r.jobAttempt > 1 || r.rerun || unsettled(r.metadata) || parkUnconfirmed || nearExpiry {
		// A retry, a job rescued from a process that died after its
		// attempt was recorded but before River marked the job done, one
		// whose last record may have committed unacknowledged, or one whose
		// delivery retention may have expired: do not send again what the
		// ledger already settled, nor a delivery this job no longer owns
		// (parked, or released to another job), nor an expired one.
		p, err := w.progress(ctx, r)
		if errors.Is(err, errNotOwned) {
			return ctx, nil, nil
		}
		if errors.Is(err, store.ErrNotFound) {
			// Nothing to send to, and nothing to record on: its partition
			// was dropped (retention made it expired first).
			if w.deps.Metrics != nil {
				w.deps.Metrics.Missing.Inc()
			}
			w.deps.Logger.WarnContext(ctx, "delivery_missing", slog.String("delivery", args.DeliveryID),
				slog.String("message", args.MessageID), slog.String("endpoint", args.EndpointID), slog.Int64("job", r.jobID))
			return ctx, nil, nil
		}
		if err != nil {
			if parkUnconfirmed {
				w.markUnconfirmed(r.jobID)
			}
			return ctx, nil, waitFor(time.Second + w.jitter())
		}
		if p.Series != args.Series || p.Status == store.DeliveryDelivered || p.Status == store.DeliveryFailed || p.Status == store.DeliveryHeld || p.Status == store.DeliveryExpired {
			return ctx, nil, nil
		}
		if p.JobID == nil || *p.JobID != r.jobID {
			return ctx, nil, nil
		}
		r.deliveryAttempts, r.seriesAttempts = p.AttemptCount, p.AttemptCount-p.SeriesBase
		if nearExpiry {
			// An attempt started now could still be under way when the
			// maintainer makes the delivery expired, and would send it
			// after all: wait for the maintainer instead, which cancels this
			// job (snoozed, it is scheduled) as it expires the delivery.
			return ctx, nil, waitFor(max(expiresIn, 0) + w.timeoutFor(args.EndpointID) + w.jitter())
		}
	}
	if args.NotBefore != nil {
		// A FIFO head's retry, queued at once: it waits here for its
		// delay, within the horizon, or for River beyond it.
		if wait := args.NotBefore.Sub(w.deps.Now()); wait > notBeforeHorizon {
			return ctx, nil, waitFor(wait)
		} else if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx, nil, ctx.Err()
			case <-t.C:
			}
		}
	}
	t, err := w.deps.Endpoints.Get(ctx, args.EndpointID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return ctx, nil, w.finish(ctx, r, args.EndpointID, store.StatusUpdate{
			DeliveryID: args.DeliveryID, Series: args.Series, Status: store.DeliveryFailed,
			LastError: ptr(errEndpointGone.Error()),
		})
	case err != nil:
		// The database is unreachable: come back later without using an attempt.
		w.deps.Logger.WarnContext(ctx, "delivery_deferred", slog.String("delivery", args.DeliveryID), slog.String("error", err.Error()))
		return ctx, nil, waitFor(time.Second + w.jitter())
	}
	r.target = t
	if t.Status != store.EndpointEnabled {
		if w.deps.Metrics != nil {
			w.deps.Metrics.HeldTotal.Inc()
		}
		return ctx, nil, w.finish(ctx, r, t.ID, store.StatusUpdate{DeliveryID: args.DeliveryID, Series: args.Series, Status: store.DeliveryHeld})
	}
	if t.RateLimit != nil && r.shared {
		// A rate-limited endpoint's slot is booked by a job of the
		// delivery's own, which remembers it across its runs.
		return ctx, nil, waitFor(0)
	}
	if t.RateLimit != nil {
		// Before the slot and the breaker: a wait for the rate limit uses
		// no attempt and says nothing about the endpoint.
		wait, err := w.rateWait(ctx, r, t)
		if err != nil {
			// The database is unreachable: come back later without using an attempt.
			w.deps.Logger.WarnContext(ctx, "delivery_deferred", slog.String("delivery", args.DeliveryID), slog.String("error", err.Error()))
			return ctx, nil, waitFor(time.Second + w.jitter())
		}
		if wait > 0 {
			return ctx, nil, w.rateLimited(r, t, wait)
		}
	}
	if !w.slots.acquire(ctx, t.ID) {
		if w.deps.Metrics != nil {
			w.deps.Metrics.ConcurrencySnoozed.WithLabelValues(w.deps.Metrics.Labels.Label(t.ID)).Inc()
		}
		return ctx, nil, waitFor(w.slots.retryIn(t.ID) + w.jitter())
	}
	// A place within the process's and the host's bounds, waited for
	// within the run's start budget: past it, the delivery waits in a job
	// of its own and this run ends.
	releaseRequest, full := w.bounds.acquire(ctx, t.host(), r.startBy.Sub(w.deps.LocalNow()))
	if full != "" {
		w.slots.release(t.ID, 0)
		if w.deps.Metrics != nil {
			w.deps.Metrics.StartDeferred.WithLabelValues(string(full)).Inc()
		}
		return ctx, nil, waitFor(100*time.Millisecond + w.jitter())
	}
	a := &admitted{target: t, number: r.deliveryAttempts + 1}
	if w.deps.Metrics != nil {
		w.deps.Metrics.RequestsInFlight.Inc()
	}
	var requestOnce, slotOnce sync.Once
	a.releaseRequest = func() {
		requestOnce.Do(func() {
			releaseRequest()
			if w.deps.Metrics != nil {
				w.deps.Metrics.RequestsInFlight.Dec()
			}
		})
	}
	a.releaseSlot = func() { slotOnce.Do(func() { w.slots.release(t.ID, a.took) }) }
	ctx, a.span = w.startAttemptSpan(ctx, args, a.number)
	// From here on, a run that sends nothing gives back what it took.
	send := false
	defer func() {
		if !send {
			a.end()
		}
	}()

	a.adm, err = w.deps.Gate.Admit(ctx, t)
	if err != nil {
		w.deps.Logger.WarnContext(ctx, "delivery_deferred", slog.String("delivery", args.DeliveryID), slog.String("error", err.Error()))
		return ctx, nil, waitFor(time.Second + w.jitter())
	}
	if !a.adm.Refused {
		// Reported once: by the attempt, or by recoverPanic.
		a.adm.Finish = r.guardFinish(a.adm.Finish)
	}
	recordDecision(a.span, a.adm)
	if a.adm.Refused {
		return ctx, nil, w.refused(ctx, r, a.adm)
	}

	a.payload = []byte(args.Payload) // jobs queued by older versions carried it
	if len(a.payload) == 0 {
		p, err := w.payloads.get(ctx, args.MessageID)
		if errors.Is(err, errPayloadGone) && !payloadRetired(args.MessageID, w.deps.Now(), w.cfg.PayloadRetention) {
			// Retention cannot have dropped it yet: the read missed. Retry
			// (an attempt of River's, nothing sent), never expire.
			a.adm.Finish(ctx, Outcome{At: w.deps.Now()})
			if w.deps.Metrics != nil {
				w.deps.Metrics.PayloadMissing.Inc()
			}
			w.deps.Logger.ErrorContext(ctx, "delivery_payload_missing", slog.String("delivery", args.DeliveryID),
				slog.String("message", args.MessageID), slog.Duration("payload_retention", w.cfg.PayloadRetention))
			return ctx, nil, fmt.Errorf("deliver %s: message %s: %w", args.DeliveryID, args.MessageID, errPayloadMissing)
		}
		if errors.Is(err, errPayloadGone) {
			// Nothing is left to send, ever: the delivery is final.
			a.adm.Finish(ctx, Outcome{At: w.deps.Now()})
			if w.deps.Metrics != nil {
				w.deps.Metrics.Expired.WithLabelValues(ExpiredPayload).Inc()
			}
			w.deps.Logger.WarnContext(ctx, "delivery_expired", slog.String("delivery", args.DeliveryID),
				slog.String("message", args.MessageID), slog.String("reason", ExpiredPayload))
			return ctx, nil, w.finish(ctx, r, t.ID, store.StatusUpdate{
				DeliveryID: args.DeliveryID, Series: args.Series, Status: store.DeliveryExpired,
				LastError: ptr(errPayloadGone.Error()), Ordered: t.Ordered(),
			})
		}
		if err != nil {
			a.adm.Finish(ctx, Outcome{At: w.deps.Now()})
			w.deps.Logger.WarnContext(ctx, "delivery_deferred", slog.String("delivery", args.DeliveryID), slog.String("error", err.Error()))
			return ctx, nil, waitFor(time.Second + w.jitter())
		}
		a.payload = p
	}
	if !r.sendBy.IsZero() && !w.deps.Now().Before(r.sendBy) {
		// Frozen before its request (a stopped VM): River may have rescued
		// the job by now, and another run may be sending this delivery.
		// Send nothing; the delivery waits in a job of its own, if this
		// run still owns it.
		a.adm.Finish(context.WithoutCancel(ctx), Outcome{At: w.deps.Now()})
		if w.deps.Metrics != nil {
			w.deps.Metrics.StartDeferred.WithLabelValues(string(boundLate)).Inc()
		}
		return ctx, nil, waitFor(100*time.Millisecond + w.jitter())
	}
	if w.deps.Lease != nil && !w.deps.Lease.HoldsSince(r.leasedFrom) {
		// This process's heartbeats lapsed since the run began (failing,
		// or frozen past them), even if they are back: the fleet may
		// have made its jobs another's. Send nothing; the delivery waits
		// in a job of its own, if this run still owns it.
		a.adm.Finish(context.WithoutCancel(ctx), Outcome{At: w.deps.Now()})
		if w.deps.Metrics != nil {
			w.deps.Metrics.StartDeferred.WithLabelValues(string(boundLease)).Inc()
		}
		return ctx, nil, waitFor(time.Second + w.jitter())
	}
	if !a.adm.EndBy.IsZero() && a.adm.EndBy.Sub(w.deps.Now()) < MinEndpointTimeout {
		// A trial frozen until its slot's lease is almost over: the
		// request could not end before the lease, after which another
		// trial may take the slot. Send nothing; the slot goes back.
		a.adm.Finish(context.WithoutCancel(ctx), Outcome{At: w.deps.Now()})
		if w.deps.Metrics != nil {
			w.deps.Metrics.StartDeferred.WithLabelValues(string(boundLate)).Inc()
		}
		return ctx, nil, waitFor(100*time.Millisecond + w.jitter())
	}
	send = true
	return ctx, a, nil
}

// sent is what came of an attempt's request.
type sent struct {
	start   time.Time
	resp    Response
	class   Classification
	timeout time.Duration
	// cut is why the dispatcher's shutdown ended the request before any
	// answer (nil: it was not).
	cut error
}

// attempt makes the admitted attempt's request, classifies its result
// and reports the outcome to the breaker. The request ends at its own
// timeout, counted from its own start, or when the dispatcher stops.
func (w *Worker) attempt(ctx context.Context, r *run, a *admitted) sent {
	args, t := r.args, a.target
	res := sent{start: w.deps.Now()}
	sender := w.deps.Sender
	if t.TenantID == store.OperationalTenant && w.deps.OperationalSender != nil {
		sender = w.deps.OperationalSender
	}
	req := Request{
		URL:       t.URL,
		MessageID: args.MessageID,
		Timestamp: res.start,
		Body:      a.payload,
		Signature: t.Signature(args.MessageID, res.start, a.payload),
		Headers:   t.Headers,
		Timeout:   t.Timeout,
	}
	res.timeout = sender.TimeoutOf(req)
	if end := a.adm.EndBy; !end.IsZero() {
		if left := end.Sub(res.start); left < res.timeout {
			// A trial's request ends before its slot's lease does, even
			// when it started late (its lease counts from the admission).
			req.Timeout, res.timeout = max(left, time.Millisecond), max(left, time.Millisecond)
		}
	}
	actx, cancel := attemptContext(ctx)
	// answered: the endpoint answered (an HTTP status, a destination's
	// confirmation or refusal), which a shutdown's cut does not undo.
	var answered bool
	if t.Publishes() {
		// A destination other than HTTP: the same message, id, timestamp
		// and signature, published through the pool.
		res.resp, res.class = w.publish(actx, args, t, req, res.timeout)
		answered = res.resp.ErrorClass == ErrNone || res.resp.ErrorClass == ErrRefused || res.resp.ErrorClass == ErrAuthRefused
	} else {
		res.resp = sender.Send(actx, req, func(s time.Time) time.Duration { return w.deps.Now().Sub(s) }, res.start)
		res.class = Classify(res.resp.Status, res.resp.ErrorClass)
		answered = res.resp.Status != 0
	}
	res.cut = context.Cause(actx)
	cancel()
	a.took = res.resp.Duration
	a.releaseRequest()
	if answered {
		// The cap bounds requests in flight to the endpoint: the slot
		// goes back as soon as an answer is in, not after the ledger's
		// commit.
		a.releaseSlot()
	}
	if res.cut != nil && !answered {
		// Shutdown cut the request short: it says nothing about the
		// endpoint (an abandoned outcome).
		a.adm.Finish(context.WithoutCancel(ctx), Outcome{At: w.deps.Now()})
		return res
	}
	res.cut = nil
	recordAttemptSpan(a.span, res.class, res.resp)
	// The outcome must be reported even when the job's context has ended.
	a.adm.Finish(context.WithoutCancel(ctx), Outcome{Class: res.class, ErrorClass: res.resp.ErrorClass, At: res.start.Add(res.resp.Duration)})
	w.count(t.ID, res.class, res.resp)
	return res
}

// publish makes an attempt to a non-HTTP destination: req's payload with
// its Standard Webhooks id, timestamp and signature (those an HTTP
// attempt would send), and the event type, published through the pool within
// the attempt's timeout (a broker that does not answer holds the worker
// no longer). Its verdict is classified as an HTTP answer would be
// (ClassifyPublish); there is no status, and the excerpt is what the
// destination said (its error, or its reference to the stored message).
func (w *Worker) publish(ctx context.Context, args DeliverArgs, t *Target, req Request, timeout time.Duration) (Response, Classification) {
	start := req.Timestamp
	m := destination.Message{
		ID: args.MessageID, DeliveryID: args.DeliveryID, EndpointID: t.ID, EventType: args.EventType,
		Timestamp: start, Signature: req.Signature, Body: req.Body,
	}
	if t.Ordered() {
		m.OrderingKey = t.ID
	}
	var pr destination.Result
	if w.deps.Publisher == nil {
		pr = destination.Result{Outcome: destination.Failed, Reason: destination.Unreachable, Err: errNoPublisher}
	} else {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		pr = w.deps.Publisher.Publish(pctx, t.destination, m)
		cancel()
	}
	class, ec := ClassifyPublish(pr)
	resp := Response{ErrorClass: ec, Err: pr.Err, Duration: w.deps.Now().Sub(start)}
	switch {
	case pr.Err != nil:
		resp.Excerpt = Excerpt([]byte(t.Type + ": " + pr.Err.Error()))
	case pr.Ref != "":
		resp.Excerpt = Excerpt([]byte(t.Type + " confirmed: " + pr.Ref))
	}
	return resp, class
}

// errNoPublisher fails the publishes of a worker built without one.
var errNoPublisher = errors.New("no destination publisher in this process")

// record hands the attempt's record to the ledger with the delivery's
// next step (delivered, a retry on its schedule, failed once the
// schedule is exhausted, or due again at once after a shutdown's cut)
// and waits for the commit.
func (w *Worker) record(ctx context.Context, r *run, a *admitted, res sent) error {
	if res.cut != nil {
		return w.cutByShutdown(ctx, r, a.target, a.number, res.start, res.resp.Duration, res.timeout, res.cut)
	}
	args, t, resp := r.args, a.target, res.resp
	attempt := &store.Attempt{
		DeliveryID:      args.DeliveryID,
		MessageID:       args.MessageID,
		EndpointID:      t.ID,
		AttemptNumber:   a.number,
		AttemptedAt:     res.start,
		Duration:        resp.Duration,
		ErrorClass:      string(resp.ErrorClass),
		Classification:  string(res.class),
		ResponseExcerpt: resp.Excerpt,
		Trial:           a.adm.Trial,
		Timeout:         res.timeout,
	}
	update := store.StatusUpdate{
		DeliveryID:    args.DeliveryID,
		Series:        args.Series,
		AttemptCount:  a.number,
		LastAttemptAt: &res.start,
		Ordered:       t.Ordered(),
	}
	if resp.Status != 0 {
		attempt.StatusCode = &resp.Status
		update.LastStatusCode = &resp.Status
	}
	if res.class == ClassSuccess {
		update.Status = store.DeliveryDelivered
		return w.finishAttempt(ctx, r, t, attempt, update, time.Time{})
	}
	update.LastError = ptr(describe(resp))
	return w.retryOrFail(ctx, r, t, attempt, update, resp.Status, resp.RetryAfter, res.start)
}

// attemptContext is the context of one request: it keeps ctx's values
// and ends when ctx is cancelled (a stopping dispatcher), but not at ctx's
// deadline (River's job timeout, counted from the job's start), so an
// attempt that started late in its job still has its whole timeout, which
// the Sender counts from the attempt's own start. cancel must be called.
func attemptContext(ctx context.Context) (context.Context, context.CancelFunc) {
	actx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cancel(context.Cause(ctx))
		}
	})
	return actx, func() {
		stop()
		cancel(nil)
	}
}

// sendBy is the latest time, on the database-synced clock, a run of job
// may start a request: SendDeadline after River fetched the job (its
// attempted_at, on the database's clock), which is before River can
// rescue the job, so a run frozen past the rescue sends nothing when it
// goes on. Zero (no deadline) for a job that names no fetch time or
// without a SendDeadline.
func (w *Worker) sendBy(job *rivertype.JobRow) time.Time {
	if job == nil || job.AttemptedAt == nil || w.cfg.SendDeadline <= 0 {
		return time.Time{}
	}
	return job.AttemptedAt.Add(w.cfg.SendDeadline)
}

// errNotOwned is progress's answer for a delivery the run may not send:
// another job's, parked, or claimed by a later run of the same job.
var errNotOwned = errors.New("delivery not the run's")

// claim is the run's claim on its delivery: its job and River's attempt
// number of the run. Every write the run makes carries it, so a run that
// lost its job writes nothing (store.Claim).
func (r *run) claim() store.Claim { return store.Claim{JobID: r.jobID, Attempt: r.jobAttempt} }

// progress claims the run's delivery for it (store.ClaimDeliveries) and
// returns the delivery's progress: errNotOwned when the run's job does
// not own it or a later run of the job claimed it, store.ErrNotFound when
// it is gone. A message job's run takes the answer of its job's batch
// claim.
func (w *Worker) progress(ctx context.Context, r *run) (store.Progress, error) {
	if r.claimDone {
		if r.claimed == nil {
			return store.Progress{}, errNotOwned
		}
		return *r.claimed, nil
	}
	got, err := w.deps.Deliveries.ClaimDeliveries(ctx, r.claim(), []string{r.args.DeliveryID})
	if err != nil {
		return store.Progress{}, err
	}
	if p, ok := got[r.args.DeliveryID]; ok {
		return p, nil
	}
	if _, err := w.deps.Deliveries.DeliveryProgress(ctx, r.args.DeliveryID); err != nil {
		return store.Progress{}, err
	}
	return store.Progress{}, errNotOwned
}

// retryOrFail records a failed attempt with the retry its schedule plans
// (the endpoint's own, or the dispatcher's; t may be nil), or as final
// once the schedule is exhausted.
func (w *Worker) retryOrFail(ctx context.Context, r *run, t *Target, attempt *store.Attempt, update store.StatusUpdate, status int, retryAfter string, start time.Time) error {
	sched, ordered := w.cfg.Schedule, false
	if t != nil {
		sched, ordered = t.Schedule(sched), t.Ordered()
	}
	delay, again := sched.RetryDelay(r.seriesAttempts+1, status, retryAfter, start, w.deps.Rand)
	if !again {
		update.Status = store.DeliveryFailed
		return w.finishAttempt(ctx, r, t, attempt, update, time.Time{})
	}
	next := start.Add(delay)
	update.Status = store.DeliveryPending
	update.NextAttemptAt = &next
	update.Requeue = w.requeues(r, ordered)
	// A retry due later than River's scheduler would notice waits in
	// River, scheduled, rather than being fetched and snoozed; a sooner
	// one is available at once and waits in its worker (or in River's
	// available-but-not-yet-due snooze), as River itself does with short
	// retries.
	update.RequeueScheduled = delay > riverSchedulerInterval
	return w.finishAttempt(ctx, r, t, attempt, update, next)
}

// cutByShutdown records an attempt whose request the dispatcher's
// shutdown cut short (ErrShutdown): the endpoint may or may not have
// received it, so the delivery is due again at once, by a job of its own
// where the ledger queues one, and the cut takes no step of its schedule.
func (w *Worker) cutByShutdown(ctx context.Context, r *run, t *Target, attemptNo int, start time.Time, took, timeout time.Duration, cause error) error {
	ctx = context.WithoutCancel(ctx)
	now := start.Add(took)
	attempt := &store.Attempt{
		DeliveryID:      r.args.DeliveryID,
		MessageID:       r.args.MessageID,
		EndpointID:      t.ID,
		AttemptNumber:   attemptNo,
		AttemptedAt:     start,
		Duration:        took,
		ErrorClass:      string(ErrShutdown),
		Classification:  string(ClassIgnore),
		ResponseExcerpt: Excerpt([]byte("cut short by the dispatcher's shutdown: " + cause.Error())),
		Timeout:         timeout,
	}
	update := store.StatusUpdate{
		DeliveryID:    r.args.DeliveryID,
		Series:        r.args.Series,
		Status:        store.DeliveryPending,
		AttemptCount:  attemptNo,
		LastAttemptAt: &start,
		NextAttemptAt: &now,
		LastError:     ptr(string(ErrShutdown)),
		Ordered:       t.Ordered(),
		OffSchedule:   true,
		Requeue:       w.requeues(r, t.Ordered()),
	}
	return w.finishAttempt(ctx, r, t, attempt, update, now)
}

// finishAttempt records the attempt and returns what River should do: nil to
// complete the job (also when the ledger queued the retry as a new job,
// u.Requeue), an attemptError (with next stored for NextRetry) to retry.
func (w *Worker) finishAttempt(ctx context.Context, r *run, t *Target, a *store.Attempt, u store.StatusUpdate, next time.Time) error {
	rule := store.DefaultAuthRule
	if w.deps.AuthRules != nil && t != nil {
		rule = w.deps.AuthRules.AuthRule(t)
	}
	r.recorded = true
	u.Claim = r.claim()
	if a != nil {
		a.Claim = u.Claim
	}
	if err := w.toLedger(ctx, a, &rule, u); err != nil {
		// Not recorded, as far as we know: try the whole attempt again
		// later. The receiver may see it twice (at-least-once, same
		// webhook-id). The write may also have committed with its answer
		// lost (the connection broke after COMMIT went out), and a snooze
		// keeps the attempt number, so mark the job for the next run to
		// check the ledger before sending.
		w.deps.Logger.ErrorContext(ctx, "attempt_not_recorded", slog.String("delivery", u.DeliveryID), slog.String("error", err.Error()))
		w.markUnsettled(ctx, r)
		return waitFor(time.Second + w.jitter())
	}
	if next.IsZero() || u.Requeue {
		return nil
	}
	if r.shared {
		// No queue to requeue with (tests): the message job's retry
		// makes the attempt again.
		return &attemptError{status: statusOf(a), class: ErrorClass(a.ErrorClass)}
	}
	w.retryAt.Store(r.jobID, next)
	return &attemptError{status: statusOf(a), class: ErrorClass(a.ErrorClass)}
}

// requeues reports whether the run's retry is a new job the ledger
// inserts with the attempt's record: a FIFO head's, whose queue then
// waits for no River completer, and a message job's delivery's, whose
// retry is its own from then on. Otherwise River retries the job.
func (w *Worker) requeues(r *run, ordered bool) bool {
	return (ordered || r.shared) && w.deps.Ledger.QueuesFIFO()
}

// statusOf is the attempt's HTTP status, zero when none came back.
func statusOf(a *store.Attempt) int {
	if a.StatusCode != nil {
		return *a.StatusCode
	}
	return 0
}

// finish records a final status without an attempt and completes the job.
// A hold refused because the endpoint was enabled meanwhile runs the job
// again at once.
func (w *Worker) finish(ctx context.Context, r *run, endpointID string, u store.StatusUpdate) error {
	u.Claim = r.claim()
	err := w.toLedger(ctx, nil, nil, u)
	if errors.Is(err, ErrHoldRefused) {
		w.deps.Endpoints.Invalidate(endpointID)
		return waitFor(0)
	}
	if err != nil {
		w.deps.Logger.ErrorContext(ctx, "status_not_recorded", slog.String("delivery", u.DeliveryID), slog.String("error", err.Error()))
		return waitFor(time.Second + w.jitter())
	}
	return nil
}

// toLedger hands the attempt to the ledger and waits for its verdict. It does
// not give up on its own: a record abandoned while its batch is still
// being written may commit after all, and the job's next run (a snooze
// keeps its attempt number, so it does not check the ledger first) would
// send the delivery again and log a second success. The ledger answers
// every record, each flush within its own timeout.
func (w *Worker) toLedger(ctx context.Context, a *store.Attempt, auth *store.AuthRule, u store.StatusUpdate) error {
	return w.deps.Ledger.Record(context.WithoutCancel(ctx), a, auth, u)
}
