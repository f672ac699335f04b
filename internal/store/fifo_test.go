package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
)

// queued is a delivery of a FIFO queue as the tests look at it.
type queued struct {
	id, status, reason string
	job                bool
	createdAt          time.Time
}

// fifoEndpoint creates a FIFO endpoint of tenant acme.
func (b *testBundle) fifoEndpoint(t *testing.T, onExhausted string) store.Endpoint {
	t.Helper()
	e, err := b.store.CreateEndpoint(context.Background(), store.Endpoint{
		TenantID: "acme", URL: "https://example.com/fifo", Secret: testSecret,
		Ordering: store.OrderingFIFO, OnExhausted: onExhausted,
	})
	require.NoError(t, err)
	return e
}

// send accepts n messages of tenant acme in one group and returns their
// ids in order.
func (b *testBundle) send(t *testing.T, n int) []string {
	t.Helper()
	ins := make([]store.NewMessage, n)
	for i := range ins {
		ins[i] = store.NewMessage{TenantID: "acme", EventType: "order.created", Payload: json.RawMessage(fmt.Sprintf(`{"n": %d}`, i))}
	}
	res, err := b.store.CreateMessages(context.Background(), ins, b.enq)
	require.NoError(t, err)
	ids := make([]string, n)
	for i, r := range res {
		ids[i] = r.Message.ID
	}
	return ids
}

// queue returns an endpoint's deliveries in queue (created_at) order, by
// message id.
func (b *testBundle) queue(t *testing.T, endpointID string) (order []string, byMessage map[string]queued) {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `
		SELECT message_id, id, status, coalesce(park_reason, ''), job_id IS NOT NULL, created_at
		FROM deliveries WHERE endpoint_id = $1 ORDER BY created_at, id`, endpointID)
	require.NoError(t, err)
	defer rows.Close()
	byMessage = map[string]queued{}
	for rows.Next() {
		var m string
		var q queued
		require.NoError(t, rows.Scan(&m, &q.id, &q.status, &q.reason, &q.job, &q.createdAt))
		order = append(order, m)
		byMessage[m] = q
	}
	require.NoError(t, rows.Err())
	return order, byMessage
}

// heads returns the deliveries of the endpoint that are not final and
// have a job.
func (b *testBundle) heads(t *testing.T, endpointID string) []string {
	t.Helper()
	order, by := b.queue(t, endpointID)
	var out []string
	for _, m := range order {
		if q := by[m]; q.job && (q.status == store.DeliveryPending || q.status == store.DeliveryWaiting) {
			out = append(out, m)
		}
	}
	return out
}

// finish records an attempt's final status for a FIFO delivery, as the
// ledger does.
func (b *testBundle) finish(t *testing.T, deliveryID, status string) {
	t.Helper()
	at := time.Now()
	_, err := b.store.RecordBatch(context.Background(), store.LedgerBatch{
		Updates: []store.StatusUpdate{{DeliveryID: deliveryID, Series: b.series(t, deliveryID), Status: status,
			AttemptCount: 1, LastAttemptAt: &at, Ordered: true}},
		Queue: b.enq,
	}, nil)
	require.NoError(t, err)
}

func (b *testBundle) series(t *testing.T, deliveryID string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT series FROM deliveries WHERE id = $1`, deliveryID).Scan(&n))
	return n
}

// TestFIFOQueueSendsOneAtATimeInAcceptanceOrder: a FIFO endpoint's
// deliveries are stamped in acceptance order, only the head has a job,
// and each final status gives the next one its job in the same
// transaction, until the queue is idle and a new message goes at once.
func TestFIFOQueueSendsOneAtATimeInAcceptanceOrder(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	e := b.fifoEndpoint(t, store.ExhaustedSkip)
	other := b.endpoint(t, "acme")
	accepted := append(b.send(t, 3), b.send(t, 2)...)

	order, by := b.queue(t, e.ID)
	require.Equal(t, accepted, order, "created_at order is acceptance order")
	for i, m := range order {
		q := by[m]
		if i == 0 {
			require.Equal(t, store.DeliveryPending, q.status)
			require.True(t, q.job)
			continue
		}
		require.True(t, q.createdAt.After(by[order[i-1]].createdAt), "strictly increasing stamps")
		require.Equal(t, store.DeliveryWaiting, q.status)
		require.Equal(t, store.ParkFIFO, q.reason)
		require.False(t, q.job)
	}
	require.Len(t, b.heads(t, other.ID), 5, "an unordered endpoint beside it gets every job at once")

	var sent []string
	for range accepted {
		heads := b.heads(t, e.ID)
		require.Len(t, heads, 1, "one delivery of the queue has a job")
		sent = append(sent, heads[0])
		b.finish(t, by[heads[0]].id, store.DeliveryDelivered)
	}
	require.Equal(t, accepted, sent)
	require.Empty(t, b.heads(t, e.ID))

	next := b.send(t, 1)
	require.Equal(t, next, b.heads(t, e.ID), "an idle queue's new delivery is its head at once")
}

// TestFIFOExhaustedHead: with on_exhausted skip a failed head lets the
// next go; with block it stops the queue until the head is skipped (the
// next goes, the head stays failed) or retried (the head goes again,
// first).
func TestFIFOExhaustedHead(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	skip := b.fifoEndpoint(t, store.ExhaustedSkip)
	block := b.fifoEndpoint(t, store.ExhaustedBlock)
	accepted := b.send(t, 4)
	_, skipQ := b.queue(t, skip.ID)
	_, blockQ := b.queue(t, block.ID)

	b.finish(t, skipQ[accepted[0]].id, store.DeliveryFailed)
	require.Equal(t, accepted[1:2], b.heads(t, skip.ID), "skip: the next goes")

	b.finish(t, blockQ[accepted[0]].id, store.DeliveryFailed)
	require.Empty(t, b.heads(t, block.ID), "block: the queue stops")
	got, err := s.GetEndpoint(ctx, block.ID)
	require.NoError(t, err)
	require.Equal(t, blockQ[accepted[0]].id, *got.BlockedBy)
	_, err = s.SkipDelivery(ctx, blockQ[accepted[1]].id, "test", b.enq)
	require.ErrorIs(t, err, store.ErrNotSkippable, "only the blocking delivery can be skipped")
	_, err = s.SkipDelivery(ctx, skipQ[accepted[0]].id, "test", b.enq)
	require.ErrorIs(t, err, store.ErrNotSkippable, "a skip queue's failed head blocks nothing")

	d, err := s.SkipDelivery(ctx, blockQ[accepted[0]].id, "test", b.enq)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryFailed, d.Status, "a skipped delivery stays failed")
	require.Equal(t, accepted[1:2], b.heads(t, block.ID))
	got, err = s.GetEndpoint(ctx, block.ID)
	require.NoError(t, err)
	require.Nil(t, got.BlockedBy)

	// The next head blocks too; a retry sends it again, ahead of the rest.
	b.finish(t, blockQ[accepted[1]].id, store.DeliveryFailed)
	require.Empty(t, b.heads(t, block.ID))
	_, err = s.RetryDelivery(ctx, blockQ[accepted[1]].id, b.enq)
	require.NoError(t, err)
	require.Equal(t, accepted[1:2], b.heads(t, block.ID), "the retried head goes first")
	order, _ := b.queue(t, block.ID)
	require.Equal(t, accepted, order, "it kept its place")
	got, err = s.GetEndpoint(ctx, block.ID)
	require.NoError(t, err)
	require.Nil(t, got.BlockedBy)
	b.finish(t, blockQ[accepted[1]].id, store.DeliveryDelivered)
	require.Equal(t, accepted[2:3], b.heads(t, block.ID))
}

// TestFIFORetryJoinsTheTail: a failed delivery retried while its queue is
// sending goes behind every delivery already queued, so the queue never
// has two deliveries in flight nor sends an older one beside a younger.
func TestFIFORetryJoinsTheTail(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.fifoEndpoint(t, store.ExhaustedSkip)
	accepted := b.send(t, 3)
	_, q := b.queue(t, e.ID)
	b.finish(t, q[accepted[0]].id, store.DeliveryFailed)
	require.Equal(t, accepted[1:2], b.heads(t, e.ID))

	_, err := s.RetryDelivery(ctx, q[accepted[0]].id, b.enq)
	require.NoError(t, err)
	require.Equal(t, accepted[1:2], b.heads(t, e.ID), "the head in flight is alone")
	later := b.send(t, 1)
	order, _ := b.queue(t, e.ID)
	require.Equal(t, []string{accepted[1], accepted[2], accepted[0], later[0]}, order)

	var sent []string
	for range 4 {
		heads := b.heads(t, e.ID)
		require.Len(t, heads, 1)
		sent = append(sent, heads[0])
		_, by := b.queue(t, e.ID)
		b.finish(t, by[heads[0]].id, store.DeliveryDelivered)
	}
	require.Equal(t, order, sent)
}

// TestFIFOHeadRetryIsANewJob: a FIFO head's failed attempt whose retry
// is requeued gets a new job in the ledger's transaction, due at its next
// attempt; the queue still has one delivery with a job.
func TestFIFOHeadRetryIsANewJob(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.fifoEndpoint(t, store.ExhaustedSkip)
	accepted := b.send(t, 2)
	_, q := b.queue(t, e.ID)
	head := q[accepted[0]]
	before, err := s.GetDelivery(ctx, head.id)
	require.NoError(t, err)
	at := time.Now()
	next := at.Add(300 * time.Millisecond)
	_, err = s.RecordBatch(ctx, store.LedgerBatch{Updates: []store.StatusUpdate{{DeliveryID: head.id, Series: 1, Status: store.DeliveryPending,
		AttemptCount: 1, LastAttemptAt: &at, NextAttemptAt: &next, Ordered: true, Requeue: true}}, Queue: b.enq}, nil)
	require.NoError(t, err)
	after, err := s.GetDelivery(ctx, head.id)
	require.NoError(t, err)
	require.NotEqual(t, *before.JobID, *after.JobID, "a new job")
	require.Equal(t, store.DeliveryPending, after.Status)
	require.WithinDuration(t, next, *after.NextAttemptAt, time.Millisecond)
	require.Equal(t, accepted[:1], b.heads(t, e.ID))
	queued := b.enq.queued[len(b.enq.queued)-1]
	require.Equal(t, head.id, queued.ID)
	require.Equal(t, 1, queued.AttemptCount, "the new job counts the attempt made")
}

// TestFIFOHeadParkedByItsBreaker: a head its open breaker parked keeps the
// queue's turn: a ledger flush never releases it or a later delivery;
// the unparker's AdvanceQueue (the breaker lets traffic through) gives
// the head, not a later one, its job back.
func TestFIFOHeadParkedByItsBreaker(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.fifoEndpoint(t, store.ExhaustedSkip)
	accepted := b.send(t, 3)
	_, q := b.queue(t, e.ID)
	head := q[accepted[0]]
	job := int64(0)
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT job_id FROM deliveries WHERE id = $1`, head.id).Scan(&job))
	until := time.Now().Add(time.Minute)
	require.NoError(t, s.RecordLedger(ctx, nil, []store.StatusUpdate{{DeliveryID: head.id, Series: 1, Status: store.DeliveryWaiting,
		BreakerOpenUntil: &until, Park: true, JobID: job, Ordered: true}}))
	require.Empty(t, b.heads(t, e.ID), "parked")

	parked, err := s.ParkedEndpoints(ctx, []string{e.ID})
	require.NoError(t, err)
	require.Len(t, parked, 1)
	require.True(t, parked[0].FIFO)
	require.Equal(t, 3, parked[0].Parked)

	more := b.send(t, 1)
	require.Empty(t, b.heads(t, e.ID), "a new message waits behind the parked head")
	require.NoError(t, s.AdvanceQueue(ctx, e.ID, b.enq))
	require.Equal(t, accepted[:1], b.heads(t, e.ID), "the head goes first")
	require.NoError(t, s.AdvanceQueue(ctx, e.ID, b.enq))
	require.Equal(t, accepted[:1], b.heads(t, e.ID), "and alone")
	b.finish(t, head.id, store.DeliveryDelivered)
	require.Equal(t, accepted[1:2], b.heads(t, e.ID))
	order, _ := b.queue(t, e.ID)
	require.Equal(t, append(accepted, more...), order)
}

// TestFIFODisabledEndpointHoldsItsHead: a disabled FIFO endpoint's first
// delivery is held and the rest wait in line; enabling it releases the
// head alone.
func TestFIFODisabledEndpointHoldsItsHead(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.fifoEndpoint(t, store.ExhaustedSkip)
	reason := "manual"
	_, err := s.SetEndpointStatus(ctx, e.ID, store.EndpointDisabled, &reason)
	require.NoError(t, err)
	accepted := b.send(t, 3)
	order, q := b.queue(t, e.ID)
	require.Equal(t, accepted, order)
	require.Equal(t, store.DeliveryHeld, q[accepted[0]].status)
	require.Equal(t, store.DeliveryWaiting, q[accepted[1]].status)
	_, held, err := s.EnableEndpoint(ctx, e.ID, "test")
	require.NoError(t, err)
	require.Equal(t, 1, held, "only the head is held")
	require.Empty(t, b.heads(t, e.ID), "the enable itself queues nothing")
	// The unparker's pass releases the held head of an enabled FIFO
	// endpoint, and only the head: the others stay in line.
	parked, err := s.ParkedEndpoints(ctx, []string{e.ID})
	require.NoError(t, err)
	require.Len(t, parked, 1)
	require.True(t, parked[0].FIFO)
	require.Equal(t, 1, parked[0].Held)
	require.NoError(t, s.AdvanceQueue(ctx, e.ID, b.enq))
	require.Equal(t, accepted[:1], b.heads(t, e.ID))
	_, q = b.queue(t, e.ID)
	require.Equal(t, store.DeliveryWaiting, q[accepted[1]].status)
	require.Equal(t, store.DeliveryWaiting, q[accepted[2]].status)
}

// TestSwitchingOrderingKeepsEveryDelivery: deliveries queued before an
// endpoint becomes FIFO keep their jobs and go first, those accepted after
// wait in line behind them; switched back, the ones in line are parked
// deliveries the unparker releases. None is lost or doubled.
func TestSwitchingOrderingKeepsEveryDelivery(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	before := b.send(t, 3)
	require.Len(t, b.heads(t, e.ID), 3)
	fifo := store.OrderingFIFO
	_, err := s.UpdateEndpoint(ctx, e.ID, store.EndpointPatch{Ordering: &fifo})
	require.NoError(t, err)
	after := b.send(t, 2)
	order, q := b.queue(t, e.ID)
	require.ElementsMatch(t, before, order[:3], "those queued before the switch, in no defined order")
	require.Equal(t, after, order[3:], "then those accepted after it")
	require.ElementsMatch(t, before, b.heads(t, e.ID), "those queued before the switch keep their jobs")
	for _, m := range before {
		b.finish(t, q[m].id, store.DeliveryDelivered)
	}
	require.Equal(t, after[:1], b.heads(t, e.ID), "then the queue goes")

	unordered := store.OrderingUnordered
	_, err = s.UpdateEndpoint(ctx, e.ID, store.EndpointPatch{Ordering: &unordered})
	require.NoError(t, err)
	parked, err := s.ParkedEndpoints(ctx, []string{e.ID})
	require.NoError(t, err)
	require.Len(t, parked, 1)
	require.False(t, parked[0].FIFO)
	got, err := s.ReleaseParked(ctx, e.ID, 10, b.enq)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.ElementsMatch(t, after, b.heads(t, e.ID))
	require.Equal(t, 5, b.count(t, "deliveries"))
}

// TestFIFORecoveryJoinsTheTail: a FIFO endpoint's recovery puts its failed
// deliveries back in line, oldest first, behind those waiting; the
// unparker's pass sends them in that order.
func TestFIFORecoveryJoinsTheTail(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.fifoEndpoint(t, store.ExhaustedSkip)
	failed := b.send(t, 2)
	_, q := b.queue(t, e.ID)
	for _, m := range failed {
		b.finish(t, q[m].id, store.DeliveryFailed)
	}
	waiting := b.send(t, 2)
	require.Equal(t, waiting[:1], b.heads(t, e.ID))
	rec, err := s.RecoverDeliveries(ctx, e.ID, store.RecoverRange{Since: time.Now().Add(-time.Hour)}, "test")
	require.NoError(t, err)
	require.Equal(t, 2, rec.Queued)
	order, _ := b.queue(t, e.ID)
	require.Equal(t, append(waiting, failed...), order)
	var sent []string
	for range 4 {
		require.NoError(t, s.AdvanceQueue(ctx, e.ID, b.enq))
		heads := b.heads(t, e.ID)
		require.Len(t, heads, 1)
		sent = append(sent, heads[0])
		_, by := b.queue(t, e.ID)
		b.finish(t, by[heads[0]].id, store.DeliveryDelivered)
	}
	require.Equal(t, order, sent)
}

// TestFIFOStampsFollowCommitOrder: messages accepted concurrently, in
// groups committed by several transactions at once, are stamped in the
// order their transactions commit: a reader never sees a delivery appear
// in front of one it has already seen, which is what lets a dispatcher
// send a head without waiting for transactions still open. Messages of
// one sender, accepted one after the other, are stamped in that order.
func TestFIFOStampsFollowCommitOrder(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.fifoEndpoint(t, store.ExhaustedSkip)
	c := store.NewMessageCommitter(s, b.enq, store.MessageCommitterConfig{MaxInFlight: 4, MaxBatch: 3})
	const senders, each = 6, 15
	sentBy := make([][]string, senders)
	// The senders pause halfway until the reader has read the queue once
	// since they all got there, so that at least one read falls between
	// their commits however the machine schedules them (on a busy one the
	// senders were once done before the reader's second read).
	var half sync.WaitGroup
	half.Add(senders)
	halfway, resume := make(chan struct{}), make(chan struct{})
	go func() { half.Wait(); close(halfway) }()
	var wg sync.WaitGroup
	for w := range senders {
		wg.Go(func() {
			for i := range each {
				if i == each/2 {
					half.Done()
					<-resume
				}
				m, _, err := c.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(fmt.Sprintf(`{"w": %d, "i": %d}`, w, i))})
				if err != nil {
					t.Error(err)
					if i < each/2 {
						half.Done() // the others' pause still ends
					}
					return
				}
				sentBy[w] = append(sentBy[w], m.ID)
			}
		})
	}
	done := make(chan struct{})
	var seenMax time.Time
	seen := map[string]bool{}
	var violations []string
	var partial bool
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		resumed := false
		for {
			select {
			case <-done:
				return
			default:
			}
			afterHalf := false
			select {
			case <-halfway:
				afterHalf = true
			default:
			}
			order, by := b.queue(t, e.ID)
			if afterHalf && !resumed {
				partial = len(order) > 0 && len(order) < senders*each
				resumed = true
				close(resume)
			}
			var max time.Time
			for _, m := range order {
				at := by[m].createdAt
				if !seen[m] && !at.After(seenMax) {
					violations = append(violations, fmt.Sprintf("%s at %s appeared behind %s", m, at, seenMax))
				}
				seen[m] = true
				if at.After(max) {
					max = at
				}
			}
			seenMax = max
		}
	}()
	wg.Wait()
	close(done)
	<-readerDone
	require.Empty(t, violations)
	require.True(t, partial, "a read saw the queue half made")

	order, by := b.queue(t, e.ID)
	require.Len(t, order, senders*each)
	for i := 1; i < len(order); i++ {
		require.True(t, by[order[i]].createdAt.After(by[order[i-1]].createdAt), "stamps are unique")
	}
	pos := map[string]int{}
	for i, m := range order {
		pos[m] = i
	}
	for _, ids := range sentBy {
		for i := 1; i < len(ids); i++ {
			require.Less(t, pos[ids[i-1]], pos[ids[i]], "one sender's messages keep their order")
		}
	}
	require.Len(t, b.heads(t, e.ID), 1)
}
