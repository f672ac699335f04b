package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hookd/hookd/internal/store"
)

// LedgerStore writes batches of attempts and status updates.
type LedgerStore interface {
	RecordBatch(ctx context.Context, b store.LedgerBatch, after store.AfterDisable) (store.LedgerResult, error)
}

var _ LedgerStore = (*store.Store)(nil)

// Ledger is a group-commit writer for the delivery log. Workers hand it an
// attempt and a status update and (for Record) wait until the transaction
// holding them commits, so a job is only completed once its attempt is
// durable; many workers' records share one transaction.
type Ledger struct {
	store    LedgerStore
	logger   *slog.Logger
	maxBatch int
	linger   time.Duration
	cfg      LedgerConfig

	mu      sync.Mutex
	pending []ledgerEntry
	// ordered counts the pending records of FIFO endpoints.
	ordered int
	wake    chan struct{}
	stopped bool
	done    chan struct{}
	// Flushes counts committed batches (for tests and the benchmark).
	flushes int64
}

type ledgerEntry struct {
	attempt *store.Attempt
	auth    *store.AuthRule
	update  store.StatusUpdate
	result  chan error // nil for fire-and-forget updates
}

// ErrHoldRefused is returned by Record for a held status that was not
// applied because the endpoint was enabled meanwhile: run the job again.
var ErrHoldRefused = errors.New("endpoint enabled again; delivery not held")

// DefaultLedgerWriteTimeout is how long a ledger write waits for PostgreSQL
// by default: long enough to ride out a failover, short enough that a
// stalled server fails the batch and its jobs retry.
const DefaultLedgerWriteTimeout = 30 * time.Second

// LedgerConfig tunes a Ledger.
type LedgerConfig struct {
	// AfterDisable runs inside the transaction that auto-disables
	// endpoints (to queue operational webhooks atomically).
	AfterDisable store.AfterDisable
	// OnDisabled is told, after the commit, of endpoints auto-disabled.
	OnDisabled func([]store.AutoDisable)
	// Queue inserts the job of the next delivery of a FIFO queue whose
	// head a batch made final, in the batch's transaction; nil leaves the
	// queues to the unparker's pass.
	Queue store.Enqueuer
	// WriteTimeout bounds one batch's write, its tries after failures
	// that wrote nothing included. Default DefaultLedgerWriteTimeout.
	WriteTimeout time.Duration
	// OnRetry is told of each try of a batch after a failure that wrote
	// nothing (a metric); nil: none.
	OnRetry func()
	// MaxBatch caps the records in one transaction. Default 500.
	MaxBatch int
	// Linger is how long the flusher waits for more records after the first
	// arrives when the previous flush was small. Default 2ms.
	Linger time.Duration
	// Fleet returns how many dispatchers share the database (Fleet.Live);
	// nil: this one alone. In a fleet of n the flusher spaces its flushes
	// by n - 1 times the last one's length (at most MaxSpacing), so that
	// the fleet commits about as often as one dispatcher would at the
	// same total rate, each batch as large: flushed back to back, n
	// processes would each commit batches n times smaller, and
	// PostgreSQL's cost per delivery would grow with n.
	Fleet func() int
	// MaxSpacing caps that spacing. Default 300ms: a record waits for its
	// commit only to complete its job (its request went out before), and
	// a cap under n - 1 flushes' length leaves the fleet committing more
	// often than one dispatcher.
	MaxSpacing time.Duration
	// MaxOrderedSpacing caps the spacing while a FIFO endpoint's record
	// (StatusUpdate.Ordered) is pending: its queue's next delivery waits
	// for this commit. Default 100ms.
	MaxOrderedSpacing time.Duration
	// MinSpacedBatch is the smallest flush spaced so: a process whose
	// flushes hold fewer records is not busy enough for a wait to grow its
	// batches, and its records (a FIFO queue's head, whose next delivery
	// waits for this commit) would only wait. Default 16.
	MinSpacedBatch int
	// Now is the clock flushes are timed with; nil: time.Now.
	Now func() time.Time
}

// NewLedger returns a ledger; call Run to start flushing.
func NewLedger(s LedgerStore, logger *slog.Logger, cfg LedgerConfig) *Ledger {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 500
	}
	if cfg.Linger <= 0 {
		cfg.Linger = 2 * time.Millisecond
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultLedgerWriteTimeout
	}
	if cfg.MaxSpacing <= 0 {
		cfg.MaxSpacing = 300 * time.Millisecond
	}
	if cfg.MaxOrderedSpacing <= 0 {
		cfg.MaxOrderedSpacing = 100 * time.Millisecond
	}
	if cfg.MinSpacedBatch <= 0 {
		cfg.MinSpacedBatch = 16
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Ledger{
		store:    s,
		logger:   logger,
		maxBatch: cfg.MaxBatch,
		linger:   cfg.Linger,
		cfg:      cfg,
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
}

// QueuesFIFO reports whether the ledger inserts the jobs of FIFO queues
// (LedgerConfig.Queue): the next delivery of a queue, and a head's retry.
func (l *Ledger) QueuesFIFO() bool { return l.cfg.Queue != nil }

// ErrLedgerStopped is returned for records handed to a stopped ledger.
var ErrLedgerStopped = fmt.Errorf("ledger stopped")

// Record writes an attempt (may be nil; auth is its endpoint's auto-disable
// rule) and a status update and waits for the commit.
func (l *Ledger) Record(ctx context.Context, a *store.Attempt, auth *store.AuthRule, u store.StatusUpdate) error {
	res := make(chan error, 1)
	if !l.enqueue(ledgerEntry{attempt: a, auth: auth, update: u, result: res}) {
		return ErrLedgerStopped
	}
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RecordAsync queues a status update without waiting: for statuses whose
// loss a later write repairs (waiting).
func (l *Ledger) RecordAsync(u store.StatusUpdate) {
	l.enqueue(ledgerEntry{update: u})
}

func (l *Ledger) enqueue(e ledgerEntry) bool {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return false
	}
	l.pending = append(l.pending, e)
	if e.update.Ordered {
		l.ordered++
	}
	// Only a record that can end Run's wait wakes it: the first (Run
	// waits for one), the one that fills a batch, a FIFO endpoint's (its
	// cap may have passed). The others join the batch Run is waiting
	// out; waking Run for each (only to wait again) cost a goroutine
	// switch per delivery, most of all in a fleet, whose spacing keeps
	// Run waiting most of the time.
	wake := len(l.pending) == 1 || len(l.pending) >= l.maxBatch || e.update.Ordered
	l.mu.Unlock()
	if wake {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// Run flushes until Stop, then flushes what is left and returns.
func (l *Ledger) Run(ctx context.Context) {
	defer close(l.done)
	var spaceUntil, orderedUntil time.Time
	for {
		l.mu.Lock()
		n := len(l.pending)
		stopped := l.stopped
		l.mu.Unlock()
		if n == 0 {
			if stopped {
				return
			}
			<-l.wake
			continue
		}
		if n < l.maxBatch && !stopped {
			// Let concurrent workers join this transaction, and in a
			// fleet let the batch grow for the fleet's spacing.
			now := l.cfg.Now()
			l.waitFor(max(l.linger, spaceUntil.Sub(now)), max(l.linger, orderedUntil.Sub(now)))
		}
		began := l.cfg.Now()
		size := l.flush(ctx)
		ended := l.cfg.Now()
		spacing := l.spacing(ended.Sub(began), size)
		spaceUntil = ended.Add(min(spacing, l.cfg.MaxSpacing))
		orderedUntil = ended.Add(min(spacing, l.cfg.MaxOrderedSpacing))
	}
}

// spacing is how long after a flush of size records that took took the
// next one waits in a fleet (LedgerConfig.Fleet), before its caps.
func (l *Ledger) spacing(took time.Duration, size int) time.Duration {
	if l.cfg.Fleet == nil || size < l.cfg.MinSpacedBatch {
		return 0
	}
	n := l.cfg.Fleet()
	if n <= 1 {
		return 0
	}
	return time.Duration(n-1) * took
}

// waitFor waits d, or less once a full batch is pending or Stop is
// called, or once ordered has passed with a FIFO endpoint's record
// pending.
func (l *Ledger) waitFor(d, ordered time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	var orderedDue <-chan time.Time
	if ordered < d {
		o := time.NewTimer(ordered)
		defer o.Stop()
		orderedDue = o.C
	}
	orderedPassed := false
	for {
		select {
		case <-t.C:
			return
		case <-orderedDue:
			orderedDue, orderedPassed = nil, true
		case <-l.wake:
		}
		l.mu.Lock()
		done := len(l.pending) >= l.maxBatch || l.stopped || (orderedPassed && l.ordered > 0)
		l.mu.Unlock()
		if done {
			return
		}
	}
}

// write writes the batch, again after each failure that wrote nothing
// and that a retry may not meet (store.IsTransient: no connection to be
// had, the server restarting, a deadlock), until ctx ends. The batch
// records attempts that were sent: failed, each would be sent again.
func (l *Ledger) write(ctx context.Context, b store.LedgerBatch) (store.LedgerResult, error) {
	wait := ledgerRetryFirst
	for try := 1; ; try++ {
		res, err := l.store.RecordBatch(ctx, b, l.cfg.AfterDisable)
		if err == nil || !store.IsTransient(err) || ctx.Err() != nil {
			return res, err
		}
		l.logger.Warn("ledger_flush_retry", slog.Int("try", try), slog.Int("attempts", len(b.Attempts)),
			slog.Int("updates", len(b.Updates)), slog.String("error", err.Error()))
		if l.cfg.OnRetry != nil {
			l.cfg.OnRetry()
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return res, err
		}
		wait = min(2*wait, ledgerRetryMax)
	}
}

// ledgerRetryFirst and ledgerRetryMax bound the wait between tries of a
// batch whose write wrote nothing.
const (
	ledgerRetryFirst = 20 * time.Millisecond
	ledgerRetryMax   = time.Second
)

// Stop makes Run flush the remaining records and return; it waits for that.
func (l *Ledger) Stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	<-l.done
}

// flush writes the pending records (at most a batch) and returns how
// many it took.
func (l *Ledger) flush(ctx context.Context) int {
	l.mu.Lock()
	batch := l.pending
	if len(batch) > l.maxBatch {
		batch = batch[:l.maxBatch]
	}
	l.pending = append([]ledgerEntry(nil), l.pending[len(batch):]...)
	for _, e := range batch {
		if e.update.Ordered {
			l.ordered--
		}
	}
	l.mu.Unlock()

	b := store.LedgerBatch{
		Attempts: make([]store.Attempt, 0, len(batch)),
		Updates:  make([]store.StatusUpdate, 0, len(batch)),
		Queue:    l.cfg.Queue,
	}
	for _, e := range batch {
		if e.attempt != nil {
			b.Attempts = append(b.Attempts, *e.attempt)
			if e.auth != nil {
				if b.AuthRules == nil {
					b.AuthRules = map[string]store.AuthRule{}
				}
				b.AuthRules[e.attempt.EndpointID] = *e.auth
			}
		}
		if e.update.DeliveryID != "" {
			b.Updates = append(b.Updates, e.update)
		}
	}
	// The write must not die with the caller's context: a worker that got a
	// 2xx must see its attempt recorded even during shutdown.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.WriteTimeout)
	res, err := l.write(wctx, b)
	cancel()
	if err != nil {
		l.logger.Error("ledger_flush", slog.Int("attempts", len(b.Attempts)), slog.Int("updates", len(b.Updates)), slog.String("error", err.Error()))
	} else {
		l.mu.Lock()
		l.flushes++
		l.mu.Unlock()
		if len(res.Disabled) > 0 && l.cfg.OnDisabled != nil {
			l.cfg.OnDisabled(res.Disabled)
		}
	}
	for _, e := range batch {
		if e.result == nil {
			continue
		}
		if err == nil && res.HoldRefused[e.update.DeliveryID] {
			e.result <- ErrHoldRefused
			continue
		}
		e.result <- err
	}
	return len(batch)
}
