package delivery_test

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// gateFleet is several BreakerGates over one database, sharing its trial
// leases: dispatcher processes in miniature.
type gateFleet struct {
	db      *storetest.DB
	store   *store.Store
	gates   []*delivery.BreakerGate
	metrics []*delivery.BreakerMetrics // each gate's
	target  *delivery.Target
}

func setupGateFleet(t *testing.T, n int, cfg breaker.Config) *gateFleet {
	t.Helper()
	db := storetest.New(t)
	st := store.New(db.Pool, nil)
	ep, err := st.CreateEndpoint(context.Background(), store.Endpoint{TenantID: "acme", URL: "https://example.com", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	require.NoError(t, err)
	clock := store.NewDBClock(db.Pool)
	require.NoError(t, clock.Sync(context.Background()))
	f := &gateFleet{db: db, store: st, target: &delivery.Target{Endpoint: ep}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range n {
		trials := st.TrialLeases()
		m := delivery.NewBreakerMetrics(prometheus.NewRegistry(), &delivery.EndpointLabels{})
		g := delivery.NewBreakerGate(delivery.BreakerGateConfig{FlushInterval: 20 * time.Millisecond, BusyRetry: 20 * time.Millisecond, Actor: "gate-" + string(rune('a'+i))},
			st, trials, delivery.FixedBreakerConfig{Config: cfg}, clock.Now, rand.Float64, nil, m)
		f.metrics = append(f.metrics, m)
		require.NoError(t, g.Load(context.Background()))
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.Run(ctx)
		}()
		f.gates = append(f.gates, g)
	}
	// Gates learn of each other's transitions the way dispatchers do.
	listener := store.NewListener(db.URL, nil)
	listener.Handle(store.BreakerChannel, func(p string) {
		for _, g := range f.gates {
			g.HandleNotice(p)
		}
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		listener.Run(ctx)
	}()
	<-listener.Ready()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return f
}

type transitionRow struct {
	from, to   string
	generation int64
	reason     string
}

func (f *gateFleet) transitions(t *testing.T) []transitionRow {
	t.Helper()
	rows, err := f.db.Pool.Query(context.Background(), `SELECT from_state, to_state, generation, reason FROM breaker_transitions ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []transitionRow
	for rows.Next() {
		var r transitionRow
		require.NoError(t, rows.Scan(&r.from, &r.to, &r.generation, &r.reason))
		out = append(out, r)
	}
	return out
}

// TestGateFleetHammersOneBreaker: 3 gates (processes) x 8 goroutines each
// hammer one endpoint through an outage and a recovery, twice. The history
// must be one clean chain: each transition starts where the previous ended
// at the next generation, so no open, close or admission happened twice;
// never more than half_open_concurrency trials ran at once.
func TestGateFleetHammersOneBreaker(t *testing.T) {
	t.Parallel()
	cfg := breaker.Config{
		Trip: breaker.TripRate, FailureRateThreshold: 0.5, Window: 500 * time.Millisecond, MinThroughput: 10,
		ConsecutiveFailures: 5, OpenDuration: 150 * time.Millisecond, OpenJitter: 0.3, OpenBackoff: 1,
		MaxOpenDuration: time.Second, HalfOpenTrials: 3, HalfOpenConcurrency: 1,
	}
	f := setupGateFleet(t, 3, cfg)
	var failing atomic.Bool
	var inTrial, maxTrial, trials, refused, succeeded atomic.Int64
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, g := range f.gates {
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					adm, err := g.Admit(ctx, f.target)
					if err != nil {
						continue
					}
					if adm.Refused {
						refused.Add(1)
						time.Sleep(5 * time.Millisecond) // a refused worker's pace, not synchronisation
						continue
					}
					if adm.Trial {
						trials.Add(1)
						n := inTrial.Add(1)
						for m := maxTrial.Load(); n > m && !maxTrial.CompareAndSwap(m, n); m = maxTrial.Load() {
						}
					}
					time.Sleep(2 * time.Millisecond) // the request's duration, not synchronisation
					class := delivery.ClassSuccess
					if failing.Load() {
						class = delivery.ClassFailure
					} else {
						succeeded.Add(1)
					}
					if adm.Trial {
						inTrial.Add(-1)
					}
					adm.Finish(context.Background(), delivery.Outcome{Class: class, At: time.Now()})
				}
			}()
		}
	}
	stateOf := func() string {
		var s string
		_ = f.db.Pool.QueryRow(context.Background(), `SELECT state FROM breaker_states WHERE endpoint_id = $1`, f.target.ID).Scan(&s)
		return s
	}
	// Each outage lasts until several probes failed; each recovery until
	// traffic flowed closed for a while, so the next outage starts from a
	// window of successes. outageAtLeast is how long each episode lasted at
	// the least: from when the test saw the open to when it let probes
	// succeed.
	var outageAtLeast time.Duration
	for range 2 {
		failing.Store(true)
		require.Eventually(t, func() bool { return stateOf() == "open" }, 30*time.Second, 5*time.Millisecond)
		opened, probed := time.Now(), trials.Load()
		require.Eventually(t, func() bool { return trials.Load() >= probed+3 }, 30*time.Second, 5*time.Millisecond, "several failed probes")
		outageAtLeast += time.Since(opened)
		failing.Store(false)
		require.Eventually(t, func() bool { return stateOf() == "closed" }, 30*time.Second, 5*time.Millisecond)
		flowed := succeeded.Load()
		require.Eventually(t, func() bool { return succeeded.Load() >= flowed+50 }, 30*time.Second, 5*time.Millisecond, "traffic flows closed")
	}
	stop()
	wg.Wait()

	require.LessOrEqual(t, maxTrial.Load(), int64(1), "never more than half_open_concurrency trials in flight")
	require.Positive(t, refused.Load())
	history := f.transitions(t)
	require.NotEmpty(t, history)
	state, gen := "closed", int64(1)
	opens, closes := 0, 0
	for i, tr := range history {
		require.Equal(t, state, tr.from, "transition %d starts where the previous ended: %+v", i, history)
		require.Equal(t, gen+1, tr.generation, "transition %d is the next generation", i)
		state, gen = tr.to, tr.generation
		switch tr.to {
		case "open":
			opens++
		case "closed":
			closes++
			require.Equal(t, breaker.ReasonTrialsSucceeded, tr.reason)
		}
	}
	require.Equal(t, 2, closes, "one close per outage")
	require.GreaterOrEqual(t, opens, 2)

	// Metrics, summed over the processes as Prometheus would: every open
	// counted once, every close observed once with its whole episode (at
	// least outageAtLeast in all; 10 ms each for the clocks' difference).
	var opened float64
	var episodes uint64
	var inOpen float64
	for _, m := range f.metrics {
		opened += testutil.ToFloat64(m.Opened.WithLabelValues(f.target.ID))
		var h dto.Metric
		require.NoError(t, m.OpenDuration.WithLabelValues(f.target.EffectiveClass()).(prometheus.Histogram).Write(&h))
		episodes += h.GetHistogram().GetSampleCount()
		inOpen += h.GetHistogram().GetSampleSum()
	}
	require.Equal(t, float64(opens), opened, "breaker_open_total summed over the processes")
	require.EqualValues(t, 2, episodes, "breaker_open_duration_seconds observed once per close")
	require.GreaterOrEqual(t, inOpen, (outageAtLeast - 20*time.Millisecond).Seconds(), "an episode runs from the first open to the close")
	t.Logf("transitions=%d opens=%d closes=%d trials=%d refused=%d", len(history), opens, closes, trials.Load(), refused.Load())
}

// TestFleetGuardStopsTransportTrips: when the breakers of more than the
// configured share of active endpoints open within a minute on transport
// errors, the dispatcher suspects its own egress and opens no more on
// transport errors, while an endpoint answering 5xx still trips.
func TestFleetGuardStopsTransportTrips(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	st := store.New(db.Pool, nil)
	ctx := context.Background()
	// A window of a minute holds every outcome the test feeds an endpoint
	// however slowly a loaded machine feeds them.
	cfg := breaker.Config{
		Trip: breaker.TripRate, FailureRateThreshold: 0.5, Window: time.Minute, MinThroughput: 5,
		ConsecutiveFailures: 5, OpenDuration: time.Minute, OpenJitter: 0, OpenBackoff: 1,
		MaxOpenDuration: time.Minute, HalfOpenTrials: 1, HalfOpenConcurrency: 1,
	}
	var targets []*delivery.Target
	for range 12 {
		ep, err := st.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
		require.NoError(t, err)
		targets = append(targets, &delivery.Target{Endpoint: ep})
	}
	trials := st.TrialLeases()
	clock := store.NewDBClock(db.Pool)
	require.NoError(t, clock.Sync(ctx))
	g := delivery.NewBreakerGate(delivery.BreakerGateConfig{FleetSuspectShare: 0.3, FleetMinOpens: 3}, st, trials,
		delivery.FixedBreakerConfig{Config: cfg}, clock.Now, rand.Float64, nil, nil)
	require.NoError(t, g.Load(ctx))

	feed := func(tg *delivery.Target, o delivery.Outcome, n int) {
		for range n {
			adm, err := g.Admit(ctx, tg)
			require.NoError(t, err)
			if adm.Refused {
				return
			}
			o.At = clock.Now()
			adm.Finish(ctx, o)
		}
	}
	open := func(tg *delivery.Target) bool {
		var s string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT state FROM breaker_states WHERE endpoint_id = $1`, tg.ID).Scan(&s))
		return s == "open"
	}
	ok := delivery.Outcome{Class: delivery.ClassSuccess}
	dns := delivery.Outcome{Class: delivery.ClassFailure, ErrorClass: delivery.ErrDNS}
	for _, tg := range targets {
		feed(tg, ok, 3) // every endpoint is active
	}
	g.Flush(ctx)
	// One by one, endpoints fail with DNS errors: the first four open (4/12
	// is over 30%); after that the guard is up and none opens on transport
	// errors.
	for i, tg := range targets[:10] {
		feed(tg, dns, 10)
		g.Flush(ctx)
		if i < 4 {
			require.True(t, open(tg), "endpoint %d opens before the guard is up", i)
		}
		g.CheckFleet()
	}
	opened := 0
	for _, tg := range targets[:10] {
		if open(tg) {
			opened++
		}
	}
	require.Equal(t, 4, opened, "the guard stopped the fleet-wide opening")
	// A real outage (5xx) still opens.
	feed(targets[11], delivery.Outcome{Class: delivery.ClassFailure}, 10)
	g.Flush(ctx)
	require.True(t, open(targets[11]))
}

// TestSuppressedTripIsLoggedOncePerWindow: two failures against a min
// throughput of 20 do not trip; the guard's work is logged as
// breaker_trip_suppressed reason=min_throughput, once per endpoint per window.
func TestSuppressedTripIsLoggedOncePerWindow(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	st := store.New(db.Pool, nil)
	ctx := context.Background()
	ep, err := st.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	require.NoError(t, err)
	target := &delivery.Target{Endpoint: ep}
	trials := st.TrialLeases()
	clock := store.NewDBClock(db.Pool)
	require.NoError(t, clock.Sync(ctx))
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	cfg := breaker.DefaultConfig() // rate 0.5, window 30s, min 20
	g := delivery.NewBreakerGate(delivery.BreakerGateConfig{}, st, trials, delivery.FixedBreakerConfig{Config: cfg}, clock.Now, rand.Float64, logger, nil)
	require.NoError(t, g.Load(ctx))
	for range 3 {
		for range 2 {
			adm, err := g.Admit(ctx, target)
			require.NoError(t, err)
			require.False(t, adm.Refused)
			adm.Finish(ctx, delivery.Outcome{Class: delivery.ClassFailure, At: clock.Now()})
		}
		g.Flush(ctx)
	}
	var state string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT state FROM breaker_states WHERE endpoint_id = $1`, ep.ID).Scan(&state))
	require.Equal(t, "closed", state, "6 failures under a min throughput of 20 never trip")
	lines := strings.Count(logs.String(), "msg=breaker_trip_suppressed reason=min_throughput endpoint="+ep.ID+" observations=")
	require.Equal(t, 1, lines, "logged once per endpoint per window:\n%s", logs.String())
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
