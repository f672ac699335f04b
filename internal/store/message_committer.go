package store

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// MessageCommitter accepts messages with group commit: a message that
// arrives while MaxInFlight groups are being committed waits, and the next
// group takes every message that waited (up to MaxBatch) into one
// transaction of CreateMessages. At low load each message is its own group
// and waits for nothing; under load one statement, one River insert and one
// fsync'd commit serve many API requests, as the dispatcher's ledger does
// for attempts.
//
// It runs no goroutine of its own: the request that opens a group commits
// it, and on finishing hands the next group to the first request waiting.
// When a group's transaction fails, each of its messages is committed alone,
// so a message that cannot be stored fails only its own request.
type MessageCommitter struct {
	store *Store
	enq   Enqueuer
	cfg   MessageCommitterConfig

	mu       sync.Mutex
	waiting  []*messageRequest
	inFlight int
	// lastGroup is the size of the last group committed.
	lastGroup int
	// lingering is set while a group's first message lingers; full wakes
	// it when enough wait to fill the group.
	lingering bool
	full      chan struct{}
	groups    int64 // committed groups and the messages they held, for tests
	messages  int64
}

// MessageCommitterConfig tunes a MessageCommitter.
type MessageCommitterConfig struct {
	// MaxInFlight is how many groups are committed at once, each on its
	// own connection; zero means 1. Fewer groups in flight make bigger
	// groups: with one, every message that arrives during a commit joins
	// the next group.
	MaxInFlight int
	// MaxBatch caps a group's messages; zero means 128.
	MaxBatch int
	// CommitTimeout bounds a group's transaction, which does not end when
	// the request that commits it is cancelled (the others in its group
	// still wait for it); zero means 15s.
	CommitTimeout time.Duration
	// Linger is how long a message that finds no group committing waits
	// for others to join it, when the last group held more than one
	// message (a sign of concurrent traffic, as PostgreSQL's commit_delay
	// waits only with commit_siblings active). Alone, a message never
	// waits. Zero means 2ms; negative never lingers.
	Linger time.Duration
}

type messageRequest struct {
	ctx  context.Context
	in   NewMessage
	lead chan []*messageRequest // the group this request is to commit
	done chan struct{}
	res  CreatedMessage
	err  error
}

// NewMessageCommitter returns a committer storing messages in s with their
// jobs inserted by enq.
func NewMessageCommitter(s *Store, enq Enqueuer, cfg MessageCommitterConfig) *MessageCommitter {
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 1
	}
	if cfg.Linger == 0 {
		cfg.Linger = 2 * time.Millisecond
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 128
	}
	if cfg.CommitTimeout <= 0 {
		cfg.CommitTimeout = 15 * time.Second
	}
	return &MessageCommitter{store: s, enq: enq, cfg: cfg, full: make(chan struct{}, 1)}
}

// CreateMessage stores in as Store.CreateMessage does, in a group with the
// messages accepted at the same time.
func (c *MessageCommitter) CreateMessage(ctx context.Context, in NewMessage) (Message, bool, error) {
	r := &messageRequest{ctx: ctx, in: in, lead: make(chan []*messageRequest, 1), done: make(chan struct{})}
	var (
		group  []*messageRequest
		linger bool
	)
	c.mu.Lock()
	if c.inFlight < c.cfg.MaxInFlight {
		// Nothing waits while a group could start: this request is one,
		// after its linger when traffic is concurrent.
		c.inFlight++
		group = []*messageRequest{r}
		linger = c.cfg.Linger > 0 && c.lastGroup > 1 && c.cfg.MaxBatch > 1 && !c.lingering
		c.lingering = c.lingering || linger
	} else {
		c.waiting = append(c.waiting, r)
		if c.lingering && len(c.waiting) == c.cfg.MaxBatch-1 {
			select {
			case c.full <- struct{}{}:
			default:
			}
		}
	}
	c.mu.Unlock()
	if group == nil {
		// A waiting request stays until its group is done even when its
		// context ends: it may be handed a group to commit.
		select {
		case <-r.done:
			return r.res.Message, r.res.Created, r.err
		case group = <-r.lead:
		}
	} else if linger {
		t := time.NewTimer(c.cfg.Linger)
		select {
		case <-t.C:
		case <-c.full:
			t.Stop()
		}
		c.mu.Lock()
		c.lingering = false
		select {
		case <-c.full: // a wake-up sent as the timer fired
		default:
		}
		n := min(len(c.waiting), c.cfg.MaxBatch-1)
		group = append(group, c.waiting[:n]...)
		c.waiting = c.waiting[n:]
		c.mu.Unlock()
	}
	c.commit(group)
	c.mu.Lock()
	if len(c.waiting) > 0 {
		n := min(len(c.waiting), c.cfg.MaxBatch)
		next := c.waiting[:n:n]
		c.waiting = c.waiting[n:]
		next[0].lead <- next
	} else {
		c.inFlight--
	}
	c.mu.Unlock()
	<-r.done
	return r.res.Message, r.res.Created, r.err
}

// commit stores a group and answers each of its requests.
func (c *MessageCommitter) commit(group []*messageRequest) {
	live := make([]*messageRequest, 0, len(group))
	for _, r := range group {
		if err := r.ctx.Err(); err != nil {
			r.err = fmt.Errorf("create message: %w", err)
			close(r.done)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	c.mu.Lock()
	c.groups++
	c.messages += int64(len(live))
	c.lastGroup = len(live)
	c.mu.Unlock()

	ins := make([]NewMessage, len(live))
	for i, r := range live {
		ins[i] = r.in
	}
	res, err := c.create(live[0].ctx, ins)
	if err == nil {
		for i, r := range live {
			r.res = res[i]
			close(r.done)
		}
		return
	}
	if len(live) == 1 {
		live[0].err = err
		close(live[0].done)
		return
	}
	// Whatever failed the group, each message now fails or succeeds alone.
	for _, r := range live {
		res, err := c.create(r.ctx, []NewMessage{r.in})
		if err != nil {
			r.err = err
		} else {
			r.res = res[0]
		}
		close(r.done)
	}
}

// create stores messages within CommitTimeout, whether or not ctx ends. A
// panic below it becomes an error: the requests of the group and those
// waiting behind it must still be answered and handed the next group.
func (c *MessageCommitter) create(ctx context.Context, ins []NewMessage) (res []CreatedMessage, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.CommitTimeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, fmt.Errorf("create messages: panic: %v", p)
		}
	}()
	return c.store.CreateMessages(ctx, ins, c.enq)
}
