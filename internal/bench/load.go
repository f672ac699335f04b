package main

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// defaultPayloadSize is the size of every message payload, in bytes,
// unless -payload-bytes says otherwise.
const defaultPayloadSize = 1024

// messageBody returns a POST /v1/messages body for tenant with a compact
// payload of size bytes (at least {"seq":N,"pad":""}).
func messageBody(tenant string, seq int64, size int) []byte {
	head := `{"seq":` + strconv.FormatInt(seq, 10) + `,"pad":"`
	pad := size - len(head) - len(`"}`)
	var b bytes.Buffer
	b.Grow(size + 96)
	b.WriteString(`{"tenant_id":"`)
	b.WriteString(tenant)
	b.WriteString(`","event_type":"bench.event","payload":`)
	b.WriteString(head)
	b.WriteString(strings.Repeat("x", max(pad, 0)))
	b.WriteString(`"}}`)
	return b.Bytes()
}

// accept is when the api accepted one message (its 202 arrived) and for
// which group.
type accept struct {
	at    time.Duration
	group int
}

// tracker records what the api accepted: every message's acceptance time,
// and per group the deliveries accepted, from which the receiver's 2xx
// count gives the deliveries outstanding.
type tracker struct {
	clock       *clock
	rcv         *receiver
	api         *apiClient
	moreAPIs    []*apiClient // further api processes, posted to in turn with api
	payloadSize int

	accepted [maxGroups]atomic.Int64 // deliveries
	messages [maxGroups]atomic.Int64
	failed   atomic.Int64
	seq      atomic.Int64
	due      atomic.Int64 // messages released by open loops

	mu      sync.Mutex
	msgs    map[string]accept
	postLat []time.Duration
	lastErr error
}

func newTracker(clk *clock, rcv *receiver, api *apiClient, payloadSize int) *tracker {
	return &tracker{clock: clk, rcv: rcv, api: api, payloadSize: payloadSize, msgs: map[string]accept{}}
}

// outstanding returns group g's deliveries accepted and not yet answered 2xx.
func (t *tracker) outstanding(g int) int64 {
	return t.accepted[g].Load() - t.rcv.delivered(g)
}

// post sends one message to tenant, counted in group g.
func (t *tracker) post(tenant string, g int) {
	seq := t.seq.Add(1)
	body := messageBody(tenant, seq, t.payloadSize)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := t.clock.now()
	api := t.api
	if len(t.moreAPIs) > 0 {
		// Several api processes: the messages go to each in turn.
		if i := seq % int64(len(t.moreAPIs)+1); i > 0 {
			api = t.moreAPIs[i-1]
		}
	}
	id, n, err := api.postMessage(ctx, body)
	end := t.clock.now()
	if err != nil {
		t.failed.Add(1)
		t.mu.Lock()
		t.lastErr = err
		t.mu.Unlock()
		return
	}
	t.mu.Lock()
	t.msgs[id] = accept{at: end, group: g}
	t.postLat = append(t.postLat, end-start)
	t.mu.Unlock()
	t.messages[g].Add(1)
	t.accepted[g].Add(int64(n))
}

// picker chooses the tenant and group of the seq-th message of a load.
type picker func(seq int64) (tenant string, group int)

// roundRobin picks the tenants of set in turn.
func roundRobin(s tenantSet) picker {
	return func(seq int64) (string, int) {
		return s.tenantID(int(seq % int64(s.tenants))), s.group
	}
}

// closedLoop posts messages from workers goroutines as fast as the api takes
// them while fewer than maxOutstanding deliveries of group 0 are outstanding,
// until ctx ends: the offered load follows what the dispatcher sustains, and
// the queue (hence latency) stays bounded.
func (t *tracker) closedLoop(ctx context.Context, workers int, maxOutstanding int64, pick picker) {
	var wg sync.WaitGroup
	var n atomic.Int64
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				if t.outstanding(0) >= maxOutstanding {
					time.Sleep(500 * time.Microsecond)
					continue
				}
				tenant, g := pick(n.Add(1) - 1)
				t.post(tenant, g)
			}
		})
	}
	wg.Wait()
}

// openLoop offers rate messages/s, whatever happens to them, until ctx
// ends: a pacer releases messages on schedule to senders goroutines, so a
// slow api shows as an accepted rate below the offered one. It returns how
// many messages were due.
func (t *tracker) openLoop(ctx context.Context, rate float64, senders int, pick picker) int64 {
	due := make(chan int64, 1<<16)
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() {
			for seq := range due {
				if ctx.Err() != nil {
					continue // drain without sending
				}
				tenant, g := pick(seq)
				t.post(tenant, g)
			}
		})
	}
	var released int64
	start := time.Now()
	tick := time.NewTicker(2 * time.Millisecond)
	for ctx.Err() == nil {
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
		target := int64(time.Since(start).Seconds() * rate)
		for released < target && ctx.Err() == nil {
			select {
			case due <- released:
			default:
				// The senders are 65,536 behind: count it due, skip it.
			}
			released++
			t.due.Add(1)
		}
	}
	tick.Stop()
	close(due)
	wg.Wait()
	return released
}

// drain waits until no delivery of the given groups is outstanding, or
// timeout; it reports whether everything arrived.
func (t *tracker) drain(ctx context.Context, timeout time.Duration, groups ...int) bool {
	deadline := time.Now().Add(timeout)
	for {
		done := true
		for _, g := range groups {
			if t.outstanding(g) > 0 {
				done = false
			}
		}
		if done {
			return true
		}
		if time.Now().After(deadline) || !waitCtx(ctx, 20*time.Millisecond) {
			return false
		}
	}
}

// acceptedIn counts the messages the api accepted within w.
func (t *tracker) acceptedIn(w window) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, a := range t.msgs {
		if a.at >= w.from && a.at < w.to {
			n++
		}
	}
	return n
}

// postLatencies returns a copy of the api's POST /v1/messages latencies.
func (t *tracker) postLatencies() []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.postLat)
}

// postError returns the last failed post's error.
func (t *tracker) postError() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastErr
}
