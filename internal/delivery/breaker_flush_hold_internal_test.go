package delivery

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/store"
)

// flushRecorder is a BreakerStore that keeps what each flush wrote.
type flushRecorder struct {
	BreakerStore
	mu      sync.Mutex
	flushed [][]store.OutcomeCount
}

func (f *flushRecorder) FlushOutcomes(_ context.Context, counts []store.OutcomeCount, _ []store.RunCount, _ []store.EvidenceRequest) ([]store.Evidence, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flushed = append(f.flushed, counts)
	return nil, nil
}

func (f *flushRecorder) endpoints(i int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for _, c := range f.flushed[i] {
		ids = append(ids, c.EndpointID)
	}
	return ids
}

// TestFleetHoldsSuccessesNotFailures: in a fleet of four, a tally of
// successes alone waits up to three flush intervals for the next flush,
// so the fleet writes successes as often as one dispatcher does; a tally
// with a failure, and a consecutive-failure breaker's successes (a success
// resets its count), go at the next flush, and the tallies held then go
// with them, in the same statement; alone, nothing waits.
func TestFleetHoldsSuccessesNotFailures(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	rate := breaker.Config{Trip: breaker.TripRate, FailureRateThreshold: 0.5, Window: 10 * time.Second, MinThroughput: 10}
	consecutive := breaker.Config{Trip: breaker.TripConsecutive, ConsecutiveFailures: 5, Window: 10 * time.Second}
	live := 4
	rec := &flushRecorder{}
	g := NewBreakerGate(BreakerGateConfig{FlushInterval: 100 * time.Millisecond, Live: func() int { return live }},
		rec, nil, FixedBreakerConfig{Config: rate}, clock, func() float64 { return 0.5 }, nil, nil)
	require.Equal(t, 300*time.Millisecond, g.successHold())

	g.count("ep_quiet", 1, rate, true, Outcome{Class: ClassSuccess, At: now})
	ctx := context.Background()
	g.flush(ctx, g.successHold())
	require.Empty(t, rec.flushed, "successes alone wait")

	g.count("ep_failing", 1, rate, true, Outcome{Class: ClassFailure, At: now})
	g.flush(ctx, g.successHold())
	require.ElementsMatch(t, []string{"ep_quiet", "ep_failing"}, rec.endpoints(0),
		"a failure is written at once, the held successes with it in the same statement")

	g.count("ep_consecutive", 1, consecutive, true, Outcome{Class: ClassSuccess, At: now})
	g.flush(ctx, g.successHold())
	require.Equal(t, []string{"ep_consecutive"}, rec.endpoints(1), "a consecutive-failure breaker's success is written at once")

	g.count("ep_quiet", 1, rate, true, Outcome{Class: ClassSuccess, At: now})
	now = now.Add(200 * time.Millisecond)
	g.count("ep_quiet", 1, rate, true, Outcome{Class: ClassSuccess, At: now})
	g.count("ep_other", 1, rate, true, Outcome{Class: ClassSuccess, At: now})
	g.flush(ctx, g.successHold())
	require.Len(t, rec.flushed, 2, "still within the hold: nothing to write")

	now = now.Add(100 * time.Millisecond)
	g.flush(ctx, g.successHold())
	require.ElementsMatch(t, []string{"ep_quiet", "ep_other"}, rec.endpoints(2), "the hold is over: the oldest tally and the younger with it")
	for _, c := range rec.flushed[2] {
		if c.EndpointID == "ep_quiet" {
			require.Equal(t, 2, c.Successes, "both successes, in one row")
		}
	}

	g.count("ep_quiet", 1, rate, true, Outcome{Class: ClassSuccess, At: now})
	g.Flush(ctx)
	require.Equal(t, []string{"ep_quiet"}, rec.endpoints(3), "Flush (a stop's) takes everything")

	live = 1
	require.Zero(t, g.successHold(), "alone, nothing waits")
	live = 40
	require.Equal(t, maxSuccessHold, g.successHold())
}
