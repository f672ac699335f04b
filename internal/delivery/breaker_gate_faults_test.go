package delivery_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
)

// scriptedBreakerStore is a BreakerStore whose answers a test sets: loads
// return loaded, flushes fail while failFlush is set, and every flush's
// arguments are kept.
type scriptedBreakerStore struct {
	mu        sync.Mutex
	loaded    map[string]breaker.Breaker
	failFlush bool
	flushes   [][]store.OutcomeCount
	runs      [][]store.RunCount
}

var _ delivery.BreakerStore = (*scriptedBreakerStore)(nil)

func (s *scriptedBreakerStore) LoadBreakers(context.Context, []string) (map[string]breaker.Breaker, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]breaker.Breaker{}
	for id, b := range s.loaded {
		out[id] = b
	}
	return out, nil
}

func (s *scriptedBreakerStore) FlushOutcomes(_ context.Context, counts []store.OutcomeCount, runs []store.RunCount, _ []store.EvidenceRequest) ([]store.Evidence, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushes = append(s.flushes, counts)
	s.runs = append(s.runs, runs)
	if s.failFlush {
		return nil, errors.New("connection reset")
	}
	return nil, nil
}

func (s *scriptedBreakerStore) CommitTransition(context.Context, string, int64, breaker.Breaker, breaker.Transition, store.TransitionMeta) (bool, error) {
	return false, nil
}

func (s *scriptedBreakerStore) PruneBuckets(context.Context, time.Duration, int) (int64, error) {
	return 0, nil
}

func (s *scriptedBreakerStore) EpisodeStart(context.Context, string, bool) (time.Time, error) {
	return time.Time{}, store.ErrNotFound
}

// noTrials refuses every trial: these tests never reach half-open.
type noTrials struct{}

func (noTrials) Acquire(context.Context, string, breaker.Config, time.Duration, store.TransitionMeta) (*store.Trial, breaker.Decision, breaker.Breaker, error) {
	return nil, breaker.Decision{Admission: breaker.Rejected, Reason: breaker.ReasonHalfOpenBusy}, breaker.Breaker{}, nil
}

func faultGate(t *testing.T, st *scriptedBreakerStore, cfg breaker.Config, now func() time.Time) *delivery.BreakerGate {
	t.Helper()
	g := delivery.NewBreakerGate(delivery.BreakerGateConfig{}, st, noTrials{}, delivery.FixedBreakerConfig{Config: cfg}, now, func() float64 { return 0 }, nil, nil)
	require.NoError(t, g.Load(context.Background()))
	return g
}

// TestFailedFlushKeepsItsTally: a flush that fails (a database hiccup)
// hands its counts and its consecutive run to the next flush instead of
// dropping them.
func TestFailedFlushKeepsItsTally(t *testing.T) {
	t.Parallel()
	cfg := breaker.DefaultConfig()
	cfg.Trip = breaker.TripConsecutive
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	now := func() time.Time { return at }
	st := &scriptedBreakerStore{loaded: map[string]breaker.Breaker{"ep_1": {State: breaker.StateClosed, Generation: 1}}}
	g := faultGate(t, st, cfg, now)
	target := &delivery.Target{Endpoint: store.Endpoint{ID: "ep_1"}}
	fail := func(n int) {
		for range n {
			adm, err := g.Admit(context.Background(), target)
			require.NoError(t, err)
			require.False(t, adm.Refused)
			adm.Finish(context.Background(), delivery.Outcome{Class: delivery.ClassFailure, At: at})
		}
	}

	fail(2)
	st.failFlush = true
	g.Flush(context.Background())
	st.failFlush = false
	fail(1)
	g.Flush(context.Background())

	require.Len(t, st.flushes, 2)
	var failures int
	for _, c := range st.flushes[1] {
		failures += c.Failures
	}
	require.Equal(t, 3, failures, "the failed flush's two failures ride with the next")
	require.Len(t, st.runs[1], 1)
	require.Equal(t, 3, st.runs[1][0].Run.Failures)
	require.Equal(t, 3, st.runs[1][0].Run.Suffix, "the runs chain: three failures in a row")
}

// TestReloadNeverGoesBackAGeneration: a reload that read the breakers
// before a transition's NOTIFY arrived must not replace the newer view.
func TestReloadNeverGoesBackAGeneration(t *testing.T) {
	t.Parallel()
	cfg := breaker.DefaultConfig()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	st := &scriptedBreakerStore{loaded: map[string]breaker.Breaker{"ep_1": {State: breaker.StateClosed, Generation: 1}}}
	g := faultGate(t, st, cfg, func() time.Time { return at })
	target := &delivery.Target{Endpoint: store.Endpoint{ID: "ep_1"}}

	g.HandleNotice(store.BreakerNotice{EndpointID: "ep_1", State: breaker.StateOpen, Generation: 2, OpenUntil: at.Add(time.Minute)}.String())
	// The reload read generation 1 before the open committed.
	require.NoError(t, g.Load(context.Background()))
	adm, err := g.Admit(context.Background(), target)
	require.NoError(t, err)
	require.True(t, adm.Refused, "the open breaker is still open after the stale reload")
	require.Equal(t, breaker.ReasonOpen, adm.Reason)
}
