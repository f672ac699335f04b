// Package deliverytest owns the webhook test receiver: a loopback HTTP server
// that verifies Standard Webhooks signatures, answers as a test tells it to
// (status, delay, hang, dropped connection) and counts what arrived, per path.
// End-to-end tests and the delivery benchmark point endpoints at it.
package deliverytest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookd/hookd/internal/delivery"
)

// SignatureTolerance is how far a webhook-timestamp may be from the
// receiver's clock before the request counts as badly signed.
const SignatureTolerance = 5 * time.Minute

// closeTimeout bounds how long Close waits for in-flight requests to finish
// before dropping their connections.
const closeTimeout = 5 * time.Second

// Options configures a Receiver. The zero value answers every request with
// 200 "ok" and verifies nothing.
type Options struct {
	// Secrets are the whsec_ secrets requests are verified against; a
	// request passes when any of them verifies it. Empty means no
	// verification.
	Secrets []string
	// Respond decides the answer to each correctly signed request; it may be
	// called concurrently. Nil answers 200 "ok".
	Respond func(r *Request) Response
	// Now is the receiver's clock for the timestamp tolerance check. Nil
	// means time.Now.
	Now func() time.Time
}

// Request is one request as seen by Options.Respond.
type Request struct {
	// MsgID is the webhook-id header.
	MsgID string
	// Signature is the webhook-signature header.
	Signature string
	// Timestamp is the webhook-timestamp header, or the zero time when it is
	// absent or not a unix timestamp.
	Timestamp time.Time
	// Body is the full request body.
	Body []byte
	// Path is the request's URL path.
	Path string
	// Header is the request's header; Respond must not modify it.
	Header http.Header
	// Seq is this request's 1-based arrival number on its path.
	Seq int
}

// Response tells the receiver how to answer one request. The zero value
// answers 200 with an empty body.
type Response struct {
	// Status is the HTTP status; 0 means 200.
	Status int
	// Body is the response body.
	Body []byte
	// Delay is how long to wait before answering (or hanging, or closing).
	// The wait ends early when the client gives up or the receiver closes;
	// the connection is then closed without an answer.
	Delay time.Duration
	// Header holds extra response headers, such as Retry-After.
	Header http.Header
	// Hang means never answer: wait until the client gives up or the
	// receiver closes, then close the connection.
	Hang bool
	// CloseConn means close the connection without answering, which the
	// client sees as a transport error.
	CloseConn bool
	// CutBody means close the connection in the middle of the response:
	// the status, the headers (declaring the full Content-Length) and the
	// first half of Body go out, then the connection closes. The client has
	// the status, then a body that ends early. The request counts as
	// answered with Status.
	CutBody bool
}

// Stats are the counters of one path.
type Stats struct {
	// Requests counts every request that arrived, badly signed ones included.
	Requests int
	// Delivered counts 2xx answers.
	Delivered int
	// DistinctDelivered counts the distinct webhook-ids answered 2xx.
	DistinctDelivered int
	// Duplicates counts 2xx answers to a webhook-id that had already been
	// answered 2xx (Delivered minus DistinctDelivered, when every request
	// carries a webhook-id).
	Duplicates int
	// BadSignatures counts requests that failed verification (answered 400).
	BadSignatures int
	// InFlight is the number of requests that arrived and are not answered,
	// dropped or abandoned yet.
	InFlight int
	// MaxInFlight is the highest InFlight ever seen.
	MaxInFlight int
}

// Receiver is a webhook test receiver listening on 127.0.0.1. Its methods are
// safe for concurrent use. A request is counted before its answer is
// written, so a client that has its answer sees it in Stats.
type Receiver struct {
	secrets []delivery.Secret
	respond func(r *Request) Response
	now     func() time.Time

	srv       *http.Server
	base      string
	done      chan struct{} // closed by Close: ends every Delay and Hang
	served    chan struct{} // closed when Serve returns
	closeOnce sync.Once
	closeErr  error

	mu    sync.RWMutex
	paths map[string]*pathState
}

// pathState holds the counters of one path.
type pathState struct {
	mu          sync.Mutex
	stats       Stats
	deliveredID map[string]int
}

// NewReceiver starts a receiver on 127.0.0.1 at a free port. Close it when done.
func NewReceiver(opts Options) (*Receiver, error) {
	rc := &Receiver{
		respond: opts.Respond,
		now:     opts.Now,
		done:    make(chan struct{}),
		served:  make(chan struct{}),
		paths:   make(map[string]*pathState),
	}
	if rc.now == nil {
		rc.now = time.Now
	}
	for i, s := range opts.Secrets {
		secret, err := delivery.ParseSecret(s)
		if err != nil {
			return nil, fmt.Errorf("new receiver: secret %d: %w", i, err)
		}
		rc.secrets = append(rc.secrets, secret)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("new receiver: listen: %w", err)
	}
	rc.base = "http://" + ln.Addr().String()
	rc.srv = &http.Server{
		Handler:           rc,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go func() {
		defer close(rc.served)
		_ = rc.srv.Serve(ln) // always ErrServerClosed after Close
	}()
	return rc, nil
}

// Start starts a receiver for a test or benchmark, failing it on error, and
// closes the receiver when the test ends.
func Start(tb testing.TB, opts Options) *Receiver {
	tb.Helper()
	rc, err := NewReceiver(opts)
	if err != nil {
		tb.Fatalf("start receiver: %v", err)
	}
	tb.Cleanup(func() {
		if err := rc.Close(); err != nil {
			tb.Errorf("close receiver: %v", err)
		}
	})
	return rc
}

// URL returns the receiver's URL for path, such as
// "http://127.0.0.1:41234/hooks/a".
func (rc *Receiver) URL(path string) string {
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	return rc.base + path
}

// Close stops the receiver: pending delays and hangs end without an answer,
// and Close returns once every request has finished (or after a few seconds,
// dropping what is left). It is safe to call more than once.
func (rc *Receiver) Close() error {
	rc.closeOnce.Do(func() {
		close(rc.done)
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		if err := rc.srv.Shutdown(ctx); err != nil {
			rc.closeErr = errors.Join(fmt.Errorf("close receiver: %w", err), rc.srv.Close())
		}
		<-rc.served
	})
	return rc.closeErr
}

// Stats returns a snapshot of path's counters (all zero for a path that
// never got a request).
func (rc *Receiver) Stats(path string) Stats {
	ps := rc.lookup(path)
	if ps == nil {
		return Stats{}
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.stats
}

// DeliveredIDs returns a copy of path's webhook-id -> number of 2xx answers.
func (rc *Receiver) DeliveredIDs(path string) map[string]int {
	out := make(map[string]int)
	ps := rc.lookup(path)
	if ps == nil {
		return out
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for id, n := range ps.deliveredID {
		out[id] = n
	}
	return out
}

func (rc *Receiver) lookup(path string) *pathState {
	rc.mu.RLock()
	defer rc.mu.RUnlock()
	return rc.paths[path]
}

func (rc *Receiver) pathState(path string) *pathState {
	if ps := rc.lookup(path); ps != nil {
		return ps
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	ps := rc.paths[path]
	if ps == nil {
		ps = &pathState{deliveredID: make(map[string]int)}
		rc.paths[path] = ps
	}
	return ps
}

// arrive counts a new request on ps and returns its sequence number.
func (ps *pathState) arrive() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.stats.Requests++
	ps.stats.InFlight++
	ps.stats.MaxInFlight = max(ps.stats.MaxInFlight, ps.stats.InFlight)
	return ps.stats.Requests
}

// outcome is how a request ended, for finish.
type outcome int

const (
	unanswered outcome = iota
	answered
	badSignature
)

// finish ends a request on ps: it leaves the in-flight count and, for a 2xx
// answer, counts the delivery of msgID.
func (ps *pathState) finish(how outcome, status int, msgID string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.stats.InFlight--
	switch {
	case how == badSignature:
		ps.stats.BadSignatures++
	case how == answered && status >= 200 && status <= 299:
		ps.stats.Delivered++
		if msgID == "" {
			return
		}
		ps.deliveredID[msgID]++
		switch ps.deliveredID[msgID] {
		case 1:
			ps.stats.DistinctDelivered++
		default:
			ps.stats.Duplicates++
		}
	}
}

// ServeHTTP verifies, counts and answers one webhook request.
func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ps := rc.pathState(r.URL.Path)
	req := &Request{
		MsgID:     r.Header.Get("webhook-id"),
		Signature: r.Header.Get("webhook-signature"),
		Path:      r.URL.Path,
		Header:    r.Header,
		Seq:       ps.arrive(),
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		ps.finish(unanswered, 0, "")
		abort()
	}
	req.Body = body
	if unix, err := strconv.ParseInt(r.Header.Get("webhook-timestamp"), 10, 64); err == nil {
		req.Timestamp = time.Unix(unix, 0)
	}

	if !rc.verify(req) {
		ps.finish(badSignature, 0, "")
		http.Error(w, "bad signature", http.StatusBadRequest)
		return
	}

	resp := Response{Status: http.StatusOK, Body: []byte("ok")}
	if rc.respond != nil {
		resp = rc.respond(req)
	}
	if resp.Delay > 0 && !rc.wait(r.Context(), resp.Delay) {
		ps.finish(unanswered, 0, "")
		abort()
	}
	switch {
	case resp.Hang:
		rc.wait(r.Context(), -1)
		ps.finish(unanswered, 0, "")
		abort()
	case resp.CloseConn:
		ps.finish(unanswered, 0, "")
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
		return
	}

	status := resp.Status
	if status == 0 {
		status = http.StatusOK
	}
	ps.finish(answered, status, req.MsgID)
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if resp.CutBody {
		w.Header().Set("Content-Length", strconv.Itoa(len(resp.Body)))
		w.WriteHeader(status)
		_, _ = w.Write(resp.Body[:len(resp.Body)/2])
		_ = http.NewResponseController(w).Flush()
		abort()
	}
	w.WriteHeader(status)
	_, _ = w.Write(resp.Body)
}

// abort ends the current request without an answer: net/http closes the
// connection instead of sending the implicit 200 of a handler that returns
// without writing.
func abort() {
	panic(http.ErrAbortHandler)
}

// verify reports whether req passes signature verification (always true
// without secrets).
func (rc *Receiver) verify(req *Request) bool {
	if len(rc.secrets) == 0 {
		return true
	}
	if req.Timestamp.IsZero() {
		return false
	}
	now := rc.now()
	for _, s := range rc.secrets {
		err := delivery.Verify(req.Signature, req.MsgID, req.Timestamp, req.Body, s, now, SignatureTolerance)
		if err == nil {
			return true
		}
	}
	return false
}

// wait waits for d (forever when d < 0) and reports whether it elapsed; it
// returns false early when ctx ends or the receiver closes.
func (rc *Receiver) wait(ctx context.Context, d time.Duration) bool {
	var elapsed <-chan time.Time
	if d >= 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		elapsed = t.C
	}
	select {
	case <-elapsed:
		return true
	case <-ctx.Done():
		return false
	case <-rc.done:
		return false
	}
}
