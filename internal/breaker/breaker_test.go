package breaker_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
)

// at returns the instant seconds after the Unix epoch.
func at(seconds float64) time.Time {
	return time.Unix(0, int64(math.Round(seconds*1e9))).UTC()
}

func noJitter() float64 { return 0 }

// fakeClock is an injected clock that only moves when a test steps it.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Advance(d time.Duration) time.Time {
	c.now = c.now.Add(d)
	return c.now
}

// send admits one request at now, requires that it was not rejected, and
// records outcome o for it at the same instant.
func send(t require.TestingT, b *breaker.Breaker, c breaker.Config, now time.Time, o breaker.Outcome) (breaker.Decision, breaker.Result) {
	d := b.Allow(c, now)
	require.NotEqual(t, breaker.Rejected, d.Admission, "request at %v was rejected (%s)", now, d.Reason)
	return d, b.Record(c, now, d.Ticket, o, noJitter)
}

// The minimum-throughput guard is checked before the rate, so two failures
// (a 100% rate) do not trip a breaker that needs 20 observations.
func TestMinThroughputGuardBlocksATwoRequestTrip(t *testing.T) {
	t.Parallel()
	c := breaker.DefaultConfig() // 0.5 over 30s, min_throughput 20
	b := breaker.New(c)

	_, first := send(t, &b, c, at(100), breaker.OutcomeFailure)
	_, second := send(t, &b, c, at(101), breaker.OutcomeFailure)

	require.Equal(t, breaker.StateClosed, b.State, "100% failure over 2 samples must not trip")
	require.Nil(t, first.Transition)
	require.Nil(t, second.Transition)
	require.Equal(t, &breaker.Suppression{Observations: 1, Failures: 1, FailureRate: 1}, first.Suppressed)
	require.Equal(t, &breaker.Suppression{Observations: 2, Failures: 2, FailureRate: 1}, second.Suppressed)
}

// Once the window holds min_throughput observations, a failure rate at the
// threshold trips.
func TestRateThresholdTripsOnceVolumeIsReached(t *testing.T) {
	t.Parallel()
	c := breaker.DefaultConfig()
	c.OpenJitter = 0
	b := breaker.New(c)

	for i := range 20 {
		outcome := breaker.OutcomeSuccess
		if i%2 == 0 {
			outcome = breaker.OutcomeFailure
		}
		now := at(100 + float64(i)*0.1)
		_, r := send(t, &b, c, now, outcome)
		require.True(t, r.Applied)
		if i < 19 {
			require.Nil(t, r.Transition, "tripped early at outcome %d", i+1)
			require.Equal(t, breaker.StateClosed, b.State)
			continue
		}
		require.Equal(t, &breaker.Transition{
			From:         breaker.StateClosed,
			To:           breaker.StateOpen,
			At:           now,
			Generation:   2,
			FailureRate:  0.5,
			Observations: 20,
			Failures:     10,
			Consecutive:  0,
			OpenUntil:    now.Add(30 * time.Second),
			Reason:       breaker.ReasonFailureRate,
		}, r.Transition)
	}
	require.Equal(t, breaker.StateOpen, b.State)
	require.EqualValues(t, 1, b.Trips)
}

// Half-open closes only after half_open_trials successes in a row: one good
// probe proves little. (Which outcomes count is the delivery package's
// classifier.)
func TestHalfOpenNeedsAllThreeTrials(t *testing.T) {
	t.Parallel()
	c := breaker.DefaultConfig()
	c.OpenDuration, c.HalfOpenTrials, c.MinThroughput, c.FailureRateThreshold, c.OpenJitter = 30*time.Second, 3, 1, 0.5, 0
	b := breaker.New(c)

	_, r := send(t, &b, c, at(100), breaker.OutcomeFailure)
	require.NotNil(t, r.Transition)
	require.Equal(t, breaker.StateOpen, b.State)
	require.Equal(t, at(130), b.OpenUntil)

	rejected := b.Allow(c, at(129.999))
	require.Equal(t, breaker.Decision{Admission: breaker.Rejected, Reason: breaker.ReasonOpen, RetryAt: at(130)}, rejected)

	d := b.Allow(c, at(131)) // open duration elapsed
	require.Equal(t, breaker.Trial, d.Admission)
	require.NotNil(t, d.Transition)
	require.Equal(t, breaker.ReasonOpenElapsed, d.Transition.Reason)
	require.Nil(t, b.Record(c, at(131), d.Ticket, breaker.OutcomeSuccess, noJitter).Transition)

	_, r = send(t, &b, c, at(132), breaker.OutcomeSuccess)
	require.Nil(t, r.Transition)
	require.Equal(t, breaker.StateHalfOpen, b.EffectiveState(at(132)), "two successes are not enough")

	_, r = send(t, &b, c, at(133), breaker.OutcomeSuccess)
	require.NotNil(t, r.Transition)
	require.Equal(t, breaker.ReasonTrialsSucceeded, r.Transition.Reason)
	require.Equal(t, breaker.StateClosed, b.State)
}

func consecutiveConfig(threshold int) breaker.Config {
	c := breaker.DefaultConfig()
	c.Trip = breaker.TripConsecutive
	c.ConsecutiveFailures = threshold
	c.OpenJitter = 0
	return c
}

func parseOutcomes(t *testing.T, letters string) []breaker.Outcome {
	t.Helper()
	outcomes := make([]breaker.Outcome, len(letters))
	for i, l := range letters {
		switch l {
		case 'S':
			outcomes[i] = breaker.OutcomeSuccess
		case 'F':
			outcomes[i] = breaker.OutcomeFailure
		case 'I':
			outcomes[i] = breaker.OutcomeIgnore
		case 'A':
			outcomes[i] = breaker.OutcomeAuthFailure
		default:
			t.Fatalf("unknown outcome letter %q", l)
		}
	}
	return outcomes
}

func TestConsecutiveModeTripsOnNInARow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		threshold int
		outcomes  string
		tripAt    int // index of the outcome that trips, or -1
	}{
		{"three in a row", 3, "FFF", 2},
		{"a success resets the count", 3, "FFSFFF", 5},
		{"ignore neither counts nor resets", 3, "FFIF", 3},
		{"auth failure neither counts nor resets", 3, "FAFF", 3},
		{"never three in a row", 3, "FFSFFSFFSIIA", -1},
		{"threshold of one", 1, "SSF", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := consecutiveConfig(tt.threshold)
			b := breaker.New(c)
			clock := fakeClock{now: epoch}
			tripped := -1
			for i, o := range parseOutcomes(t, tt.outcomes) {
				_, r := send(t, &b, c, clock.Advance(time.Millisecond), o)
				if r.Transition != nil {
					require.Equal(t, -1, tripped, "tripped twice")
					require.Equal(t, breaker.ReasonConsecutiveFailures, r.Transition.Reason)
					require.Equal(t, tt.threshold, r.Transition.Consecutive)
					tripped = i
				}
			}
			require.Equal(t, tt.tripAt, tripped)
		})
	}
}

func TestRateModeTracksButDoesNotTripOnConsecutive(t *testing.T) {
	t.Parallel()
	c := breaker.DefaultConfig()
	c.ConsecutiveFailures = 2
	c.MinThroughput = 100
	b := breaker.New(c)
	for i := range 10 {
		send(t, &b, c, at(100+float64(i)), breaker.OutcomeFailure)
	}
	require.Equal(t, breaker.StateClosed, b.State)
	require.Equal(t, 10, b.Consecutive)
}

// TestConsecutiveTranscript walks a consecutive-count breaker through a
// transcript: threshold 3, cool-off 5s, one trial to close, no jitter.
func TestConsecutiveTranscript(t *testing.T) {
	t.Parallel()
	c := consecutiveConfig(3)
	c.OpenDuration, c.MaxOpenDuration, c.HalfOpenTrials = 5*time.Second, 5*time.Second, 1
	b := breaker.New(c)

	steps := []struct {
		at       time.Duration
		outcome  breaker.Outcome
		from, to breaker.State
		sent     bool
	}{
		{0, breaker.OutcomeFailure, breaker.StateClosed, breaker.StateClosed, true},
		{0, breaker.OutcomeFailure, breaker.StateClosed, breaker.StateClosed, true},
		{0, breaker.OutcomeFailure, breaker.StateClosed, breaker.StateOpen, true},
		{0, breaker.OutcomeFailure, breaker.StateOpen, breaker.StateOpen, false},
		{0, breaker.OutcomeFailure, breaker.StateOpen, breaker.StateOpen, false},
		{5 * time.Second, breaker.OutcomeFailure, breaker.StateHalfOpen, breaker.StateOpen, true},
		{10 * time.Second, breaker.OutcomeSuccess, breaker.StateHalfOpen, breaker.StateClosed, true},
		{10 * time.Second, breaker.OutcomeSuccess, breaker.StateClosed, breaker.StateClosed, true},
	}
	for i, step := range steps {
		now := epoch.Add(step.at)
		require.Equal(t, step.from, b.EffectiveState(now), "request %d before", i+1)
		d := b.Allow(c, now)
		require.Equal(t, step.sent, d.Admission != breaker.Rejected, "request %d admission", i+1)
		if d.Admission != breaker.Rejected {
			b.Record(c, now, d.Ticket, step.outcome, noJitter)
		}
		require.Equal(t, step.to, b.EffectiveState(now), "request %d after", i+1)
	}
	require.EqualValues(t, 2, b.Trips)
}

func TestOpenDurationCarriesJitter(t *testing.T) {
	t.Parallel()
	c := consecutiveConfig(1)
	c.OpenJitter = 0.3
	b := breaker.New(c)
	d := b.Allow(c, epoch)
	r := b.Record(c, epoch, d.Ticket, breaker.OutcomeFailure, func() float64 { return 0.5 })
	require.Equal(t, epoch.Add(34500*time.Millisecond), r.Transition.OpenUntil)
	require.Equal(t, b.OpenUntil, r.Transition.OpenUntil)
}

func TestOpenBackoffGrowsCapsAndResetsAfterClose(t *testing.T) {
	t.Parallel()
	c := consecutiveConfig(1)
	c.OpenDuration, c.OpenBackoff, c.MaxOpenDuration, c.HalfOpenTrials = 10*time.Second, 2, 30*time.Second, 1
	b := breaker.New(c)
	clock := fakeClock{now: epoch}

	_, r := send(t, &b, c, clock.now, breaker.OutcomeFailure)
	opens := []time.Duration{r.Transition.OpenUntil.Sub(r.Transition.At)}
	for range 3 {
		clock.now = b.OpenUntil
		_, r = send(t, &b, c, clock.now, breaker.OutcomeFailure)
		require.Equal(t, breaker.ReasonTrialFailed, r.Transition.Reason)
		opens = append(opens, r.Transition.OpenUntil.Sub(r.Transition.At))
	}
	require.Equal(t, []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second, 30 * time.Second}, opens)
	require.Equal(t, 4, b.OpenStreak)

	clock.now = b.OpenUntil
	_, r = send(t, &b, c, clock.now, breaker.OutcomeSuccess)
	require.Equal(t, breaker.StateClosed, b.State)
	require.Zero(t, b.OpenStreak)

	_, r = send(t, &b, c, clock.Advance(time.Second), breaker.OutcomeFailure)
	require.Equal(t, 10*time.Second, r.Transition.OpenUntil.Sub(r.Transition.At), "backoff starts over after a close")
}

// TestWindowIsReplacedOnClose checks that pre-outage failures never count
// again once the breaker has closed.
func TestWindowIsReplacedOnClose(t *testing.T) {
	t.Parallel()
	t.Run("rate", func(t *testing.T) {
		t.Parallel()
		c := breaker.DefaultConfig()
		c.OpenDuration, c.MaxOpenDuration, c.OpenJitter, c.HalfOpenTrials = 5*time.Second, 5*time.Second, 0, 1
		b := breaker.New(c)
		clock := fakeClock{now: at(100)}
		for i := range 20 {
			outcome := breaker.OutcomeSuccess
			if i >= 10 {
				outcome = breaker.OutcomeFailure
			}
			send(t, &b, c, clock.Advance(100*time.Millisecond), outcome)
		}
		require.Equal(t, breaker.StateOpen, b.State)

		clock.now = b.OpenUntil
		_, r := send(t, &b, c, clock.now, breaker.OutcomeSuccess)
		require.Equal(t, breaker.ReasonTrialsSucceeded, r.Transition.Reason)
		obs, _ := b.Window.Counts(clock.now)
		require.Zero(t, obs)

		// The old window (10 successes, 10 failures, all within 30s) plus
		// this failure would be 11/21 >= 0.5: a trip.
		_, r = send(t, &b, c, clock.Advance(100*time.Millisecond), breaker.OutcomeFailure)
		require.Nil(t, r.Transition)
		require.Equal(t, breaker.StateClosed, b.State)
		require.Equal(t, []breaker.Bucket{{Start: breaker.BucketStart(c, clock.now), Failures: 1}}, b.Window.Buckets(clock.now))
	})
	t.Run("consecutive", func(t *testing.T) {
		t.Parallel()
		c := consecutiveConfig(3)
		c.HalfOpenTrials = 1
		b := breaker.New(c)
		clock := fakeClock{now: epoch}
		for range 3 {
			send(t, &b, c, clock.Advance(time.Millisecond), breaker.OutcomeFailure)
		}
		clock.now = b.OpenUntil
		send(t, &b, c, clock.now, breaker.OutcomeSuccess)
		require.Equal(t, breaker.StateClosed, b.State)
		send(t, &b, c, clock.Advance(time.Millisecond), breaker.OutcomeFailure)
		send(t, &b, c, clock.Advance(time.Millisecond), breaker.OutcomeFailure)
		require.Equal(t, breaker.StateClosed, b.State)
		require.Equal(t, 2, b.Consecutive)
	})
}

func TestStaleOutcomesAreDropped(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// stage moves the breaker and returns the ticket that has gone stale.
		stage func(t *testing.T, b *breaker.Breaker, c breaker.Config) breaker.Ticket
	}{
		{"closed outcome after the breaker opened", func(t *testing.T, b *breaker.Breaker, c breaker.Config) breaker.Ticket {
			late := b.Allow(c, epoch)
			send(t, b, c, epoch, breaker.OutcomeFailure)
			require.Equal(t, breaker.StateOpen, b.State)
			return late.Ticket
		}},
		{"trial outcome after Reset", func(t *testing.T, b *breaker.Breaker, c breaker.Config) breaker.Ticket {
			send(t, b, c, epoch, breaker.OutcomeFailure)
			trial := b.Allow(c, b.OpenUntil)
			require.Equal(t, breaker.Trial, trial.Admission)
			b.Reset(c, b.OpenUntil)
			return trial.Ticket
		}},
		{"second trial after the first failed", func(t *testing.T, b *breaker.Breaker, c breaker.Config) breaker.Ticket {
			send(t, b, c, epoch, breaker.OutcomeFailure)
			now := b.OpenUntil
			first, second := b.Allow(c, now), b.Allow(c, now)
			require.Equal(t, breaker.Trial, second.Admission)
			b.Record(c, now, first.Ticket, breaker.OutcomeFailure, noJitter)
			require.Equal(t, breaker.StateOpen, b.State)
			return second.Ticket
		}},
		{"closed outcome after Isolate", func(t *testing.T, b *breaker.Breaker, c breaker.Config) breaker.Ticket {
			late := b.Allow(c, epoch)
			b.Isolate(c, epoch)
			return late.Ticket
		}},
	}
	for _, tt := range tests {
		for _, o := range []breaker.Outcome{breaker.OutcomeSuccess, breaker.OutcomeFailure, breaker.OutcomeIgnore} {
			t.Run(tt.name+"/"+o.String(), func(t *testing.T) {
				t.Parallel()
				c := consecutiveConfig(1)
				c.HalfOpenConcurrency = 2
				b := breaker.New(c)
				stale := tt.stage(t, &b, c)
				before := b
				r := b.Record(c, b.OpenUntil.Add(time.Millisecond), stale, o, noJitter)
				require.Equal(t, breaker.Result{}, r)
				require.Equal(t, before, b, "a stale outcome must change nothing, not even TrialsInFlight")
			})
		}
	}
}

func TestIgnoredOutcomesWhileClosed(t *testing.T) {
	t.Parallel()
	for _, o := range []breaker.Outcome{breaker.OutcomeIgnore, breaker.OutcomeAuthFailure} {
		t.Run(o.String(), func(t *testing.T) {
			t.Parallel()
			c := consecutiveConfig(2)
			b := breaker.New(c)
			send(t, &b, c, epoch, breaker.OutcomeFailure)
			before := b
			_, r := send(t, &b, c, epoch, o)
			require.Equal(t, breaker.Result{}, r)
			require.Equal(t, before, b, "neither the window nor the count moves")
		})
	}
}

func TestIgnoredTrialGivesBackItsSlot(t *testing.T) {
	t.Parallel()
	for _, o := range []breaker.Outcome{breaker.OutcomeIgnore, breaker.OutcomeAuthFailure} {
		t.Run(o.String(), func(t *testing.T) {
			t.Parallel()
			c := consecutiveConfig(1)
			c.HalfOpenTrials = 2
			b := breaker.New(c)
			send(t, &b, c, epoch, breaker.OutcomeFailure)
			now := b.OpenUntil
			send(t, &b, c, now, breaker.OutcomeSuccess)

			d := b.Allow(c, now)
			require.Equal(t, breaker.Trial, d.Admission)
			require.Equal(t, breaker.Rejected, b.Peek(c, now).Admission)
			r := b.Record(c, now, d.Ticket, o, noJitter)
			require.Equal(t, breaker.Result{Applied: true}, r)
			require.Equal(t, breaker.StateHalfOpen, b.State)
			require.Zero(t, b.TrialsInFlight)
			require.Equal(t, 1, b.TrialSuccesses, "an ignored trial neither counts nor resets successes")

			send(t, &b, c, now, breaker.OutcomeSuccess)
			require.Equal(t, breaker.StateClosed, b.State)
		})
	}
}

func TestHalfOpenConcurrencyLimitsTrials(t *testing.T) {
	t.Parallel()
	c := consecutiveConfig(1)
	c.HalfOpenConcurrency, c.HalfOpenTrials = 2, 3
	b := breaker.New(c)
	send(t, &b, c, epoch, breaker.OutcomeFailure)
	now := b.OpenUntil

	first, second, third := b.Allow(c, now), b.Allow(c, now), b.Allow(c, now)
	require.Equal(t, breaker.Trial, first.Admission)
	require.NotNil(t, first.Transition)
	require.Equal(t, breaker.Trial, second.Admission)
	require.Nil(t, second.Transition)
	require.Equal(t, breaker.Decision{Admission: breaker.Rejected, Reason: breaker.ReasonHalfOpenBusy}, third)
	require.Equal(t, 2, b.TrialsInFlight)

	b.Record(c, now, first.Ticket, breaker.OutcomeSuccess, noJitter)
	require.Equal(t, breaker.Trial, b.Allow(c, now).Admission)
}

func TestAllowDecisions(t *testing.T) {
	t.Parallel()
	c := consecutiveConfig(1)
	opened := func() breaker.Breaker {
		b := breaker.New(c)
		send(t, &b, c, epoch, breaker.OutcomeFailure)
		return b
	}
	openUntil := epoch.Add(c.OpenDuration)
	isolated := breaker.New(c)
	isolated.Isolate(c, epoch)

	tests := []struct {
		name    string
		breaker breaker.Breaker
		now     time.Time
		want    breaker.Decision
		state   breaker.State
	}{
		{"closed", breaker.New(c), epoch,
			breaker.Decision{Admission: breaker.Admitted, Ticket: breaker.Ticket{Generation: 1}}, breaker.StateClosed},
		{"open", opened(), openUntil.Add(-time.Nanosecond),
			breaker.Decision{Admission: breaker.Rejected, Reason: breaker.ReasonOpen, RetryAt: openUntil}, breaker.StateOpen},
		{"isolated", isolated, epoch.Add(time.Hour),
			breaker.Decision{Admission: breaker.Rejected, Reason: breaker.ReasonIsolated}, breaker.StateIsolated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := tt.breaker
			require.Equal(t, tt.want, b.Peek(c, tt.now))
			require.Equal(t, tt.want, b.Allow(c, tt.now))
			require.Equal(t, tt.state, b.State)
		})
	}

	t.Run("open elapsed", func(t *testing.T) {
		t.Parallel()
		b := opened()
		d := b.Allow(c, openUntil)
		require.Equal(t, breaker.Trial, d.Admission)
		require.Equal(t, breaker.Ticket{Generation: 3, Trial: true}, d.Ticket)
		require.Equal(t, breaker.StateOpen, d.Transition.From)
		require.Equal(t, breaker.StateHalfOpen, d.Transition.To)
		require.Equal(t, int64(3), d.Transition.Generation)
		require.Equal(t, openUntil, d.Transition.At)
		require.Equal(t, breaker.StateHalfOpen, b.State)
	})
}

func TestPeekChangesNothing(t *testing.T) {
	t.Parallel()
	c := consecutiveConfig(1)
	b := breaker.New(c)
	send(t, &b, c, epoch, breaker.OutcomeFailure)
	before := b
	peeked := b.Peek(c, b.OpenUntil)
	require.Equal(t, before, b)
	require.Equal(t, breaker.Trial, peeked.Admission)
	require.Equal(t, peeked, b.Allow(c, b.OpenUntil))
}

func TestEffectiveStateDerivesHalfOpenFromTheClock(t *testing.T) {
	t.Parallel()
	c := consecutiveConfig(1)
	b := breaker.New(c)
	require.Equal(t, breaker.StateClosed, b.EffectiveState(epoch))
	send(t, &b, c, epoch, breaker.OutcomeFailure)
	require.Equal(t, breaker.StateOpen, b.EffectiveState(b.OpenUntil.Add(-time.Nanosecond)))
	require.Equal(t, breaker.StateHalfOpen, b.EffectiveState(b.OpenUntil))
	require.Equal(t, breaker.StateOpen, b.State, "deriving half-open stores nothing")
	b.Isolate(c, epoch)
	require.Equal(t, breaker.StateIsolated, b.EffectiveState(epoch.Add(24*time.Hour)))
}

func TestOperatorResetAndIsolate(t *testing.T) {
	t.Parallel()
	c := consecutiveConfig(2)
	b := breaker.New(c)
	send(t, &b, c, epoch, breaker.OutcomeFailure)

	iso := b.Isolate(c, epoch.Add(time.Second))
	require.Equal(t, breaker.Transition{
		From: breaker.StateClosed, To: breaker.StateIsolated, At: epoch.Add(time.Second), Generation: 2,
		FailureRate: 1, Observations: 1, Failures: 1, Consecutive: 1, Reason: breaker.ReasonIsolate,
	}, iso)
	require.Equal(t, breaker.StateIsolated, b.State)
	require.Zero(t, b.Consecutive)
	require.Zero(t, b.Trips, "isolation is not a trip")
	for _, later := range []time.Duration{0, time.Minute, 24 * time.Hour} {
		require.Equal(t, breaker.Rejected, b.Allow(c, epoch.Add(later)).Admission)
	}

	reset := b.Reset(c, epoch.Add(time.Hour))
	require.Equal(t, breaker.StateIsolated, reset.From)
	require.Equal(t, breaker.StateClosed, reset.To)
	require.Equal(t, breaker.ReasonReset, reset.Reason)
	require.Equal(t, int64(3), reset.Generation)
	require.Equal(t, breaker.Breaker{
		State: breaker.StateClosed, Generation: 3, Window: breaker.NewWindow(c),
	}, b)

	// Reset from open clears the streak and the window.
	send(t, &b, c, epoch.Add(time.Hour), breaker.OutcomeFailure)
	send(t, &b, c, epoch.Add(time.Hour), breaker.OutcomeFailure)
	require.Equal(t, breaker.StateOpen, b.State)
	b.Reset(c, epoch.Add(time.Hour))
	require.Zero(t, b.OpenStreak)
	require.EqualValues(t, 1, b.Trips)
	obs, _ := b.Window.Counts(epoch.Add(time.Hour))
	require.Zero(t, obs)
}

// TestEvaluateSharedEvidence is how the Postgres store uses Evaluate: it loads
// the shared buckets and count into a closed breaker and asks for a verdict.
func TestEvaluateSharedEvidence(t *testing.T) {
	t.Parallel()
	t.Run("rate", func(t *testing.T) {
		t.Parallel()
		c := breaker.DefaultConfig()
		c.OpenJitter = 0
		b := breaker.New(c)
		now := at(100)
		b.Window.Add(now.Add(-20*time.Second), 5, 3)
		b.Window.Add(now.Add(-2*time.Second), 5, 7)
		r := b.Evaluate(c, now, noJitter)
		require.True(t, r.Applied)
		require.Equal(t, breaker.ReasonFailureRate, r.Transition.Reason)
		require.Equal(t, 20, r.Transition.Observations)
		require.Equal(t, 10, r.Transition.Failures)

		require.Equal(t, breaker.Result{}, b.Evaluate(c, now, noJitter), "only a closed breaker is evaluated")
	})
	t.Run("old buckets have left", func(t *testing.T) {
		t.Parallel()
		c := breaker.DefaultConfig()
		b := breaker.New(c)
		now := at(100)
		b.Window.Add(now.Add(-31*time.Second), 0, 50)
		b.Window.Add(now, 20, 0)
		require.Equal(t, breaker.Result{Applied: true}, b.Evaluate(c, now, noJitter))
	})
	t.Run("consecutive", func(t *testing.T) {
		t.Parallel()
		c := consecutiveConfig(5)
		b := breaker.New(c)
		b.Consecutive = 4
		require.Nil(t, b.Evaluate(c, epoch, noJitter).Transition)
		b.Consecutive = 5
		r := b.Evaluate(c, epoch, noJitter)
		require.Equal(t, breaker.ReasonConsecutiveFailures, r.Transition.Reason)
		require.Equal(t, 5, r.Transition.Consecutive)
	})
}

func TestGenerationBumpsOnEveryTransition(t *testing.T) {
	t.Parallel()
	c := consecutiveConfig(1)
	c.HalfOpenTrials = 1
	b := breaker.New(c)
	var transitions []breaker.Transition
	keep := func(tr *breaker.Transition) {
		require.NotNil(t, tr)
		transitions = append(transitions, *tr)
	}
	_, r := send(t, &b, c, epoch, breaker.OutcomeFailure) // closed -> open
	keep(r.Transition)
	now := b.OpenUntil
	d := b.Allow(c, now) // open -> half_open
	keep(d.Transition)
	keep(b.Record(c, now, d.Ticket, breaker.OutcomeFailure, noJitter).Transition) // half_open -> open
	now = b.OpenUntil
	d = b.Allow(c, now)
	keep(d.Transition)
	keep(b.Record(c, now, d.Ticket, breaker.OutcomeSuccess, noJitter).Transition) // half_open -> closed
	tr := b.Isolate(c, now)
	keep(&tr)
	tr = b.Reset(c, now)
	keep(&tr)

	reasons := make([]string, len(transitions))
	for i, tr := range transitions {
		require.Equal(t, int64(i+2), tr.Generation)
		reasons[i] = tr.Reason
	}
	require.Equal(t, []string{
		breaker.ReasonConsecutiveFailures, breaker.ReasonOpenElapsed, breaker.ReasonTrialFailed,
		breaker.ReasonOpenElapsed, breaker.ReasonTrialsSucceeded, breaker.ReasonIsolate, breaker.ReasonReset,
	}, reasons)
	require.Equal(t, int64(8), b.Generation)
}

func TestAdmissionNames(t *testing.T) {
	t.Parallel()
	require.Equal(t, "rejected", breaker.Rejected.String())
	require.Equal(t, "admitted", breaker.Admitted.String())
	require.Equal(t, "trial", breaker.Trial.String())
	require.Equal(t, "admission(5)", breaker.Admission(5).String())
}

// prefilled returns a closed rate breaker that has already recorded prior
// outcomes spread over its window, ending at the returned instant.
func prefilled(b *testing.B, prior int) (breaker.Config, breaker.Breaker, time.Time) {
	b.Helper()
	c := breaker.DefaultConfig()
	br := breaker.New(c)
	now := epoch
	step := c.Window / time.Duration(max(prior, 1))
	ticket := br.Allow(c, now).Ticket
	for range prior {
		now = now.Add(step)
		br.Record(c, now, ticket, breaker.OutcomeSuccess, noJitter)
	}
	return c, br, now
}

var priorCounts = []int{0, 1_000, 1_000_000}

// BenchmarkRecord shows that recording an outcome costs the same whatever
// the number of outcomes already recorded.
func BenchmarkRecord(b *testing.B) {
	for _, prior := range priorCounts {
		b.Run(fmt.Sprintf("prior=%d", prior), func(b *testing.B) {
			c, br, now := prefilled(b, prior)
			ticket := br.Allow(c, now).Ticket
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Millisecond)
				br.Record(c, now, ticket, breaker.OutcomeSuccess, noJitter)
			}
		})
	}
}

// BenchmarkAllow shows that admitting a request costs the same whatever the
// number of outcomes already recorded.
func BenchmarkAllow(b *testing.B) {
	for _, prior := range priorCounts {
		b.Run(fmt.Sprintf("prior=%d", prior), func(b *testing.B) {
			c, br, now := prefilled(b, prior)
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Millisecond)
				br.Allow(c, now)
			}
		})
	}
}
