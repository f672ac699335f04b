package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/riverqueue/river"

	"github.com/hookd/hookd/internal/store"
)

// HandOffs gives deliveries of a message job jobs of their own.
type HandOffs interface {
	HandOff(ctx context.Context, c store.Claim, hs []store.HandOff, enq store.Enqueuer) (int, error)
}

var _ HandOffs = (*store.Store)(nil)

// MessageWorker makes the first attempt of each of a message's deliveries,
// side by side, in one job (MessageArgs). Each delivery goes through the
// same steps as a delivery job's (its endpoint's breaker, concurrency cap
// and status); what would retry or snooze a delivery job is given a job
// of its own, so no delivery waits on another: a retry by the ledger in
// the transaction that records the attempt, a wait by a hand-off the
// moment it is known.
//
// A run of the job after its first (River's retry after an error, a job
// rescued from a dispatcher that died, or one a stopping dispatcher
// interrupted) reads each delivery's progress first, as a delivery job's
// retry does: a delivery the ledger settled or gave a job of its own is
// not sent again, so only the ones whose attempt was in flight may reach
// their endpoint twice.
type MessageWorker struct {
	river.WorkerDefaults[MessageArgs]
	// Worker makes each delivery's attempt.
	Worker *Worker
	// HandOffs and Queue give waiting deliveries their own jobs.
	HandOffs HandOffs
	Queue    store.Enqueuer
}

var _ river.Worker[MessageArgs] = (*MessageWorker)(nil)

// Timeout is the longest of its deliveries' (Worker.Timeout).
func (m *MessageWorker) Timeout(job *river.Job[MessageArgs]) time.Duration {
	var d time.Duration
	for _, id := range job.Args.endpointIDs() {
		d = max(d, m.Worker.timeoutFor(id))
	}
	return d
}

// NextRetry follows the dispatcher's retry schedule from the job's
// attempt: a message job fails only when an attempt was cut short
// (shutdown, its timeout) or a delivery's state could not be read or
// written.
func (m *MessageWorker) NextRetry(job *river.Job[MessageArgs]) time.Time {
	w := m.Worker
	d, ok := w.cfg.Schedule.NextDelay(job.Attempt, w.deps.Rand)
	if !ok {
		d = w.cfg.Schedule.Step(len(w.cfg.Schedule) - 1)
	}
	return w.deps.LocalNow().Add(max(d, minRetryDelay))
}

// unknownJobWait is how long a job this version cannot run waits before a
// dispatcher looks at it again.
const unknownJobWait = time.Minute

// handOffTimeout bounds one hand-off transaction: it is not cut by the
// job's end (the waits are decided), but never hangs the job forever.
const handOffTimeout = 30 * time.Second

// Work attempts every delivery of the message at once and hands off
// those that must wait the moment each knows it must (a hand-off loop
// gives each batch that is ready one transaction), so a wait never
// depends on the slowest attempt of the message.
func (m *MessageWorker) Work(ctx context.Context, job *river.Job[MessageArgs]) error {
	// River gives a job interrupted by a client's stop back its attempt
	// number, so a run after the first is known by its list of runs.
	w := m.Worker
	if !job.Args.runnable() {
		// A newer version's job (a rollback, a rolling upgrade): leave it,
		// untouched, for a dispatcher that can run it.
		w.deps.Logger.WarnContext(ctx, "job_args_unknown", slog.Int64("job", job.ID), slog.Int("version", job.Args.V),
			slog.Int("known_version", MessageArgsVersion))
		if w.deps.Metrics != nil {
			w.deps.Metrics.JobsLeft.Inc()
		}
		return river.JobSnooze(w.cfg.UnknownJobWait + w.jitter())
	}
	rerun := job.Attempt > 1 || len(job.AttemptedBy) > 1
	began := w.deps.LocalNow()
	startBy, sendBy := began.Add(w.cfg.StartBudget), w.sendBy(job.JobRow)
	deliveries := job.Args.deliveries()
	runs := make([]*run, len(deliveries))
	for i, args := range deliveries {
		runs[i] = &run{jobID: job.ID, jobAttempt: job.Attempt, rerun: rerun, startBy: startBy, sendBy: sendBy, leasedFrom: began,
			args: args, metadata: job.Metadata, shared: true}
	}
	claim := store.Claim{JobID: job.ID, Attempt: job.Attempt}
	if rerun {
		// Run again (River's retry, a rescue, a stop's interruption):
		// claim what the job still owns, in one statement, so the run this
		// one replaces writes nothing more if it is still alive somewhere
		// (frozen past the rescue), and send only what was claimed.
		ids := make([]string, len(runs))
		for i, r := range runs {
			ids[i] = r.args.DeliveryID
		}
		owned, err := w.deps.Deliveries.ClaimDeliveries(ctx, claim, ids)
		if err != nil {
			return fmt.Errorf("claim the job's deliveries: %w", err)
		}
		for _, r := range runs {
			r.claimDone = true
			if p, ok := owned[r.args.DeliveryID]; ok {
				r.claimed = &p
			}
		}
	}
	// The message's endpoints in one statement, not one load per attempt.
	endpointIDs := make([]string, len(runs))
	for i, r := range runs {
		endpointIDs[i] = r.args.EndpointID
	}
	w.deps.Endpoints.Prefetch(ctx, endpointIDs)
	errs := make([]error, len(runs))
	waits := make(chan store.HandOff, len(runs))
	var handOffErr error
	var handOffs sync.WaitGroup
	handOffs.Go(func() { handOffErr = m.handOffLoop(ctx, claim, waits) })
	// At most MaxPerJob of the job's attempts at once (a job queued by
	// an earlier version may name more endpoints than
	// MessageJobMaxEndpoints); one that gets no turn within the start
	// budget waits in a job of its own.
	turns := make(chan struct{}, w.cfg.MaxPerJob)
	var wg sync.WaitGroup
	for i := range runs {
		if !m.takeTurn(ctx, turns, startBy) {
			if w.deps.Metrics != nil {
				w.deps.Metrics.StartDeferred.WithLabelValues(string(boundJob)).Inc()
			}
			waits <- store.HandOff{DeliveryID: runs[i].args.DeliveryID, At: w.deps.LocalNow().Add(w.jitter()), Unsettled: rerun}
			continue
		}
		wg.Go(func() {
			defer func() { <-turns }()
			err := w.work(ctx, runs[i])
			var wait *waitError
			if errors.As(err, &wait) {
				waits <- store.HandOff{DeliveryID: runs[i].args.DeliveryID,
					At: w.deps.LocalNow().Add(wait.d), Unsettled: runs[i].unsettled}
				return
			}
			errs[i] = err
		})
	}
	wg.Wait()
	close(waits)
	handOffs.Wait()
	var failed []error
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Errorf("delivery %s: %w", runs[i].args.DeliveryID, err))
		}
	}
	if handOffErr != nil {
		failed = append(failed, handOffErr)
	}
	// River runs the job again later; that run sends only what is still
	// the job's and unsettled.
	return errors.Join(failed...)
}

// takeTurn takes one of a job's turns, waiting until startBy at most.
func (m *MessageWorker) takeTurn(ctx context.Context, turns chan struct{}, startBy time.Time) bool {
	if take(turns) {
		return true
	}
	t := time.NewTimer(max(startBy.Sub(m.Worker.deps.LocalNow()), 0))
	defer t.Stop()
	select {
	case turns <- struct{}{}:
		// A turn and the deadline may be ready together (a process frozen
		// past it): the deadline wins.
		if m.Worker.deps.LocalNow().Before(startBy) {
			return true
		}
		<-turns
		return false
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// handOffLoop gives the deliveries sent on waits jobs of their own until
// waits is closed: all that are ready at once in one transaction. A
// failed hand-off leaves its deliveries the job's; it returns the errors,
// and the job's next run sends them.
func (m *MessageWorker) handOffLoop(ctx context.Context, claim store.Claim, waits <-chan store.HandOff) error {
	var failed []error
	for h := range waits {
		batch := []store.HandOff{h}
	drain:
		for {
			select {
			case h, ok := <-waits:
				if !ok {
					break drain
				}
				batch = append(batch, h)
			default:
				break drain
			}
		}
		// Not cut by shutdown: the waits are decided, and the job's next
		// run would send them at once.
		if err := m.handOff(ctx, claim, batch); err != nil {
			failed = append(failed, err)
		}
	}
	return errors.Join(failed...)
}

// handOff makes one hand-off, within handOffTimeout. A panic in it (a
// hook of the queue's, say) is its error: the batch stays the job's, and
// River runs the job again, whose run sends what it still owns; the
// process and the job's other deliveries go on.
func (m *MessageWorker) handOff(ctx context.Context, claim store.Claim, batch []store.HandOff) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("hand off: panic: %v", p)
		}
	}()
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handOffTimeout)
	defer cancel()
	_, err = m.HandOffs.HandOff(hctx, claim, batch, m.Queue)
	return err
}
