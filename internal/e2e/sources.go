package e2e

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
)

// SourceHeader is the request header through which Front tells the
// receiver's Respond the source address of a request.
const SourceHeader = "X-E2e-Source"

// SourcedRequest is one request Front passed on: which host sent it
// (the source address, so the network namespace), and when.
type SourcedRequest struct {
	Source netip.Addr
	Path   string
	MsgID  string
	Start  time.Time
	// End is when the answer was written or the request dropped; zero
	// while in flight.
	End time.Time
	// Status is the answer's status; 0 when there was none.
	Status int
}

// OK reports whether the request was answered 2xx.
func (r SourcedRequest) OK() bool { return r.Status >= 200 && r.Status <= 299 }

// Key names the delivery a request carries: its path and webhook-id.
func (r SourcedRequest) Key() string { return r.Path + " " + r.MsgID }

// Front serves a deliverytest receiver on another address (a Net's
// bridge, which its hosts reach; the receiver itself listens on
// 127.0.0.1 only) and records every request with its source address.
// The receiver still verifies, counts and answers each one.
type Front struct {
	rc   *deliverytest.Receiver
	base string
	srv  *http.Server

	mu       sync.Mutex
	inFlight map[*SourcedRequest]struct{}
	done     []SourcedRequest
}

// StartFront serves rc on addr at a free port until the test ends.
func StartFront(t testing.TB, rc *deliverytest.Receiver, addr netip.Addr) *Front {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		t.Fatalf("e2e: front listen on %s: %v", addr, err)
	}
	f := &Front{rc: rc, base: "http://" + ln.Addr().String(), inFlight: map[*SourcedRequest]struct{}{}}
	f.srv = &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = f.srv.Serve(ln) // ErrServerClosed after Close
	}()
	t.Cleanup(func() {
		// Closing the connections ends the receiver's waits on them.
		if err := f.srv.Close(); err != nil {
			t.Errorf("e2e: close front: %v", err)
		}
		<-served
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for f.pending() > 0 && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
	})
	return f
}

// URL returns the front's URL for path.
func (f *Front) URL(path string) string {
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	return f.base + path
}

func (f *Front) pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.inFlight)
}

// InFlight returns the requests in flight now.
func (f *Front) InFlight() []SourcedRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]SourcedRequest, 0, len(f.inFlight))
	for r := range f.inFlight {
		out = append(out, *r)
	}
	return out
}

// Requests returns every request that ended, in the order they ended.
func (f *Front) Requests() []SourcedRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]SourcedRequest(nil), f.done...)
}

// ServeHTTP records the request and passes it to the receiver.
func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		http.Error(w, fmt.Sprintf("front: remote address %q: %v", r.RemoteAddr, err), http.StatusInternalServerError)
		return
	}
	req := &SourcedRequest{Source: ap.Addr().Unmap(), Path: r.URL.Path, MsgID: r.Header.Get("webhook-id"), Start: time.Now()}
	f.mu.Lock()
	f.inFlight[req] = struct{}{}
	f.mu.Unlock()
	sw := &statusWriter{ResponseWriter: w}
	// The receiver ends a request it does not answer with a panic
	// (http.ErrAbortHandler), which net/http expects: it goes on past this.
	defer func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.inFlight, req)
		req.End, req.Status = time.Now(), sw.status
		f.done = append(f.done, *req)
	}()
	r.Header.Set(SourceHeader, req.Source.String())
	f.rc.ServeHTTP(sw, r)
}

// statusWriter keeps the status written; Unwrap lets the receiver's
// http.ResponseController reach the connection (hijack, flush).
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

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
