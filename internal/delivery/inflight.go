package delivery

import (
	"context"
	"net/url"
	"sync"
	"time"
)

// Bounds on a process's requests, beside each endpoint's cap
// (endpointSlots) and each message job's (MessageWorker).
const (
	// DefaultMaxInFlight is the requests a process has in flight at once
	// when WorkerConfig.MaxInFlight is unset (the dispatcher sets WORKERS).
	DefaultMaxInFlight = 100
	// DefaultMaxPerHost is the requests in flight to one destination host
	// (host:port) in a process: a customer whose many endpoints are paths
	// of one host gets at most this many connections from each dispatcher.
	DefaultMaxPerHost = 64
	// DefaultStartBudget is how long after its run starts an attempt may
	// wait for a place within the bounds; past it the delivery waits in a
	// job of its own instead (a message job's is handed off), so a job's
	// run never outlasts the budget plus one attempt. It is within
	// JobTimeoutMargin, so a job's deadline still covers its attempts.
	DefaultStartBudget = 2 * time.Second
)

// requestBounds bounds the requests this process has in flight: all of
// them, and those to each destination host. A request waits for its
// host's place first and then for the process's, so one crowded host
// never holds the places other hosts could use. Waiters are served in
// arrival order (a channel's blocked senders).
type requestBounds struct {
	process chan struct{}
	perHost int

	mu    sync.Mutex
	hosts map[string]*hostPlaces
}

type hostPlaces struct {
	sem chan struct{}
	// users counts holders and waiters, so an idle host's entry goes.
	users int
}

func newRequestBounds(maxInFlight, maxPerHost int) *requestBounds {
	return &requestBounds{process: make(chan struct{}, maxInFlight), perHost: maxPerHost, hosts: map[string]*hostPlaces{}}
}

// boundsWait says which bound an attempt could not get a place within.
type boundsWait string

// The bounds a start waits on, as webhook_delivery_start_deferred_total's
// label.
const (
	boundHost    boundsWait = "host"
	boundProcess boundsWait = "process"
	boundJob     boundsWait = "job"
	// boundLate: the run had its place but was frozen past its send
	// deadline before the request (Worker.sendBy), or a trial's past what
	// its slot's lease allows (Admission.EndBy).
	boundLate boundsWait = "late"
	// boundLease: this process's fleet lease had lapsed before the
	// request (its heartbeats failing, or the process frozen past them):
	// another dispatcher may have taken its jobs.
	boundLease boundsWait = "lease"
)

// acquire takes a place for a request to host within both bounds,
// waiting at most wait for them together. It returns the function that gives both back, or the bound it could not
// get a place within (nothing held then).
func (b *requestBounds) acquire(ctx context.Context, host string, wait time.Duration) (func(), boundsWait) {
	b.mu.Lock()
	h := b.hosts[host]
	if h == nil {
		h = &hostPlaces{sem: make(chan struct{}, b.perHost)}
		b.hosts[host] = h
	}
	h.users++
	b.mu.Unlock()
	leave := func() {
		b.mu.Lock()
		if h.users--; h.users == 0 {
			delete(b.hosts, host)
		}
		b.mu.Unlock()
	}
	// A place and the deadline ready together after a wait (a process
	// frozen past it) go to the deadline.
	deadline := time.Now().Add(wait)
	late := func() bool { return !time.Now().Before(deadline) }
	var timeout <-chan time.Time
	if !take(h.sem) {
		t := time.NewTimer(max(wait, 0))
		defer t.Stop()
		timeout = t.C
		select {
		case h.sem <- struct{}{}:
			if late() {
				<-h.sem
				leave()
				return nil, boundHost
			}
		case <-timeout:
			leave()
			return nil, boundHost
		case <-ctx.Done():
			leave()
			return nil, boundHost
		}
	}
	if !take(b.process) {
		if timeout == nil {
			t := time.NewTimer(max(wait, 0))
			defer t.Stop()
			timeout = t.C
		}
		select {
		case b.process <- struct{}{}:
			if late() {
				<-b.process
				<-h.sem
				leave()
				return nil, boundProcess
			}
		case <-timeout:
			<-h.sem
			leave()
			return nil, boundProcess
		case <-ctx.Done():
			<-h.sem
			leave()
			return nil, boundProcess
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-b.process
			<-h.sem
			leave()
		})
	}, ""
}

// inFlight is the requests holding a place now.
func (b *requestBounds) inFlight() int { return len(b.process) }

// take takes a place of sem if one is free.
func take(sem chan struct{}) bool {
	select {
	case sem <- struct{}{}:
		return true
	default:
		return false
	}
}

// hostOf is the destination a URL's requests go to, host:port with the
// scheme's port when none is given: the unit MaxPerHost bounds.
func hostOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return rawURL
	}
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "http" {
		return u.Host + ":80"
	}
	return u.Host + ":443"
}
