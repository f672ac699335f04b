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
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/destination"
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
	// EndBy, for a trial, is the latest its request may end (on the
	// worker's clock) while its slot's lease still has room to record the
	// outcome; zero means no bound.
	EndBy time.Time
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
	// Publisher publishes to the endpoints whose type is not http (a
	// destination.Pool); nil fails their attempts as unreachable.
	Publisher Publisher
	Metrics   *Metrics
	Logger    *slog.Logger
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
	// Lease says whether this process may still start a run's requests:
	// whether the fleet can have taken its jobs since the run began
	// (Fleet.HoldsSince). Nil: always.
	Lease Lease
}

// Publisher publishes one attempt to a non-HTTP destination and says
// what came of it, never past ctx's deadline.
type Publisher interface {
	Publish(ctx context.Context, c destination.Config, m destination.Message) destination.Result
}

var _ Publisher = (*destination.Pool)(nil)

// Lease is this process's hold on its running jobs.
type Lease interface {
	// HoldsSince reports whether the process holds its lease and has
	// held it without a break since t (Fleet.HoldsSince).
	HoldsSince(t time.Time) bool
}

var _ Lease = (*Fleet)(nil)

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
			err = waitFor(time.Second + w.jitter())
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
		AttemptNumber:   r.deliveryAttempts + 1,
		AttemptedAt:     now,
		ErrorClass:      string(ErrPanic),
		Classification:  string(ClassIgnore),
		ResponseExcerpt: "panic: " + msg,
	}
	update := store.StatusUpdate{
		DeliveryID:    r.args.DeliveryID,
		Series:        r.args.Series,
		AttemptCount:  r.deliveryAttempts + 1,
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
		err := w.toLedger(ctx, nil, nil, update)
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
		return waitFor(max(until.Sub(w.deps.Now()), 0) + w.jitter())
	}
	w.deps.Ledger.RecordAsync(update)
	return waitFor(max(until.Sub(w.deps.Now()), 0) + w.jitter())
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
