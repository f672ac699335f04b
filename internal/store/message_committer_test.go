package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
)

// TestCreateMessagesStoresAGroupInOneTransaction: fan-out, idempotency
// replays (of a stored message and within the group), a tenant without
// endpoints, and one River insert for every delivery of the group.
func TestCreateMessagesStoresAGroupInOneTransaction(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	acme1 := b.endpoint(t, "acme")
	acme2 := b.endpoint(t, "acme", "invoice.*")
	globex := b.endpoint(t, "globex")
	used, created, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "globex", EventType: "a.b", Payload: json.RawMessage(`0`), IdempotencyKey: "used"}, b.enq)
	require.NoError(t, err)
	require.True(t, created)
	calls := b.enq.callCount()

	res, err := s.CreateMessages(ctx, []store.NewMessage{
		{TenantID: "acme", EventType: "invoice.paid", Payload: json.RawMessage(`1`)},
		{TenantID: "acme", EventType: "user.created", Payload: json.RawMessage(`2`), IdempotencyKey: "k"},
		{TenantID: "globex", EventType: "a.b", Payload: json.RawMessage(`3`), IdempotencyKey: "used"},
		{TenantID: "initech", EventType: "a.b", Payload: json.RawMessage(`4`)},
		{TenantID: "acme", EventType: "user.created", Payload: json.RawMessage(`5`), IdempotencyKey: "k"},
		{TenantID: "globex", EventType: "a.b", Payload: json.RawMessage(`6`), IdempotencyKey: "k"},
	}, b.enq)
	require.NoError(t, err)
	require.Len(t, res, 6)

	endpointsOf := func(m store.Message) []string {
		var ids []string
		for _, d := range m.Deliveries {
			require.Equal(t, m.ID, d.MessageID)
			require.NotNil(t, d.JobID)
			ids = append(ids, d.EndpointID)
		}
		return ids
	}
	require.True(t, res[0].Created)
	require.ElementsMatch(t, []string{acme1.ID, acme2.ID}, endpointsOf(res[0].Message))
	require.True(t, res[1].Created)
	require.Equal(t, []string{acme1.ID}, endpointsOf(res[1].Message), "acme2 wants invoice.* only")
	require.False(t, res[2].Created, "the key was used by a stored message")
	require.Equal(t, used.ID, res[2].Message.ID)
	require.JSONEq(t, `0`, string(res[2].Message.Payload))
	require.True(t, res[3].Created)
	require.Empty(t, res[3].Message.Deliveries, "initech has no endpoints")
	require.False(t, res[4].Created, "same tenant and key as the second message")
	require.Equal(t, res[1].Message.ID, res[4].Message.ID)
	require.True(t, res[5].Created, "another tenant's key")
	require.Equal(t, []string{globex.ID}, endpointsOf(res[5].Message))

	require.Equal(t, calls+1, b.enq.callCount(), "one River insert for the group")
	require.Equal(t, 5, b.count(t, "messages"))
	require.Equal(t, 5, b.count(t, "deliveries"))
	for _, i := range []int{0, 1, 3, 5} {
		stored, err := s.GetMessage(ctx, res[i].Message.ID)
		require.NoError(t, err)
		require.Len(t, stored.Deliveries, len(res[i].Message.Deliveries))
		require.Equal(t, res[i].Message.Payload, stored.Payload)
	}
}

// TestCreateMessagesAllOrNothing: when the River insert fails, no message
// of the group is stored.
func TestCreateMessagesAllOrNothing(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	b.endpoint(t, "acme")
	b.enq.fail = fmt.Errorf("river down")
	_, err := s.CreateMessages(context.Background(), []store.NewMessage{
		{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`1`), IdempotencyKey: "x"},
		{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`2`)},
	}, b.enq)
	require.ErrorContains(t, err, "river down")
	require.Zero(t, b.count(t, "messages"))
	require.Zero(t, b.count(t, "idempotency_keys"))
	require.Zero(t, b.count(t, "deliveries"))
}

// gatedEnqueuer holds its first insert until release is closed, so the
// messages sent meanwhile form a group.
type gatedEnqueuer struct {
	*fakeEnqueuer
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (g *gatedEnqueuer) EnqueueTx(ctx context.Context, tx pgx.Tx, qs []store.QueuedDelivery) ([]int64, error) {
	g.once.Do(func() {
		close(g.entered)
		<-g.release
	})
	return g.fakeEnqueuer.EnqueueTx(ctx, tx, qs)
}

type committerBundle struct {
	*testBundle
	gate *gatedEnqueuer
}

// setupCommitter returns a committer of one group in flight whose first
// group holds in its River insert until the test releases it.
func setupCommitter(t *testing.T, maxBatch int) (*store.MessageCommitter, *committerBundle) {
	t.Helper()
	s, b := setup(t)
	g := &gatedEnqueuer{fakeEnqueuer: b.enq, entered: make(chan struct{}), release: make(chan struct{})}
	c := store.NewMessageCommitter(s, g, store.MessageCommitterConfig{MaxInFlight: 1, MaxBatch: maxBatch})
	return c, &committerBundle{testBundle: b, gate: g}
}

type created struct {
	msg     store.Message
	created bool
	err     error
}

// createAll sends ins at once, the first before the others, releases the
// first group when the rest wait, and returns every answer.
func createAll(t *testing.T, c *store.MessageCommitter, b *committerBundle, ins []store.NewMessage) []created {
	t.Helper()
	out := make([]created, len(ins))
	var wg sync.WaitGroup
	send := func(i int) {
		defer wg.Done()
		m, ok, err := c.CreateMessage(context.Background(), ins[i])
		out[i] = created{m, ok, err}
	}
	wg.Add(len(ins))
	go send(0)
	select {
	case <-b.gate.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first group never reached its River insert")
	}
	for i := 1; i < len(ins); i++ {
		go send(i)
	}
	require.Eventually(t, func() bool { return c.Waiting() == len(ins)-1 }, 10*time.Second, time.Millisecond)
	close(b.gate.release)
	wg.Wait()
	return out
}

// TestMessageCommitterGroupsMessagesThatWait: 300 messages sent while a
// group commits are stored in groups of at most MaxBatch, each message
// with its deliveries and jobs.
func TestMessageCommitterGroupsMessagesThatWait(t *testing.T) {
	t.Parallel()
	c, b := setupCommitter(t, 128)
	ep := b.endpoint(t, "acme")
	ins := make([]store.NewMessage, 300)
	for i := range ins {
		ins[i] = store.NewMessage{TenantID: "acme", EventType: "a.b", Payload: json.RawMessage(fmt.Sprint(i))}
	}
	res := createAll(t, c, b, ins)
	ids := map[string]bool{}
	for i, r := range res {
		require.NoError(t, r.err)
		require.True(t, r.created)
		require.Equal(t, json.RawMessage(fmt.Sprint(i)), r.msg.Payload)
		require.Len(t, r.msg.Deliveries, 1)
		require.Equal(t, ep.ID, r.msg.Deliveries[0].EndpointID)
		require.NotNil(t, r.msg.Deliveries[0].JobID)
		ids[r.msg.ID] = true
	}
	require.Len(t, ids, 300)
	groups, messages := c.Stats()
	require.Equal(t, int64(300), messages)
	require.Equal(t, int64(1+3), groups, "the first alone, then 299 in groups of at most 128")
	require.Equal(t, 4, b.enq.callCount())
	require.Equal(t, 300, b.count(t, "messages"))
	require.Equal(t, 300, b.count(t, "deliveries"))
}

// TestMessageCommitterFailsOnlyTheMessageThatCannotBeStored: a message
// Postgres refuses (a tenant id that is not UTF-8) fails its own request;
// the rest of its group is stored.
func TestMessageCommitterFailsOnlyTheMessageThatCannotBeStored(t *testing.T) {
	t.Parallel()
	c, b := setupCommitter(t, 128)
	b.endpoint(t, "acme")
	ins := make([]store.NewMessage, 6)
	for i := range ins {
		ins[i] = store.NewMessage{TenantID: "acme", EventType: "a.b", Payload: json.RawMessage(`{}`), IdempotencyKey: fmt.Sprint("key-", i)}
	}
	ins[3].TenantID = "bad\xff"
	res := createAll(t, c, b, ins)
	for i, r := range res {
		if i == 3 {
			require.Error(t, r.err)
			continue
		}
		require.NoError(t, r.err, "message %d", i)
		require.True(t, r.created)
		require.Len(t, r.msg.Deliveries, 1)
	}
	groups, _ := c.Stats()
	require.Equal(t, int64(2), groups)
	require.Equal(t, 5, b.count(t, "messages"))
	require.Equal(t, 5, b.count(t, "deliveries"))
	require.Equal(t, 5, b.count(t, "idempotency_keys"))
}

// TestMessageCommitterReplaysKeysAcrossAndWithinGroups: the same key sent
// by many requests at once creates one message, whichever groups they
// fall in.
func TestMessageCommitterReplaysKeysAcrossAndWithinGroups(t *testing.T) {
	t.Parallel()
	c, b := setupCommitter(t, 4)
	b.endpoint(t, "acme")
	ins := make([]store.NewMessage, 10)
	for i := range ins {
		ins[i] = store.NewMessage{TenantID: "acme", EventType: "a.b", Payload: json.RawMessage(fmt.Sprint(i)), IdempotencyKey: "same"}
	}
	res := createAll(t, c, b, ins)
	createdCount := 0
	for _, r := range res {
		require.NoError(t, r.err)
		require.Equal(t, res[0].msg.ID, r.msg.ID)
		require.Len(t, r.msg.Deliveries, 1)
		if r.created {
			createdCount++
		}
	}
	require.Equal(t, 1, createdCount)
	require.True(t, res[0].created, "the first message sent created it")
	require.Equal(t, 1, b.count(t, "messages"))
	require.Equal(t, 1, b.count(t, "deliveries"))
}

// panickingEnqueuer panics on every insert, as a bug below the committer
// would.
type panickingEnqueuer struct{}

func (panickingEnqueuer) EnqueueTx(context.Context, pgx.Tx, []store.QueuedDelivery) ([]int64, error) {
	panic("enqueuer bug")
}

// TestMessageCommitterSurvivesAPanicBelowIt: a panic while storing fails
// the request with an error and leaves the committer able to take the next
// message (a lost leader would leave every later request waiting).
func TestMessageCommitterSurvivesAPanicBelowIt(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	b.endpoint(t, "acme")
	c := store.NewMessageCommitter(s, panickingEnqueuer{}, store.MessageCommitterConfig{MaxInFlight: 1})
	for range 3 {
		_, _, err := c.CreateMessage(context.Background(), store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`1`)})
		require.ErrorContains(t, err, "panic: enqueuer bug")
	}
	// A message with no subscriber needs no insert and is stored.
	_, created, err := c.CreateMessage(context.Background(), store.NewMessage{TenantID: "nobody", EventType: "a", Payload: json.RawMessage(`1`)})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, 1, b.count(t, "messages"))
}

// TestMessageCommitterLingersOnlyUnderConcurrentTraffic: a message that
// finds the committer idle after a group of one is stored at once; after a
// group of several it lingers for others, which join its group, and a full
// group ends the linger.
func TestMessageCommitterLingersOnlyUnderConcurrentTraffic(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	b.endpoint(t, "acme")
	msg := store.NewMessage{TenantID: "acme", EventType: "a.b", Payload: json.RawMessage(`{}`)}
	// A linger no test waits out: a message that lingered alone would
	// hold the test for a minute, and the full group must end it.
	const linger = time.Minute
	g := &gatedEnqueuer{fakeEnqueuer: b.enq, entered: make(chan struct{}), release: make(chan struct{})}
	c := store.NewMessageCommitter(s, g, store.MessageCommitterConfig{MaxInFlight: 1, MaxBatch: 3, Linger: linger})
	send := func() <-chan error {
		done := make(chan error, 1)
		go func() {
			_, _, err := c.CreateMessage(context.Background(), msg)
			done <- err
		}()
		return done
	}
	wait := func(chs ...<-chan error) {
		t.Helper()
		for _, ch := range chs {
			select {
			case err := <-ch:
				require.NoError(t, err)
			case <-time.After(linger / 2):
				t.Fatal("a message lingered")
			}
		}
	}

	// The first message holds in its insert while one more waits: two
	// groups of one. The next message, alone, does not linger.
	res := createAll(t, c, &committerBundle{testBundle: b, gate: g}, []store.NewMessage{msg, msg})
	for _, r := range res {
		require.NoError(t, r.err)
	}
	wait(send())
	groups, _ := c.Stats()
	require.Equal(t, int64(3), groups)

	// A group of two (sent while a group of one commits), then a message
	// that finds the committer idle lingers, and the two sent meanwhile
	// fill its group.
	g2 := &gatedEnqueuer{fakeEnqueuer: b.enq, entered: make(chan struct{}), release: make(chan struct{})}
	c = store.NewMessageCommitter(s, g2, store.MessageCommitterConfig{MaxInFlight: 1, MaxBatch: 3, Linger: linger})
	held := send()
	<-g2.entered
	pair := []<-chan error{send(), send()}
	require.Eventually(t, func() bool { return c.Waiting() == 2 }, 10*time.Second, time.Millisecond)
	close(g2.release)
	wait(append(pair, held)...)
	lead := send()
	require.Eventually(t, c.Lingering, 10*time.Second, time.Millisecond)
	wait(send(), send(), lead)
	groups, messages := c.Stats()
	require.Equal(t, int64(3), groups, "the held message, the pair, then the lingering message with the two that joined it")
	require.Equal(t, int64(6), messages)
}
