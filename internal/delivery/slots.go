package delivery

import (
	"context"
	"sync"
	"time"
)

// endpointSlots caps the attempts in flight to each endpoint in this
// process. When an endpoint's slots are all taken, a delivery to an
// endpoint that answers fast waits up to maxWait for one (a slot frees
// within milliseconds there) instead of being snoozed at once: a snooze
// rewrites the job row and fetches it again, which on a hot endpoint costs
// more than the wait. A delivery to a slow endpoint (a hanging one, whose
// slots free only at the request timeout) is refused at once, so it never
// ties up a worker waiting.
type endpointSlots struct {
	max     int
	maxWait time.Duration
	fast    time.Duration

	mu sync.Mutex
	m  map[string]*slotState
}

type slotState struct {
	inFlight int
	// latency is a moving average of the endpoint's answer times.
	latency time.Duration
	// free is signalled when a slot is given back.
	free chan struct{}
}

func newEndpointSlots(max int) *endpointSlots {
	return &endpointSlots{max: max, maxWait: 50 * time.Millisecond, fast: 100 * time.Millisecond, m: map[string]*slotState{}}
}

func (s *endpointSlots) state(id string) *slotState {
	st := s.m[id]
	if st == nil {
		st = &slotState{free: make(chan struct{}, 1)}
		s.m[id] = st
	}
	return st
}

// acquire takes a slot of endpoint id, waiting for one as described above.
func (s *endpointSlots) acquire(ctx context.Context, id string) bool {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		s.mu.Lock()
		st := s.state(id)
		if st.inFlight < s.max {
			st.inFlight++
			s.mu.Unlock()
			return true
		}
		wait, free := st.latency < s.fast, st.free
		s.mu.Unlock()
		if !wait {
			return false
		}
		if timer == nil {
			timer = time.NewTimer(s.maxWait)
		}
		select {
		case <-free:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// retryIn is how long a delivery refused a slot of endpoint id waits
// before its job runs again: a fast endpoint's slot frees within
// milliseconds, so soon (minSlotRetry); a slow endpoint's only as its
// requests end, so about one answer's time (its average, at most
// maxSlotRetry). Retried sooner, the delivery would be refused again,
// its job row rewritten each time: an endpoint answering in 5 s with 100
// deliveries waiting would cost some 300 job updates a second for nothing.
func (s *endpointSlots) retryIn(id string) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.m[id]
	if st == nil || st.latency < s.fast {
		return minSlotRetry
	}
	return min(max(st.latency, minSlotRetry), maxSlotRetry)
}

const (
	minSlotRetry = 100 * time.Millisecond
	maxSlotRetry = 5 * time.Second
)

// release gives a slot back; took is how long the endpoint took to answer
// (zero when no request was made).
func (s *endpointSlots) release(id string, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state(id)
	st.inFlight = max(st.inFlight-1, 0)
	if took > 0 {
		st.latency += (took - st.latency) / 8
	}
	select {
	case st.free <- struct{}{}:
	default:
	}
	if st.inFlight > 0 {
		return
	}
	// Nothing in flight, so nobody waits: forget the endpoint, or the map
	// would hold every endpoint ever delivered to. A fast endpoint loses
	// nothing (a new entry is treated as fast); a slow one's average is
	// kept, so its next delivery past the cap is refused at once, until
	// more than maxIdle idle endpoints are remembered: then every idle
	// entry goes.
	if st.latency < s.fast {
		delete(s.m, id)
		return
	}
	if len(s.m) > maxIdleSlots {
		for k, v := range s.m {
			if v.inFlight == 0 {
				delete(s.m, k)
			}
		}
	}
}

// maxIdleSlots bounds the idle slow endpoints endpointSlots remembers.
const maxIdleSlots = 1024
