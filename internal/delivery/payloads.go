package delivery

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hookd/hookd/internal/store"
)

// PayloadLoader loads message payloads by id.
type PayloadLoader interface {
	MessagePayloads(ctx context.Context, ids []string) (map[string]json.RawMessage, error)
}

// errPayloadGone is a payload absent from the database: payload retention
// dropped it (or retention dropped its message).
var errPayloadGone = errors.New("payload expired: dropped by payload retention before the delivery finished")

// errPayloadMissing is a payload absent from the database although its
// message is younger than payload retention: nothing has dropped it, so the
// read missed (a bug), and the delivery is retried, never expired.
var errPayloadMissing = errors.New("payload missing although its message is younger than payload retention")

// payloadRetired reports whether payload retention can have dropped the
// payload of message id by now (the database clock): its message is at
// least retention old by the time in its ULID. The maintainer drops a
// payload partition only once its whole interval ends retention before
// now, and a row lives in the partition of its id's time, so every payload
// it dropped is at least that old (up to an interval older). A zero
// retention (none configured) or an id naming no time retires nothing.
func payloadRetired(messageID string, now time.Time, retention time.Duration) bool {
	at, ok := store.IDTime(messageID)
	if !ok || retention <= 0 {
		return false
	}
	return !now.Before(at.Add(retention))
}

// payloads gives the worker each message's payload. Jobs carry only the
// message id: a payload inside River's args would be written with every
// version of the job row (inserted, running, completed) and indexed by
// River's GIN index on args, the costliest part of accepting a message. So
// workers load payloads here instead: concurrent requests within linger
// share one query, and a bounded cache serves a fanned-out message's other
// deliveries without a query at all.
type payloads struct {
	loader   PayloadLoader
	linger   time.Duration
	maxBytes int

	mu    sync.Mutex
	batch *payloadBatch
	// cache is an LRU of payloads by message id, at most maxBytes in all.
	cache map[string]*list.Element
	order *list.List
	bytes int
}

type payloadEntry struct {
	id      string
	payload json.RawMessage
}

type payloadBatch struct {
	ids    map[string]struct{}
	done   chan struct{}
	result map[string]json.RawMessage
	err    error
}

func newPayloads(loader PayloadLoader, linger time.Duration, maxBytes int) *payloads {
	return &payloads{loader: loader, linger: linger, maxBytes: maxBytes, cache: map[string]*list.Element{}, order: list.New()}
}

// get returns the payload of message id.
func (p *payloads) get(ctx context.Context, id string) (json.RawMessage, error) {
	p.mu.Lock()
	if el, ok := p.cache[id]; ok {
		p.order.MoveToFront(el)
		payload := el.Value.(*payloadEntry).payload
		p.mu.Unlock()
		return payload, nil
	}
	b := p.batch
	leader := b == nil
	if leader {
		b = &payloadBatch{ids: map[string]struct{}{}, done: make(chan struct{})}
		p.batch = b
	}
	b.ids[id] = struct{}{}
	p.mu.Unlock()

	if leader {
		// Let concurrent workers join this query, then run it for all.
		time.Sleep(p.linger)
		p.mu.Lock()
		p.batch = nil
		ids := make([]string, 0, len(b.ids))
		for id := range b.ids {
			ids = append(ids, id)
		}
		p.mu.Unlock()
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		b.result, b.err = p.loader.MessagePayloads(lctx, ids)
		cancel()
		if b.err == nil {
			p.mu.Lock()
			for id, payload := range b.result {
				p.putLocked(id, payload)
			}
			p.mu.Unlock()
		}
		close(b.done)
	} else {
		select {
		case <-b.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if b.err != nil {
		return nil, fmt.Errorf("load payload: %w", b.err)
	}
	payload, ok := b.result[id]
	if !ok {
		return nil, fmt.Errorf("load payload of message %s: %w", id, errPayloadGone)
	}
	return payload, nil
}

func (p *payloads) putLocked(id string, payload json.RawMessage) {
	if _, ok := p.cache[id]; ok || len(payload) > p.maxBytes/4 {
		return
	}
	p.cache[id] = p.order.PushFront(&payloadEntry{id: id, payload: payload})
	p.bytes += len(payload)
	for p.bytes > p.maxBytes {
		el := p.order.Back()
		e := el.Value.(*payloadEntry)
		p.order.Remove(el)
		delete(p.cache, e.id)
		p.bytes -= len(e.payload)
	}
}
