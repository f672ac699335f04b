package delivery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookd/hookd/internal/store"
)

// HandOffs gives deliveries of a message job jobs of their own.
type HandOffs interface {
	HandOff(ctx context.Context, jobID int64, hs []store.HandOff, enq store.Enqueuer) (int, error)
}

var _ HandOffs = (*store.Store)(nil)

// MessageWorker makes the first attempt of each of a message's deliveries,
// side by side, in one job (MessageArgs). Each delivery goes through the
// same steps as a delivery job's (its endpoint's breaker, concurrency cap
// and status); what would retry or snooze a delivery job is given a job
// of its own, so no delivery waits on another: a retry by the ledger in
// the transaction that records the attempt, a wait by a handoff when the
// others are done.
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
	for _, id := range job.Args.Endpoints {
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

// Work attempts every delivery of the message at once and hands off
// those that must wait.
func (m *MessageWorker) Work(ctx context.Context, job *river.Job[MessageArgs]) error {
	// River gives a job interrupted by a client's stop back its attempt
	// number, so a run after the first is known by its list of runs.
	rerun := job.Attempt > 1 || len(job.AttemptedBy) > 1
	runs := make([]*run, len(job.Args.Endpoints))
	for i, endpointID := range job.Args.Endpoints {
		runs[i] = &run{jobID: job.ID, jobAttempt: job.Attempt, rerun: rerun,
			args: job.Args.delivery(endpointID), metadata: job.Metadata, shared: true}
	}
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() { errs[i] = m.Worker.work(ctx, runs[i]) })
	}
	wg.Wait()
	now := m.Worker.deps.LocalNow()
	var (
		hs     []store.HandOff
		failed []error
	)
	for i, err := range errs {
		var snooze *rivertype.JobSnoozeError
		switch {
		case err == nil:
		case errors.As(err, &snooze):
			hs = append(hs, store.HandOff{DeliveryID: runs[i].args.DeliveryID, At: now.Add(snooze.Duration), Unsettled: runs[i].unsettled})
		default:
			failed = append(failed, fmt.Errorf("delivery %s: %w", runs[i].args.DeliveryID, err))
		}
	}
	if len(hs) > 0 {
		// Not cut by shutdown: the waits are decided, and the job's next
		// run would send them at once.
		if _, err := m.HandOffs.HandOff(context.WithoutCancel(ctx), job.ID, hs, m.Queue); err != nil {
			failed = append(failed, err)
		}
	}
	// River runs the job again later; that run sends only what is still
	// the job's and unsettled.
	return errors.Join(failed...)
}
