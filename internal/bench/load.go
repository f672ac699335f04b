package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// apiToken is the bootstrap admin token the bench starts the api with.
const apiToken = "bench-token"

// defaultPayloadSize is the size of every message payload, in bytes,
// unless -payload-bytes says otherwise.
const defaultPayloadSize = 1024

// apiClient talks to the api process over keep-alive connections.
type apiClient struct {
	base string
	http *http.Client
}

func newAPIClient(base string, conns int) *apiClient {
	tr := &http.Transport{
		MaxIdleConns:        2 * conns,
		MaxIdleConnsPerHost: 2 * conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &apiClient{base: base, http: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// do sends a JSON body and decodes a JSON answer into out (when not nil),
// returning the status.
func (a *apiClient) do(ctx context.Context, method, path string, body []byte, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+apiToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// createClass creates a traffic class from its JSON fields.
func (a *apiClient) createClass(ctx context.Context, class map[string]any) error {
	b, err := json.Marshal(class)
	if err != nil {
		return fmt.Errorf("encode class: %w", err)
	}
	_, err = a.do(ctx, http.MethodPost, "/v1/traffic-classes", b, nil)
	return err
}

// postMessage posts a prepared message body and returns the message id and
// how many deliveries it got.
func (a *apiClient) postMessage(ctx context.Context, body []byte) (string, int, error) {
	var m struct {
		ID         string            `json:"id"`
		Deliveries []json.RawMessage `json:"deliveries"`
	}
	if _, err := a.do(ctx, http.MethodPost, "/v1/messages", body, &m); err != nil {
		return "", 0, err
	}
	return m.ID, len(m.Deliveries), nil
}

// tenantSet is a set of tenants of one endpoint group, each with the same
// number of endpoints, all under one traffic class ("" means auto).
type tenantSet struct {
	group     int
	name      string // tenant ids are <name>-<n>
	tenants   int
	perTenant int
	class     string
}

// tenantID returns the id of tenant n of the set.
func (s tenantSet) tenantID(n int) string { return s.name + "-" + strconv.Itoa(n) }

// endpoint is one registered endpoint.
type endpoint struct {
	id, tenant, path string
	group            int
}

// registerEndpoints creates every endpoint of sets through the api, with
// conns requests at a time, pointing endpoint i of tenant t of group g at
// the receiver's endpointPath(g, t, i).
func registerEndpoints(ctx context.Context, api *apiClient, rcv *receiver, secret string, conns int, sets ...tenantSet) ([]endpoint, error) {
	var all []endpoint
	for _, s := range sets {
		for t := range s.tenants {
			for i := range s.perTenant {
				all = append(all, endpoint{tenant: s.tenantID(t), path: endpointPath(s.group, t, i), group: s.group})
			}
		}
	}
	classOf := map[int]string{}
	for _, s := range sets {
		classOf[s.group] = s.class
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(conns)
	for i := range all {
		g.Go(func() error {
			e := &all[i]
			body := map[string]any{"tenant_id": e.tenant, "url": rcv.url(e.path), "secret": secret}
			if c := classOf[e.group]; c != "" {
				body["traffic_class"] = c
			}
			b, err := json.Marshal(body)
			if err != nil {
				return fmt.Errorf("encode endpoint: %w", err)
			}
			var out struct {
				ID string `json:"id"`
			}
			if _, err := api.do(gctx, http.MethodPost, "/v1/endpoints", b, &out); err != nil {
				return fmt.Errorf("register endpoint: %w", err)
			}
			e.id = out.ID
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return all, nil
}

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
	id, n, err := t.api.postMessage(ctx, body)
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

// window is a measured interval of a scenario, on its clock.
type window struct{ from, to time.Duration }

func (w window) seconds() float64 { return (w.to - w.from).Seconds() }

// measurement is what the receiver saw of one group in a window.
type measurement struct {
	// Delivered counts the group's first 2xx answers within the window.
	Delivered int
	// Messages counts the group's messages accepted within the window.
	Messages int
	// Latencies are accepted -> 2xx latencies of the deliveries of messages
	// accepted within the window, sorted.
	Latencies []time.Duration
	// Missing counts deliveries of messages accepted within the window that
	// never got a 2xx.
	Missing int
}

// measure dedupes the 2xx answers (first per message and path) and returns
// group g's deliveries in w and the latencies of messages accepted in w.
// wantPerMessage is the number of deliveries each message gets (its fan-out).
func (t *tracker) measure(events []delivered, g int, w window, wantPerMessage int) measurement {
	t.mu.Lock()
	defer t.mu.Unlock()
	var m measurement
	seen := make(map[string]struct{}, len(events))
	got := map[string]int{}
	for _, e := range events {
		if groupOf(e.path) != g {
			continue
		}
		key := e.msg + "|" + e.path
		if _, dup := seen[key]; dup {
			continue
		}
		seen[key] = struct{}{}
		if e.at >= w.from && e.at < w.to {
			m.Delivered++
		}
		a, ok := t.msgs[e.msg]
		if !ok || a.at < w.from || a.at >= w.to {
			continue
		}
		got[e.msg]++
		m.Latencies = append(m.Latencies, max(e.at-a.at, 0))
	}
	for id, a := range t.msgs {
		if a.group == g && a.at >= w.from && a.at < w.to {
			m.Messages++
			m.Missing += max(wantPerMessage-got[id], 0)
		}
	}
	slices.Sort(m.Latencies)
	return m
}

// percentile returns the q-quantile (nearest rank) of sorted durations.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// ms converts a duration to milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
