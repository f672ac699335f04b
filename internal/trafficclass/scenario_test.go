package trafficclass_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/trafficclass"
)

// These tests drive the real pure breaker (breaker.New, Allow, Record) under
// the built-in classes with a fake clock: every instant is passed in.

// threeAM is the fake clock's origin.
var threeAM = time.Date(2026, 3, 2, 3, 0, 0, 0, time.UTC)

// retryOffsets are the attempt times of one delivery that keeps failing,
// relative to its first attempt, under delivery.DefaultSchedule
// (0s,5s,5m,30m,2h,5h,10h,10h) without jitter. The worker's full jitter
// draws each step from [0, step], which moves retries earlier but keeps
// their average rate.
var retryOffsets = []time.Duration{
	0,
	5 * time.Second,
	5*time.Minute + 5*time.Second,
	35*time.Minute + 5*time.Second,
	2*time.Hour + 35*time.Minute + 5*time.Second,
	7*time.Hour + 35*time.Minute + 5*time.Second,
	17*time.Hour + 35*time.Minute + 5*time.Second,
	27*time.Hour + 35*time.Minute + 5*time.Second,
}

// attempt is one delivery attempt at an offset from threeAM.
type attempt struct {
	at      time.Duration
	outcome breaker.Outcome
}

// steady returns attempts every interval in [from, to), each failing when
// fail says so.
func steady(interval, from, to time.Duration, fail func(i int) bool) []attempt {
	var out []attempt
	for i, at := 0, from; at < to; i, at = i+1, at+interval {
		o := breaker.OutcomeSuccess
		if fail(i) {
			o = breaker.OutcomeFailure
		}
		out = append(out, attempt{at: at, outcome: o})
	}
	return out
}

// failing returns every attempt of deliveries first tried at the given
// offsets, all of them failing and retried on retryOffsets.
func failing(firsts ...time.Duration) []attempt {
	var out []attempt
	for _, first := range firsts {
		for _, off := range retryOffsets {
			out = append(out, attempt{at: first + off, outcome: breaker.OutcomeFailure})
		}
	}
	return out
}

func always(int) bool { return true }

// baseline fails every 50th attempt: a 2% background error rate.
func baseline(i int) bool { return i%50 == 49 }

// run is what a replay did.
type run struct {
	// opened is the first open transition, or nil.
	opened *breaker.Transition
	// suppressed counts the evaluations where the min_throughput guard held
	// back a trip.
	suppressed int
}

// replay feeds attempts, sorted by time, through a fresh breaker under c
// until it first opens.
func replay(t *testing.T, c breaker.Config, attempts []attempt) run {
	t.Helper()
	require.NoError(t, c.Validate())
	attempts = slices.Clone(attempts)
	slices.SortStableFunc(attempts, func(a, b attempt) int { return int(a.at - b.at) })
	b := breaker.New(c)
	var r run
	for _, a := range attempts {
		now := threeAM.Add(a.at)
		d := b.Allow(c, now)
		require.NotEqual(t, breaker.Rejected, d.Admission, "a closed breaker admits everything")
		res := b.Record(c, now, d.Ticket, a.outcome, nil)
		if res.Suppressed != nil {
			r.suppressed++
		}
		if res.Transition != nil && res.Transition.To == breaker.StateOpen {
			r.opened = res.Transition
			return r
		}
	}
	return r
}

// threeAMBlip is a quiet endpoint's night: two 404s (ignore) and one 500
// (failure, retried 5 s later and failing again) in an otherwise idle
// window.
var threeAMBlip = []attempt{
	{at: 0, outcome: breaker.OutcomeIgnore},
	{at: 20 * time.Second, outcome: breaker.OutcomeIgnore},
	{at: 40 * time.Second, outcome: breaker.OutcomeFailure},
	{at: 45 * time.Second, outcome: breaker.OutcomeFailure},
}

// outage returns healthy traffic every interval for warmup, then a
// sustained outage (every attempt fails) for the same traffic until
// warmup+length. Healthy traffic carries a 2% background error rate.
func outage(interval, warmup, length time.Duration) []attempt {
	return append(steady(interval, 0, warmup, baseline), steady(interval, warmup, warmup+length, always)...)
}

// TestQuietEndpointDoesNotTripButBusyOneDoes: one threshold for every
// endpoint fires on the quiet one and sleeps through the busy one's outage. An endpoint measured as quiet is classified low; under
// low, its 3 a.m. blip does not trip the breaker (the min_throughput guard
// holds it back), while an endpoint under the same class that is busy enough
// to fill low's window does trip on a real outage, within the time_to_open
// estimate of it.
func TestQuietEndpointDoesNotTripButBusyOneDoes(t *testing.T) {
	t.Parallel()

	// Two weeks of per-minute counts: 40 a minute by day, 2 or 3 a minute
	// from 2 a.m. to 6 a.m.
	perMinute := make([]float64, twoWeeks)
	for i := range perMinute {
		perMinute[i] = 40
		if m := i % 1440; m >= 120 && m < 360 {
			perMinute[i] = float64(2 + i%2)
		}
	}
	m := trafficclass.Measure(perMinute, []float64{0, 0.01, 0.02})
	name, reason := trafficclass.Classify(m, trafficclass.Builtins())
	require.Equal(t, trafficclass.Low, name, reason)
	low, ok := trafficclass.Builtin(name)
	require.True(t, ok)
	c := low.Breaker

	t.Run("quiet 3 a.m. blip does not trip", func(t *testing.T) {
		t.Parallel()
		r := replay(t, c, threeAMBlip)
		require.Nil(t, r.opened)
		require.Positive(t, r.suppressed, "the 100% failure rate over 2 outcomes is held back by min_throughput")

		naive := c
		naive.MinThroughput = 1 // no guard: a rate over two samples is a coin flip
		require.NotNil(t, replay(t, naive, threeAMBlip).opened, "without the guard the blip trips")
	})

	for _, tt := range []struct {
		name     string
		interval time.Duration
	}{
		{"busy at the bottom of low's band (1/min) trips", time.Minute},
		{"busy at the top of low's band (~1 rps) trips", 1100 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			warmup := 30 * time.Minute
			r := replay(t, c, outage(tt.interval, warmup, time.Hour))
			require.NotNil(t, r.opened)
			require.Equal(t, breaker.ReasonFailureRate, r.opened.Reason)
			detect := r.opened.At.Sub(threeAM.Add(warmup))
			require.Positive(t, detect)
			require.LessOrEqual(t, detect, detectionBound(c, tt.interval))
			require.GreaterOrEqual(t, r.opened.Observations, c.MinThroughput)
		})
	}
}

// detectionBound is the time_to_open estimate with no background errors (the
// slowest case), plus one inter-arrival gap and one bucket width for the
// discreteness of arrivals and of the window.
func detectionBound(c breaker.Config, interval time.Duration) time.Duration {
	return trafficclass.TimeToOpen(c.Window, c.FailureRateThreshold, 0) + interval + c.Window/breaker.BucketsPerWindow
}

// TestEveryBuiltinOnBlipAndOutage checks every built-in: the 3 a.m. blip
// never trips it, and a sustained outage at the bottom of its band trips it
// within the detection bound. Trickle's band cannot fill its window, so its
// outage is run at 1 rps: the traffic of an endpoint whose quiet time is
// trickle but whose busy hours are not, or of a new endpoint going live.
func TestEveryBuiltinOnBlipAndOutage(t *testing.T) {
	t.Parallel()
	for _, r := range trafficclass.Ranges() {
		t.Run(r.Class, func(t *testing.T) {
			t.Parallel()
			class, ok := trafficclass.Builtin(r.Class)
			require.True(t, ok)
			c := class.Breaker
			require.Nil(t, replay(t, c, threeAMBlip).opened)

			rps := r.MinRPS
			if r.Class == trafficclass.Trickle {
				rps = 1
			}
			interval := time.Duration(float64(time.Second) / rps)
			warmup := 2 * c.Window
			got := replay(t, c, outage(interval, warmup, 3*c.Window))
			require.NotNil(t, got.opened)
			require.False(t, got.opened.At.Before(threeAM.Add(warmup)), "no trip on healthy traffic with 2%% errors")
			require.LessOrEqual(t, got.opened.At.Sub(threeAM.Add(warmup)), detectionBound(c, interval))
		})
	}
}

// TestTrickleStaysClosedAtTrickleRates makes trickle's claim real: at the
// very top of its band (one delivery every 61 s), with every attempt and
// every retry of the default schedule failing for a week, its breaker never
// gathers min_throughput outcomes in one window, so it never opens; retries
// and the 401/403 auto-disable rule carry such an endpoint.
func TestTrickleStaysClosedAtTrickleRates(t *testing.T) {
	t.Parallel()
	trickle, ok := trafficclass.Builtin(trafficclass.Trickle)
	require.True(t, ok)
	var firsts []time.Duration
	for at := time.Duration(0); at < 7*24*time.Hour; at += 61 * time.Second {
		firsts = append(firsts, at)
	}
	r := replay(t, trickle.Breaker, failing(firsts...))
	require.Nil(t, r.opened)
	require.Positive(t, r.suppressed)
}

// TestDefaultClassDoesNotTripOnNewEndpointTestTraffic is why DefaultClass is
// trickle: a developer sends five test events in two minutes to a handler
// that still answers 500, and every attempt and retry fails. Trickle does not
// trip; low, the obvious alternative for an endpoint with little traffic,
// does, because the 5 s retries double the failures in its 10-minute
// window. And once the new endpoint goes live at 5 rps, trickle still opens
// on a real outage within about half a minute.
func TestDefaultClassDoesNotTripOnNewEndpointTestTraffic(t *testing.T) {
	t.Parallel()
	testTraffic := failing(0, 30*time.Second, 60*time.Second, 90*time.Second, 120*time.Second)

	def, ok := trafficclass.Builtin(trafficclass.DefaultClass)
	require.True(t, ok)
	require.Nil(t, replay(t, def.Breaker, testTraffic).opened)

	low, ok := trafficclass.Builtin(trafficclass.Low)
	require.True(t, ok)
	require.NotNil(t, replay(t, low.Breaker, testTraffic).opened, "low would have tripped on test traffic")

	r := replay(t, def.Breaker, outage(200*time.Millisecond, 5*time.Minute, 5*time.Minute))
	require.NotNil(t, r.opened)
	require.LessOrEqual(t, r.opened.At.Sub(threeAM.Add(5*time.Minute)), 35*time.Second)
}
