package delivery_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
)

// failingLedgerStore fails its first fails writes with err, then writes.
type failingLedgerStore struct {
	mu    sync.Mutex
	fails int
	err   error
	calls int
}

func (f *failingLedgerStore) RecordBatch(context.Context, store.LedgerBatch, store.AfterDisable) (store.LedgerResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.calls <= f.fails {
		return store.LedgerResult{}, f.err
	}
	return store.LedgerResult{}, nil
}

// TestLedgerRidesOutWritesThatWroteNothing: a record of an attempt that
// was sent is written however often its batch first fails for want of a
// connection (the server's connection limit, a restart) or a deadlock,
// within the write timeout: failed, the attempt would be sent again. A
// COMMIT whose outcome is unknown, or a write that keeps failing past the
// timeout, is still the record's error (the job checks the ledger
// before it sends again).
func TestLedgerRidesOutWritesThatWroteNothing(t *testing.T) {
	t.Parallel()
	tooMany := &pgconn.PgError{Code: "53300", Message: "sorry, too many clients already"}
	for _, tc := range []struct {
		name      string
		fails     int
		err       error
		timeout   time.Duration
		wantErr   bool
		wantCalls int
	}{
		{"too many connections, three times", 3, fmt.Errorf("begin: %w", tooMany), time.Minute, false, 4},
		{"deadlock", 1, &pgconn.PgError{Code: "40P01"}, time.Minute, false, 2},
		{"connection refused", 2, fmt.Errorf("begin: %w", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}), time.Minute, false, 3},
		{"commit outcome unknown", 1, fmt.Errorf("commit: %w: %w", store.ErrCommitUnknown, errors.New("conn reset")), time.Minute, true, 1},
		{"not transient", 1, &pgconn.PgError{Code: "23502"}, time.Minute, true, 1},
		{"past the write timeout", 1 << 30, tooMany, 300 * time.Millisecond, true, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := &failingLedgerStore{fails: tc.fails, err: tc.err}
			l := delivery.NewLedger(st, slog.New(slog.DiscardHandler), delivery.LedgerConfig{WriteTimeout: tc.timeout})
			var wg sync.WaitGroup
			wg.Go(func() { l.Run(context.Background()) })
			defer func() {
				l.Stop()
				wg.Wait()
			}()
			err := l.Record(context.Background(), &store.Attempt{DeliveryID: "dlv_1", AttemptNumber: 1}, nil,
				store.StatusUpdate{DeliveryID: "dlv_1", Series: 1, Status: store.DeliveryDelivered, AttemptCount: 1})
			if tc.wantErr {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
			st.mu.Lock()
			defer st.mu.Unlock()
			if tc.wantCalls >= 0 {
				require.Equal(t, tc.wantCalls, st.calls)
			} else {
				require.Greater(t, st.calls, 1, "retried until the timeout")
			}
		})
	}
}

// clockedLedgerStore's writes take an hour on its clock; it tells
// batches of each write's size.
type clockedLedgerStore struct {
	mu      sync.Mutex
	now     time.Time
	batches chan int
}

func (c *clockedLedgerStore) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clockedLedgerStore) RecordBatch(_ context.Context, b store.LedgerBatch, _ store.AfterDisable) (store.LedgerResult, error) {
	c.mu.Lock()
	c.now = c.now.Add(time.Hour)
	c.mu.Unlock()
	c.batches <- len(b.Updates)
	return store.LedgerResult{}, nil
}

// TestLedgerSpacingGivesWayToAFullBatchAndStop: in a fleet the ledger
// spaces its flushes (here by the cap, an hour: the last flush took an
// hour), but a full batch is written at once, and so is what is pending
// at Stop.
func TestLedgerSpacingGivesWayToAFullBatchAndStop(t *testing.T) {
	t.Parallel()
	st := &clockedLedgerStore{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), batches: make(chan int, 10)}
	l := delivery.NewLedger(st, slog.New(slog.DiscardHandler), delivery.LedgerConfig{
		MaxBatch: 3, Fleet: func() int { return 4 }, MaxSpacing: time.Hour, MinSpacedBatch: 1, Now: st.Now,
	})
	var wg sync.WaitGroup
	wg.Go(func() { l.Run(context.Background()) })
	update := func(i int) store.StatusUpdate {
		return store.StatusUpdate{DeliveryID: fmt.Sprintf("dlv_%d", i), Series: 1, Status: store.DeliveryDelivered, AttemptCount: 1}
	}
	require.NoError(t, l.Record(context.Background(), nil, nil, update(0)))
	require.Equal(t, 1, <-st.batches)
	// The next flush is spaced by an hour unless its batch is full.
	var records sync.WaitGroup
	for i := 1; i <= 3; i++ {
		records.Go(func() { require.NoError(t, l.Record(context.Background(), nil, nil, update(i))) })
	}
	records.Wait()
	require.Equal(t, 3, <-st.batches, "a full batch is written without waiting out the spacing")
	l.RecordAsync(update(4))
	l.Stop()
	wg.Wait()
	require.Equal(t, 1, <-st.batches, "Stop writes what is pending")
}

// TestLedgerSpacingGivesWayToAFIFORecordAtItsOwnCap: in a fleet the
// ledger spaces its flushes by up to MaxSpacing (here an hour), but a FIFO
// endpoint's record, whose queue's next delivery waits for its commit,
// waits only up to MaxOrderedSpacing, and the records pending before it
// go in the same batch.
func TestLedgerSpacingGivesWayToAFIFORecordAtItsOwnCap(t *testing.T) {
	t.Parallel()
	st := &clockedLedgerStore{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), batches: make(chan int, 10)}
	l := delivery.NewLedger(st, slog.New(slog.DiscardHandler), delivery.LedgerConfig{
		MaxBatch: 100, Fleet: func() int { return 4 }, MaxSpacing: time.Hour, MaxOrderedSpacing: time.Millisecond,
		MinSpacedBatch: 1, Now: st.Now,
	})
	var wg sync.WaitGroup
	wg.Go(func() { l.Run(context.Background()) })
	defer func() {
		l.Stop()
		wg.Wait()
	}()
	update := func(i int) store.StatusUpdate {
		return store.StatusUpdate{DeliveryID: fmt.Sprintf("dlv_%d", i), Series: 1, Status: store.DeliveryDelivered, AttemptCount: 1}
	}
	require.NoError(t, l.Record(context.Background(), nil, nil, update(0)))
	require.Equal(t, 1, <-st.batches)
	// The next flush is spaced by the hour the last one took, capped by
	// the hour, until a FIFO endpoint's record comes.
	// A minute stands for the hour: a FIFO record not written by then
	// waited out the longer cap.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l.RecordAsync(update(1))
	fifo := update(2)
	fifo.Ordered = true
	require.NoError(t, l.Record(ctx, nil, nil, fifo))
	require.Equal(t, 2, <-st.batches, "the FIFO record's flush takes the record pending before it")
	// Its flush is spaced again; another FIFO record again waits only
	// for its own cap.
	fifo = update(3)
	fifo.Ordered = true
	require.NoError(t, l.Record(ctx, nil, nil, fifo))
	require.Equal(t, 1, <-st.batches)
}

// TestLedgerDoesNotSpaceSmallFlushes: a flush of fewer records than
// MinSpacedBatch (a process not busy enough for a wait to grow its
// batches, or a FIFO queue's head whose next delivery waits for the
// commit) is followed by the next at once, even in a fleet, even when it
// took an hour.
func TestLedgerDoesNotSpaceSmallFlushes(t *testing.T) {
	t.Parallel()
	st := &clockedLedgerStore{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), batches: make(chan int, 10)}
	l := delivery.NewLedger(st, slog.New(slog.DiscardHandler), delivery.LedgerConfig{
		MaxBatch: 100, Fleet: func() int { return 4 }, MaxSpacing: time.Hour, MinSpacedBatch: 2, Now: st.Now,
	})
	var wg sync.WaitGroup
	wg.Go(func() { l.Run(context.Background()) })
	defer func() {
		l.Stop()
		wg.Wait()
	}()
	for i := range 3 {
		require.NoError(t, l.Record(context.Background(), nil, nil,
			store.StatusUpdate{DeliveryID: fmt.Sprintf("dlv_%d", i), Series: 1, Status: store.DeliveryDelivered, AttemptCount: 1}))
		require.Equal(t, 1, <-st.batches)
	}
}
