package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
)

// maxGroups is how many endpoint groups a scenario may have: group 0 is the
// main load, the others the special endpoints (hot, hanging, flaky).
const maxGroups = 4

// clock is a scenario's time base: every timestamp the bench takes is a
// monotonic offset from start, and wall converts one back for comparison
// with Postgres timestamps (same host, same clock).
type clock struct{ start time.Time }

func newClock() *clock { return &clock{start: time.Now()} }

// now returns the time since the scenario's clock started.
func (c *clock) now() time.Duration { return time.Since(c.start) }

// wall returns the wall-clock time of offset d.
func (c *clock) wall(d time.Duration) time.Time { return c.start.Add(d) }

// delivered is one 2xx answer.
type delivered struct {
	msg  string
	path string
	at   time.Duration
}

// span is one request to a watched path: when it arrived, when it ended and
// with what status (0: no answer, as when the client gave up).
type span struct {
	arrive, end time.Duration
	status      int
}

// receiver is the webhook receiver every scenario points its endpoints at:
// deliverytest's signature-verifying Receiver behind a server of the bench's
// own that timestamps every answer, counts 2xx answers per endpoint group
// (paths are /g<group>/...), counts duplicates (a 2xx for a webhook-id and
// path that had one already: the same delivery answered twice), and keeps
// the request log of watched paths.
type receiver struct {
	rc    *deliverytest.Receiver
	srv   *http.Server
	base  string
	clock *clock
	watch map[string]bool

	ok   [maxGroups]atomic.Int64
	bad  atomic.Int64 // 400 answers: failed signature checks
	dups atomic.Int64
	// inFlight counts requests being answered, peak the most at once
	// since resetPeak.
	inFlight, peak atomic.Int64

	mu     sync.Mutex
	events []delivered
	okOnce map[string]struct{} // webhook-id "|" path of every 2xx so far
	spans  map[string][]span
	served chan struct{}
}

// newReceiver starts a receiver on 127.0.0.1 verifying signatures made with
// secret; respond decides each answer (nil: 200 at once); the request log is
// kept for the paths in watch.
func newReceiver(clk *clock, secret string, respond func(*deliverytest.Request) deliverytest.Response, watch ...string) (*receiver, error) {
	rc, err := deliverytest.NewReceiver(deliverytest.Options{Secrets: []string{secret}, Respond: respond})
	if err != nil {
		return nil, fmt.Errorf("receiver: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = rc.Close()
		return nil, fmt.Errorf("receiver: listen: %w", err)
	}
	r := &receiver{
		rc: rc, base: "http://" + ln.Addr().String(), clock: clk,
		watch: map[string]bool{}, spans: map[string][]span{}, okOnce: map[string]struct{}{}, served: make(chan struct{}),
	}
	for _, p := range watch {
		r.watch[p] = true
	}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() {
		defer close(r.served)
		_ = r.srv.Serve(ln)
	}()
	return r, nil
}

// url returns the URL of path on the receiver.
func (r *receiver) url(path string) string { return r.base + path }

// ServeHTTP hands the request to deliverytest's receiver and records how it
// ended. A hang or dropped connection ends in http.ErrAbortHandler, which is
// recorded as status 0 and passed on.
func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	arrive := r.clock.now()
	sw := &statusWriter{ResponseWriter: w}
	n := r.inFlight.Add(1)
	for p := r.peak.Load(); n > p && !r.peak.CompareAndSwap(p, n); p = r.peak.Load() {
	}
	defer func() {
		r.inFlight.Add(-1)
		p := recover()
		r.record(req.URL.Path, req.Header.Get("webhook-id"), arrive, sw.status)
		if p != nil {
			panic(p)
		}
	}()
	r.rc.ServeHTTP(sw, req)
}

func (r *receiver) record(path, msg string, arrive time.Duration, status int) {
	end := r.clock.now()
	ok := status >= 200 && status <= 299
	if ok {
		r.ok[groupOf(path)].Add(1)
	}
	if status == http.StatusBadRequest {
		r.bad.Add(1)
	}
	if !ok && !r.watch[path] {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ok {
		r.events = append(r.events, delivered{msg: msg, path: path, at: end})
		key := msg + "|" + path
		if _, again := r.okOnce[key]; again {
			r.dups.Add(1)
		} else {
			r.okOnce[key] = struct{}{}
		}
	}
	if r.watch[path] {
		r.spans[path] = append(r.spans[path], span{arrive: arrive, end: end, status: status})
	}
}

// groupOf returns the group of a path /g<digit>/...; anything else is 0.
func groupOf(path string) int {
	if len(path) >= 3 && path[0] == '/' && path[1] == 'g' && path[2] >= '0' && path[2] < '0'+maxGroups {
		return int(path[2] - '0')
	}
	return 0
}

// peakInFlight is the most requests answered at once since resetPeak.
func (r *receiver) peakInFlight() int64 { return r.peak.Load() }

// resetPeak starts peakInFlight afresh.
func (r *receiver) resetPeak() { r.peak.Store(r.inFlight.Load()) }

// delivered returns the 2xx answers of group g so far (duplicates included).
func (r *receiver) delivered(g int) int64 { return r.ok[g].Load() }

// total returns the 2xx answers of every group so far.
func (r *receiver) total() int64 {
	var n int64
	for g := range maxGroups {
		n += r.ok[g].Load()
	}
	return n
}

// duplicates returns how many 2xx answers so far were for a webhook-id and
// path answered 2xx before.
func (r *receiver) duplicates() int64 { return r.dups.Load() }

// snapshot returns a copy of every 2xx answer so far.
func (r *receiver) snapshot() []delivered {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivered(nil), r.events...)
}

// spansOf returns the request log of a watched path.
func (r *receiver) spansOf(path string) []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]span(nil), r.spans[path]...)
}

// stats returns deliverytest's counters of a path.
func (r *receiver) stats(path string) deliverytest.Stats { return r.rc.Stats(path) }

// badSignatures returns how many requests failed signature verification
// (the scenarios never answer 400 themselves).
func (r *receiver) badSignatures() int64 { return r.bad.Load() }

// close ends pending hangs, then stops the server.
func (r *receiver) close() error {
	err := r.rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if serr := r.srv.Shutdown(ctx); serr != nil {
		err = errors.Join(err, fmt.Errorf("receiver shutdown: %w", serr), r.srv.Close())
	}
	<-r.served
	return err
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// endpointPath returns the receiver path of endpoint i of tenant t in group g.
func endpointPath(g, t, i int) string {
	return fmt.Sprintf("/g%d/t%d/e%d", g, t, i)
}
