package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/store"
)

// Gate is the circuit breaker as the worker sees it.
type Gate interface {
	// Admit decides whether a delivery to t may be attempted now.
	Admit(ctx context.Context, t *Target) (Admission, error)
}

// Admission is a gate's answer for one delivery.
type Admission struct {
	// Refused means the breaker is open; come back at RetryAt.
	Refused bool
	RetryAt time.Time
	Reason  string
	// Trial marks a half-open probe.
	Trial bool
	// Finish reports the attempt's outcome; it must be called exactly once
	// for an admitted delivery. An empty classification means the attempt
	// was abandoned (shutdown) and tells the breaker nothing.
	Finish func(ctx context.Context, o Outcome)
}

// Outcome is how one attempt ended, as the breaker sees it.
type Outcome struct {
	Class Classification
	// ErrorClass names a transport failure (empty when a status came back).
	ErrorClass ErrorClass
	// At is when the attempt ended, on the database-synced clock.
	At time.Time
}

// OpenGate admits everything: the dispatcher without breakers.
type OpenGate struct{}

var _ Gate = OpenGate{}

// Admit always admits.
func (OpenGate) Admit(context.Context, *Target) (Admission, error) {
	return Admission{Finish: func(context.Context, Outcome) {}}, nil
}

// AuthRules gives an endpoint's 401/403 auto-disable rule.
type AuthRules interface {
	AuthRule(t *Target) store.AuthRule
}

var _ AuthRules = (*ClassBook)(nil)

// DeliveryReader reads what the delivery store knows about a delivery.
type DeliveryReader interface {
	// MessagePayloads loads payloads too large to ride in a job.
	MessagePayloads(ctx context.Context, ids []string) (map[string]json.RawMessage, error)
	// DeliveryProgress returns a delivery's recorded status, series and
	// owning job.
	DeliveryProgress(ctx context.Context, id string) (store.Progress, error)
	// ClaimDeliveries claims for a run of a job the deliveries it still
	// owns and returns their progress (store.Store.ClaimDeliveries).
	ClaimDeliveries(ctx context.Context, c store.Claim, ids []string) (map[string]store.Progress, error)
}

var _ DeliveryReader = (*store.Store)(nil)

// WorkerConfig holds the worker's tunables.
type WorkerConfig struct {
	// Schedule is the retry schedule.
	Schedule Schedule
	// MaxPerEndpoint caps attempts in flight to one endpoint in this process;
	// excess jobs are snoozed with jitter. Zero means 10.
	MaxPerEndpoint int
	// MaxInFlight caps the requests in flight in this process (WORKERS);
	// zero means DefaultMaxInFlight.
	MaxInFlight int
	// MaxPerHost caps the requests in flight to one destination host
	// (host:port) in this process; zero means DefaultMaxPerHost.
	MaxPerHost int
	// MaxPerJob caps the attempts in flight of one message job; zero
	// means MessageJobMaxEndpoints.
	MaxPerJob int
	// SendDeadline is how long after River fetched a job its run may
	// start a request; it must be shorter than River's rescue
	// (RescueStuckJobsAfter), so that a run frozen past the rescue sends
	// nothing when it wakes. Zero: no deadline.
	SendDeadline time.Duration
	// StartBudget is how long after its run starts an attempt may wait
	// for a place within MaxPerJob, MaxInFlight and MaxPerHost; past it
	// the delivery waits in a job of its own. Zero means
	// DefaultStartBudget.
	StartBudget time.Duration
	// UnknownJobWait is how long a message job of a version this
	// dispatcher does not know waits before a dispatcher looks at it
	// again (left for one that can run it). Zero means a minute.
	UnknownJobWait time.Duration
	// SnoozeJitter is the upper bound of the random delay added to snoozes.
	// Zero means 500ms.
	SnoozeJitter time.Duration
	// Park parks deliveries refused by an open or isolated breaker (no job
	// until released) instead of snoozing their jobs; an Unparker must run.
	Park bool
	// PayloadRetention is how long payloads are kept: a missing payload of
	// a message at least this old is expired, of a younger one an error
	// River retries. Zero: none is kept for a limited time, so a missing
	// payload is always an error.
	PayloadRetention time.Duration
	// Retention is how long deliveries are kept before retention makes the
	// unfinished ones expired. A delivery that would reach it before an
	// attempt started now could end (the job's timeout) is not sent: its
	// job waits for the maintainer to expire it. Zero: no limit.
	Retention time.Duration
}

// WorkerDeps are the worker's collaborators.
type WorkerDeps struct {
	Endpoints  *EndpointCache
	Deliveries DeliveryReader
	Gate       Gate
	// AuthRules gives each endpoint's auto-disable rule; nil uses
	// store.DefaultAuthRule.
	AuthRules AuthRules
	Ledger    *Ledger
	Sender    *Sender
	// OperationalSender, when set, sends to operational endpoints: the
	// operator's own services, often internal, so it may skip the SSRF
	// guard Sender applies. Nil sends them with Sender.
	OperationalSender *Sender
	Metrics           *Metrics
	Logger            *slog.Logger
	// Now is the clock attempts are stamped with (the database-synced clock).
	Now func() time.Time
	// LocalNow is this process's clock, the one River schedules by.
	// Default time.Now.
	LocalNow func() time.Time
	// Rand returns uniform [0,1) draws for jitter.
	Rand func() float64
	// RateSlots books the fleet's send slots of rate-limited endpoints;
	// needed once an endpoint has a rate_limit.
	RateSlots RateSlots
	// Tracer makes each attempt's span; nil traces nothing.
	Tracer trace.Tracer
	// Propagator reads the trace context a job carries; nil ignores it.
	Propagator propagation.TextMapPropagator
}

// Worker delivers one message to one endpoint per job.
type Worker struct {
	river.WorkerDefaults[DeliverArgs]
	cfg  WorkerConfig
	deps WorkerDeps

	// retryAt hands the worker's chosen next-attempt time to NextRetry.
	retryAt sync.Map // job id -> time.Time
	// unconfirmed holds the jobs whose park may have committed unacknowledged
	// (the job metadata says so too, for a run in another process), at most
	// maxUnconfirmed of them.
	unconfirmed  sync.Map // job id -> struct{}
	nUnconfirmed atomic.Int64

	slots    *endpointSlots
	bounds   *requestBounds
	booked   *bookedUntil
	payloads *payloads
}

var _ river.Worker[DeliverArgs] = (*Worker)(nil)

// NewWorker returns a delivery worker.
func NewWorker(cfg WorkerConfig, deps WorkerDeps) *Worker {
	if cfg.MaxPerEndpoint <= 0 {
		cfg.MaxPerEndpoint = 10
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.MaxPerHost <= 0 {
		cfg.MaxPerHost = DefaultMaxPerHost
	}
	if cfg.MaxPerJob <= 0 {
		cfg.MaxPerJob = MessageJobMaxEndpoints
	}
	if cfg.StartBudget <= 0 {
		cfg.StartBudget = DefaultStartBudget
	}
	if cfg.UnknownJobWait <= 0 {
		cfg.UnknownJobWait = unknownJobWait
	}
	if cfg.SnoozeJitter <= 0 {
		cfg.SnoozeJitter = 500 * time.Millisecond
	}
	if len(cfg.Schedule) == 0 {
		cfg.Schedule = DefaultSchedule
	}
	if deps.Gate == nil {
		deps.Gate = OpenGate{}
	}
	if deps.Rand == nil {
		deps.Rand = rand.Float64
	}
	if deps.LocalNow == nil {
		deps.LocalNow = time.Now
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Tracer == nil {
		deps.Tracer = noopTracer
	}
	return &Worker{cfg: cfg, deps: deps, slots: newEndpointSlots(cfg.MaxPerEndpoint), booked: newBookedUntil(),
		bounds:   newRequestBounds(cfg.MaxInFlight, cfg.MaxPerHost),
		payloads: newPayloads(deps.Deliveries, time.Millisecond, 8<<20)}
}

// JobTimeoutMargin is how much longer than the request timeout River lets a
// delivery job run: the ledger write after the request does not depend on
// the job's context, so a small margin suffices.
const JobTimeoutMargin = 5 * time.Second

// Timeout is the job's request timeout plus JobTimeoutMargin: the
// endpoint's own timeout when the cache holds the endpoint, else the
// longest an attempt may be given. An attempt starts within the start
// budget (less than the margin) and its request is not cut by the job's
// deadline (attemptContext), so the deadline only bounds what comes
// before a request.
func (w *Worker) Timeout(job *river.Job[DeliverArgs]) time.Duration {
	return w.timeoutFor(job.Args.EndpointID)
}

// timeoutFor is the request timeout of an attempt to the endpoint plus
// JobTimeoutMargin.
func (w *Worker) timeoutFor(endpointID string) time.Duration {
	d := w.deps.Sender.timeout
	if t := w.deps.Endpoints.Cached(endpointID); t == nil {
		d = max(d, MaxEndpointTimeout)
	} else if t.Timeout > 0 {
		d = t.Timeout
	}
	return d + JobTimeoutMargin
}

// NextRetry returns the time Work chose for the next attempt. A job River
// itself retries (one rescued from a dead process) follows the schedule:
// its endpoint's, when the cache holds it.
//
// River compares the answer with its own (local) clock and falls back to
// its default policy, which waits minutes, for a time already past; a
// jittered delay near zero after a slow attempt would be. So the chosen
// time, on the database-synced clock, is turned into a delay from now and
// then into a local time at least minRetryDelay ahead.
func (w *Worker) NextRetry(job *river.Job[DeliverArgs]) time.Time {
	var d time.Duration
	if v, ok := w.retryAt.LoadAndDelete(job.ID); ok {
		d = v.(time.Time).Sub(w.deps.Now())
	} else {
		sched := w.cfg.Schedule
		if t := w.deps.Endpoints.Cached(job.Args.EndpointID); t != nil {
			sched = t.Schedule(sched)
		}
		var ok bool
		if d, ok = sched.NextDelay(job.Args.ScheduleOffset+job.Attempt, w.deps.Rand); !ok {
			d = sched.Step(len(sched) - 1)
		}
	}
	return w.deps.LocalNow().Add(max(d, minRetryDelay))
}

// untilExpiry returns how long until retention reaches the delivery (its
// id's time plus Retention, on the database-synced clock), and false when
// no retention is configured or the id names no time.
func (w *Worker) untilExpiry(deliveryID string) (time.Duration, bool) {
	if w.cfg.Retention <= 0 {
		return 0, false
	}
	created, ok := store.IDTime(deliveryID)
	if !ok {
		return 0, false
	}
	return created.Add(w.cfg.Retention).Sub(w.deps.Now()), true
}

// minRetryDelay keeps NextRetry's answer in River's future.
const minRetryDelay = 20 * time.Millisecond

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
	// prior is the delivery's attempts recorded before this one, in
	// every series, and inSeries those of its current series: this
	// attempt is number prior+1 and its retry follows schedule step
	// inSeries+1. They come from the delivery's record (its job's
	// arguments, written from it, or the ledger read on a rerun).
	prior, inSeries int
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

	// What a panic in the run must put right (recoverPanic): the
	// endpoint, once loaded; the breaker's admission, until its outcome
	// is reported; whether the ledger was given the run's record.
	target   *Target
	finish   func(context.Context, Outcome)
	recorded bool
}

// Work makes one attempt of a delivery.
func (w *Worker) Work(ctx context.Context, job *river.Job[DeliverArgs]) error {
	return w.work(ctx, &run{jobID: job.ID, jobAttempt: job.Attempt, args: job.Args, metadata: job.Metadata,
		startBy: w.deps.LocalNow().Add(w.cfg.StartBudget), sendBy: w.sendBy(job.JobRow)})
}

// work makes one attempt of the run's delivery. Its error is what River
// should do with a delivery job: nil completes it, a snooze or an
// attemptError (with the time stored for NextRetry) comes back later.
func (w *Worker) work(ctx context.Context, r *run) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = w.recoverPanic(ctx, r, p)
		}
	}()
	args := r.args
	r.prior, r.inSeries = args.AttemptOffset, args.ScheduleOffset
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
			return nil
		}
		if errors.Is(err, store.ErrNotFound) {
			// Nothing to send to, and nothing to record on: its partition
			// was dropped (retention made it expired first).
			if w.deps.Metrics != nil {
				w.deps.Metrics.Missing.Inc()
			}
			w.deps.Logger.WarnContext(ctx, "delivery_missing", slog.String("delivery", args.DeliveryID),
				slog.String("message", args.MessageID), slog.String("endpoint", args.EndpointID), slog.Int64("job", r.jobID))
			return nil
		}
		if err != nil {
			if parkUnconfirmed {
				w.markUnconfirmed(r.jobID)
			}
			return river.JobSnooze(time.Second + w.jitter())
		}
		if p.Series != args.Series || p.Status == store.DeliveryDelivered || p.Status == store.DeliveryFailed || p.Status == store.DeliveryHeld || p.Status == store.DeliveryExpired {
			return nil
		}
		if p.JobID == nil || *p.JobID != r.jobID {
			return nil
		}
		r.prior, r.inSeries = p.AttemptCount, p.AttemptCount-p.SeriesBase
		if nearExpiry {
			// An attempt started now could still be under way when the
			// maintainer makes the delivery expired, and would send it
			// after all: wait for the maintainer instead, which cancels this
			// job (snoozed, it is scheduled) as it expires the delivery.
			return river.JobSnooze(max(expiresIn, 0) + w.timeoutFor(args.EndpointID) + w.jitter())
		}
	}
	if args.NotBefore != nil {
		// A FIFO head's retry, queued at once: it waits here for its
		// delay, within the horizon, or for River beyond it.
		if wait := args.NotBefore.Sub(w.deps.Now()); wait > notBeforeHorizon {
			return river.JobSnooze(wait)
		} else if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
	}
	t, err := w.deps.Endpoints.Get(ctx, args.EndpointID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return w.finish(ctx, r, args.EndpointID, store.StatusUpdate{
			DeliveryID: args.DeliveryID, Series: args.Series, Status: store.DeliveryFailed,
			LastError: ptr(errEndpointGone.Error()),
		})
	case err != nil:
		// The database is unreachable: come back later without using an attempt.
		w.deps.Logger.WarnContext(ctx, "delivery_deferred", slog.String("delivery", args.DeliveryID), slog.String("error", err.Error()))
		return river.JobSnooze(time.Second + w.jitter())
	}
	r.target = t
	if t.Status != store.EndpointEnabled {
		if w.deps.Metrics != nil {
			w.deps.Metrics.HeldTotal.Inc()
		}
		return w.finish(ctx, r, t.ID, store.StatusUpdate{DeliveryID: args.DeliveryID, Series: args.Series, Status: store.DeliveryHeld})
	}
	if t.RateLimit != nil && r.shared {
		// A rate-limited endpoint's slot is booked by a job of the
		// delivery's own, which remembers it across its runs.
		return river.JobSnooze(0)
	}
	if t.RateLimit != nil {
		// Before the slot and the breaker: a wait for the rate limit uses
		// no attempt and says nothing about the endpoint.
		wait, err := w.rateWait(ctx, r, t)
		if err != nil {
			// The database is unreachable: come back later without using an attempt.
			w.deps.Logger.WarnContext(ctx, "delivery_deferred", slog.String("delivery", args.DeliveryID), slog.String("error", err.Error()))
			return river.JobSnooze(time.Second + w.jitter())
		}
		if wait > 0 {
			return w.rateLimited(r, t, wait)
		}
	}
	if !w.slots.acquire(ctx, t.ID) {
		if w.deps.Metrics != nil {
			w.deps.Metrics.ConcurrencySnoozed.WithLabelValues(w.deps.Metrics.Labels.Label(t.ID)).Inc()
		}
		return river.JobSnooze(100*time.Millisecond + w.jitter())
	}
	// The cap bounds requests in flight to the endpoint, so the slot goes
	// back as soon as an answer is in, not after the ledger's commit. After a
	// transport failure (a timeout, a reset) it is kept until the attempt is
	// recorded: the endpoint may not have seen the connection close yet.
	// A place within the process's and the host's bounds, waited for
	// within the run's start budget: past it, the delivery waits in a job
	// of its own and this run ends.
	releaseRequest, full := w.bounds.acquire(ctx, t.host(), r.startBy.Sub(w.deps.LocalNow()))
	if full != "" {
		w.slots.release(t.ID, 0)
		if w.deps.Metrics != nil {
			w.deps.Metrics.StartDeferred.WithLabelValues(string(full)).Inc()
		}
		return river.JobSnooze(100*time.Millisecond + w.jitter())
	}
	defer releaseRequest()
	if w.deps.Metrics != nil {
		w.deps.Metrics.RequestsInFlight.Inc()
		defer w.deps.Metrics.RequestsInFlight.Dec()
	}
	held := true
	var took time.Duration
	release := func() {
		if held {
			held = false
			w.slots.release(t.ID, took)
		}
	}
	defer release()

	attemptNo := r.prior + 1
	ctx, span := w.startAttemptSpan(ctx, args, attemptNo)
	defer span.End()
	adm, err := w.deps.Gate.Admit(ctx, t)
	if err != nil {
		w.deps.Logger.WarnContext(ctx, "delivery_deferred", slog.String("delivery", args.DeliveryID), slog.String("error", err.Error()))
		return river.JobSnooze(time.Second + w.jitter())
	}
	if !adm.Refused {
		// Reported once: by the attempt, or by recoverPanic.
		adm.Finish = r.guardFinish(adm.Finish)
	}
	recordDecision(span, adm)
	if adm.Refused {
		return w.refused(ctx, r, adm)
	}

	payload := []byte(args.Payload) // jobs queued by older versions carried it
	if len(payload) == 0 {
		p, err := w.payloads.get(ctx, args.MessageID)
		if errors.Is(err, errPayloadGone) && !payloadRetired(args.MessageID, w.deps.Now(), w.cfg.PayloadRetention) {
			// Retention cannot have dropped it yet: the read missed. Retry
			// (an attempt of River's, nothing sent), never expire.
			adm.Finish(ctx, Outcome{At: w.deps.Now()})
			release()
			if w.deps.Metrics != nil {
				w.deps.Metrics.PayloadMissing.Inc()
			}
			w.deps.Logger.ErrorContext(ctx, "delivery_payload_missing", slog.String("delivery", args.DeliveryID),
				slog.String("message", args.MessageID), slog.Duration("payload_retention", w.cfg.PayloadRetention))
			return fmt.Errorf("deliver %s: message %s: %w", args.DeliveryID, args.MessageID, errPayloadMissing)
		}
		if errors.Is(err, errPayloadGone) {
			// Nothing is left to send, ever: the delivery is final.
			adm.Finish(ctx, Outcome{At: w.deps.Now()})
			release()
			if w.deps.Metrics != nil {
				w.deps.Metrics.Expired.WithLabelValues(ExpiredPayload).Inc()
			}
			w.deps.Logger.WarnContext(ctx, "delivery_expired", slog.String("delivery", args.DeliveryID),
				slog.String("message", args.MessageID), slog.String("reason", ExpiredPayload))
			return w.finish(ctx, r, t.ID, store.StatusUpdate{
				DeliveryID: args.DeliveryID, Series: args.Series, Status: store.DeliveryExpired,
				LastError: ptr(errPayloadGone.Error()), Ordered: t.Ordered(),
			})
		}
		if err != nil {
			adm.Finish(ctx, Outcome{At: w.deps.Now()})
			w.deps.Logger.WarnContext(ctx, "delivery_deferred", slog.String("delivery", args.DeliveryID), slog.String("error", err.Error()))
			return river.JobSnooze(time.Second + w.jitter())
		}
		payload = p
	}

	start := w.deps.Now()
	sender := w.deps.Sender
	if t.TenantID == store.OperationalTenant && w.deps.OperationalSender != nil {
		sender = w.deps.OperationalSender
	}
	req := Request{
		URL:       t.URL,
		MessageID: args.MessageID,
		Timestamp: start,
		Body:      payload,
		Signature: t.Signature(args.MessageID, start, payload),
		Headers:   t.Headers,
		Timeout:   t.Timeout,
	}
	if !r.sendBy.IsZero() && !w.deps.Now().Before(r.sendBy) {
		// Frozen before its request (a stopped VM): River may have rescued
		// the job by now, and another run may be sending this delivery.
		// Send nothing; the delivery waits in a job of its own, if this
		// run still owns it.
		adm.Finish(context.WithoutCancel(ctx), Outcome{At: w.deps.Now()})
		if w.deps.Metrics != nil {
			w.deps.Metrics.StartDeferred.WithLabelValues(string(boundLate)).Inc()
		}
		return river.JobSnooze(100*time.Millisecond + w.jitter())
	}
	actx, cancel := attemptContext(ctx)
	resp := sender.Send(actx, req, func(s time.Time) time.Duration { return w.deps.Now().Sub(s) }, start)
	cut := context.Cause(actx)
	cancel()
	took = resp.Duration
	releaseRequest()
	if resp.Status != 0 {
		release()
	}
	if cut != nil && resp.Status == 0 {
		// Shutdown cut the request short: it says nothing about the
		// endpoint (an abandoned outcome), and the delivery is due again.
		adm.Finish(context.WithoutCancel(ctx), Outcome{At: w.deps.Now()})
		return w.cutByShutdown(ctx, r, t, attemptNo, start, resp.Duration, sender.TimeoutOf(req), cut)
	}
	class := Classify(resp.Status, resp.ErrorClass)
	recordAttemptSpan(span, class, resp)
	end := start.Add(resp.Duration)
	// The outcome must be reported even when the job's context has ended.
	adm.Finish(context.WithoutCancel(ctx), Outcome{Class: class, ErrorClass: resp.ErrorClass, At: end})
	w.count(t.ID, class, resp)

	attempt := &store.Attempt{
		DeliveryID:      args.DeliveryID,
		MessageID:       args.MessageID,
		EndpointID:      t.ID,
		AttemptNumber:   attemptNo,
		AttemptedAt:     start,
		Duration:        resp.Duration,
		ErrorClass:      string(resp.ErrorClass),
		Classification:  string(class),
		ResponseExcerpt: resp.Excerpt,
		Trial:           adm.Trial,
		Timeout:         sender.TimeoutOf(req),
	}
	update := store.StatusUpdate{
		DeliveryID:    args.DeliveryID,
		Series:        args.Series,
		AttemptCount:  attemptNo,
		LastAttemptAt: &start,
		Ordered:       t.Ordered(),
	}
	if resp.Status != 0 {
		attempt.StatusCode = &resp.Status
		update.LastStatusCode = &resp.Status
	}
	if class == ClassSuccess {
		update.Status = store.DeliveryDelivered
		return w.finishAttempt(ctx, r, t, attempt, update, time.Time{})
	}
	update.LastError = ptr(describe(resp))
	return w.retryOrFail(ctx, r, t, attempt, update, resp.Status, resp.RetryAfter, start)
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
	delay, again := sched.RetryDelay(r.inSeries+1, status, retryAfter, start, w.deps.Rand)
	if !again {
		update.Status = store.DeliveryFailed
		return w.finishAttempt(ctx, r, t, attempt, update, time.Time{})
	}
	next := start.Add(delay)
	update.Status = store.DeliveryPending
	update.NextAttemptAt = &next
	// A FIFO head's retry is a new job the ledger inserts with the
	// attempt's record: the queue behind it waits for no River completer.
	// So is a message job's delivery's: its retry is its own from then on.
	update.Requeue = (ordered || r.shared) && w.deps.Ledger.QueuesFIFO()
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
		Requeue:       (t.Ordered() || r.shared) && w.deps.Ledger.QueuesFIFO(),
	}
	return w.finishAttempt(ctx, r, t, attempt, update, now)
}

// guardFinish wraps an admission's Finish so that it reports once, and
// keeps it for recoverPanic until it has.
func (r *run) guardFinish(finish func(context.Context, Outcome)) func(context.Context, Outcome) {
	var once sync.Once
	r.finish = func(ctx context.Context, o Outcome) { once.Do(func() { finish(ctx, o) }) }
	return r.finish
}

// ErrPanic is the error class of an attempt cut by a panic in hookd's own
// code (signing, headers, tracing): recorded with the panic's message,
// classified ignore so that neither the breaker nor the tuner counts it
// against the endpoint.
const ErrPanic ErrorClass = "panic"

// ErrShutdown is the error class of an attempt whose request the
// dispatcher's shutdown cut short: recorded so the delivery's log shows
// it, classified ignore (it says nothing of the endpoint), and taking no
// step of the delivery's schedule; the delivery is due again at once.
const ErrShutdown ErrorClass = "shutdown"

// recoverPanic turns a panic in a run into one attempt of its delivery:
// the breaker's admission is given back (an abandoned outcome), the
// attempt is recorded as an error with the panic's message, and the
// delivery is retried on its schedule, or failed once it is exhausted, so
// a panic that recurs ends the delivery instead of looping. A panic after
// the run's record was handed to the ledger only logs. It never panics
// again: it runs in a message job's goroutine, where a panic would end
// the process.
func (w *Worker) recoverPanic(ctx context.Context, r *run, p any) (err error) {
	ctx = context.WithoutCancel(ctx)
	msg := Excerpt([]byte(fmt.Sprint(p)))
	w.deps.Logger.ErrorContext(ctx, "attempt_panicked", slog.String("delivery", r.args.DeliveryID),
		slog.String("endpoint", r.args.EndpointID), slog.Int64("job", r.jobID), slog.String("panic", msg),
		slog.String("stack", string(debug.Stack())))
	if w.deps.Metrics != nil {
		w.deps.Metrics.Panics.Inc()
	}
	defer func() {
		if p2 := recover(); p2 != nil {
			w.deps.Logger.ErrorContext(ctx, "attempt_panic_not_recorded", slog.String("delivery", r.args.DeliveryID), slog.String("panic", fmt.Sprint(p2)))
			err = river.JobSnooze(time.Second + w.jitter())
		}
	}()
	if r.finish != nil {
		r.finish(ctx, Outcome{At: w.deps.Now()})
	}
	if r.recorded {
		return nil
	}
	now := w.deps.Now()
	endpointID := r.args.EndpointID
	ordered := false
	if r.target != nil {
		endpointID, ordered = r.target.ID, r.target.Ordered()
	}
	attempt := &store.Attempt{
		DeliveryID:      r.args.DeliveryID,
		MessageID:       r.args.MessageID,
		EndpointID:      endpointID,
		AttemptNumber:   r.prior + 1,
		AttemptedAt:     now,
		ErrorClass:      string(ErrPanic),
		Classification:  string(ClassIgnore),
		ResponseExcerpt: "panic: " + msg,
	}
	update := store.StatusUpdate{
		DeliveryID:    r.args.DeliveryID,
		Series:        r.args.Series,
		AttemptCount:  r.prior + 1,
		LastAttemptAt: &now,
		LastError:     ptr(string(ErrPanic) + ": " + msg),
		Ordered:       ordered,
	}
	return w.retryOrFail(ctx, r, r.target, attempt, update, 0, "", now)
}

// refused handles a delivery the breaker refused. While the breaker is open
// or isolated it is parked: marked waiting with no job, so however large a
// dead endpoint's backlog grows it costs the queue nothing until the
// breaker lets traffic through and the unparker releases it. While a trial
// holds the half-open breaker (a short wait) the job is snoozed instead.
func (w *Worker) refused(ctx context.Context, r *run, adm Admission) error {
	args := r.args
	until := adm.RetryAt
	update := store.StatusUpdate{
		DeliveryID: args.DeliveryID, Series: args.Series, Status: store.DeliveryWaiting,
		BreakerOpenUntil: &until, JobID: r.jobID, Claim: r.claim(),
	}
	if w.cfg.Park && adm.Reason != breaker.ReasonHalfOpenBusy {
		update.Park = true
		r.recorded = true
		err := w.record(ctx, nil, nil, update)
		if err == nil {
			if w.deps.Metrics != nil {
				w.deps.Metrics.Parked.Inc()
			}
			return nil
		}
		// The park may have committed with its answer lost, leaving the
		// delivery to the unparker, which may release it to a new job: this
		// job's next run checks that it still owns the delivery before it
		// sends (here, and in the metadata for a run in another process).
		w.deps.Logger.WarnContext(ctx, "park_unconfirmed", slog.String("delivery", args.DeliveryID), slog.String("error", err.Error()))
		w.markUnsettled(ctx, r)
		return river.JobSnooze(max(until.Sub(w.deps.Now()), 0) + w.jitter())
	}
	w.deps.Ledger.RecordAsync(update)
	return river.JobSnooze(max(until.Sub(w.deps.Now()), 0) + w.jitter())
}

// maxUnconfirmed bounds the jobs markUnconfirmed remembers: an entry is
// dropped only when the job runs again here, and a job may run elsewhere.
const maxUnconfirmed = 10000

// markUnsettled makes the run's next turn check the ledger before it
// sends: the job's next run (here, and through its metadata in another
// process), or for a shared run the job it is handed to.
func (w *Worker) markUnsettled(ctx context.Context, r *run) {
	if r.shared {
		r.unsettled = true
		return
	}
	w.markUnconfirmed(r.jobID)
	_ = river.MetadataSet(ctx, metaUnsettled, true) // fails only outside River (unit tests)
}

// markUnconfirmed makes the job's next run in this process check that the
// job still owns its delivery.
func (w *Worker) markUnconfirmed(jobID int64) {
	if w.nUnconfirmed.Load() >= maxUnconfirmed {
		return // the job's metadata still says so
	}
	if _, had := w.unconfirmed.LoadOrStore(jobID, struct{}{}); !had {
		w.nUnconfirmed.Add(1)
	}
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
	if err := w.record(ctx, a, &rule, u); err != nil {
		// Not recorded, as far as we know: try the whole attempt again
		// later. The receiver may see it twice (at-least-once, same
		// webhook-id). The write may also have committed with its answer
		// lost (the connection broke after COMMIT went out), and a snooze
		// keeps the attempt number, so mark the job for the next run to
		// check the ledger before sending.
		w.deps.Logger.ErrorContext(ctx, "attempt_not_recorded", slog.String("delivery", u.DeliveryID), slog.String("error", err.Error()))
		if r.shared {
			r.unsettled = true
		} else {
			_ = river.MetadataSet(ctx, metaUnsettled, true) // fails only outside River (unit tests)
		}
		return river.JobSnooze(time.Second + w.jitter())
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
	err := w.record(ctx, nil, nil, u)
	if errors.Is(err, ErrHoldRefused) {
		w.deps.Endpoints.Invalidate(endpointID)
		return river.JobSnooze(0)
	}
	if err != nil {
		w.deps.Logger.ErrorContext(ctx, "status_not_recorded", slog.String("delivery", u.DeliveryID), slog.String("error", err.Error()))
		return river.JobSnooze(time.Second + w.jitter())
	}
	return nil
}

// record hands the attempt to the ledger and waits for its verdict. It does
// not give up on its own: a record abandoned while its batch is still
// being written may commit after all, and the job's next run (a snooze
// keeps its attempt number, so it does not check the ledger first) would
// send the delivery again and log a second success. The ledger answers
// every record, each flush within its own timeout.
func (w *Worker) record(ctx context.Context, a *store.Attempt, auth *store.AuthRule, u store.StatusUpdate) error {
	return w.deps.Ledger.Record(context.WithoutCancel(ctx), a, auth, u)
}

func (w *Worker) count(endpointID string, class Classification, resp Response) {
	m := w.deps.Metrics
	if m == nil {
		return
	}
	label := m.Labels.Label(endpointID)
	m.DeliveryTotal.WithLabelValues(label, string(class)).Inc()
	if resp.Status >= 500 && resp.Status <= 599 {
		m.Delivery5xxTotal.WithLabelValues(label).Inc()
	}
	m.DeliveryDuration.Observe(resp.Duration.Seconds())
}

func (w *Worker) jitter() time.Duration {
	return time.Duration(w.deps.Rand() * float64(w.cfg.SnoozeJitter))
}

func describe(r Response) string {
	if r.Status != 0 {
		return fmt.Sprintf("HTTP %d", r.Status)
	}
	if r.Err != nil {
		// url.Error repeats the endpoint URL, which may carry credentials in
		// its query: keep only the cause.
		err := r.Err
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return string(r.ErrorClass) + ": " + err.Error()
	}
	return string(r.ErrorClass)
}

// metaUnsettled is the job metadata key marking a job whose last run made
// an attempt the ledger may or may not have recorded.
const metaUnsettled = "hookd_unsettled"

// unsettled reports whether a job's metadata carries metaUnsettled. Most
// jobs have empty metadata, so the common case costs a byte search.
func unsettled(metadata []byte) bool {
	if !bytes.Contains(metadata, []byte(metaUnsettled)) {
		return false
	}
	var m map[string]json.RawMessage
	return json.Unmarshal(metadata, &m) == nil && string(m[metaUnsettled]) == "true"
}

func ptr[T any](v T) *T { return &v }
