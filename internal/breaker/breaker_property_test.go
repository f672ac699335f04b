package breaker_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/hookd/hookd/internal/breaker"
)

// validConfig draws a random Config that passes Validate.
func validConfig() *rapid.Generator[breaker.Config] {
	return rapid.Custom(func(t *rapid.T) breaker.Config {
		open := time.Duration(rapid.Int64Range(int64(time.Millisecond), int64(time.Minute)).Draw(t, "open_duration"))
		c := breaker.Config{
			Trip:                 rapid.SampledFrom([]breaker.Trip{breaker.TripRate, breaker.TripConsecutive}).Draw(t, "trip"),
			FailureRateThreshold: rapid.Float64Range(0.01, 1).Draw(t, "failure_rate_threshold"),
			Window:               time.Duration(rapid.Int64Range(int64(breaker.MinWindow), int64(time.Minute)).Draw(t, "window")),
			MinThroughput:        rapid.IntRange(1, 12).Draw(t, "min_throughput"),
			ConsecutiveFailures:  rapid.IntRange(1, 5).Draw(t, "consecutive_failures"),
			OpenDuration:         open,
			OpenJitter:           rapid.Float64Range(0, 1).Draw(t, "open_jitter"),
			OpenBackoff:          rapid.Float64Range(1, 4).Draw(t, "open_backoff"),
			MaxOpenDuration:      open + time.Duration(rapid.Int64Range(0, 10*int64(open)).Draw(t, "max_open_extra")),
			HalfOpenTrials:       rapid.IntRange(1, 4).Draw(t, "half_open_trials"),
			HalfOpenConcurrency:  rapid.IntRange(1, 3).Draw(t, "half_open_concurrency"),
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("drew an invalid config: %v", err)
		}
		return c
	})
}

// machine drives one breaker through random steps and keeps, next to it, the
// facts the invariants are checked against.
type machine struct {
	c   breaker.Config
	b   breaker.Breaker
	now time.Time
	// outstanding holds every ticket handed out and not yet recorded.
	outstanding []breaker.Ticket
	// trialSuccesses counts trial successes recorded in the current
	// half-open period, independently of the breaker.
	trialSuccesses int
}

func (m *machine) rnd(t *rapid.T) func() float64 {
	return func() float64 {
		return float64(rapid.Uint64Range(0, 1<<53-1).Draw(t, "rnd")) / (1 << 53)
	}
}

// changed checks that the generation moved by exactly one with a transition
// and not at all without one.
func (m *machine) changed(t *rapid.T, before breaker.Breaker, tr *breaker.Transition) {
	if tr == nil {
		require.Equal(t, before.Generation, m.b.Generation, "generation moved without a transition")
		require.Equal(t, before.State, m.b.State, "state moved without a transition")
		return
	}
	require.Equal(t, before.Generation+1, m.b.Generation)
	require.Equal(t, m.b.Generation, tr.Generation)
	require.Equal(t, before.State, tr.From)
	require.Equal(t, m.b.State, tr.To)
	require.Equal(t, m.now, tr.At)
	if tr.To == breaker.StateClosed || tr.To == breaker.StateOpen {
		m.trialSuccesses = 0
	}
	if tr.From == breaker.StateHalfOpen && tr.To == breaker.StateClosed && tr.Reason != breaker.ReasonReset {
		// record handles the legitimate close itself.
		t.Fatalf("closed without the trials (reason %s)", tr.Reason)
	}
}

func (m *machine) advance(t *rapid.T) {
	m.now = m.now.Add(time.Duration(rapid.Int64Range(0, int64(m.c.OpenDuration+m.c.Window)).Draw(t, "advance")))
}

func (m *machine) advanceToOpenUntil(t *rapid.T) {
	if m.b.State != breaker.StateOpen || !m.now.Before(m.b.OpenUntil) {
		return
	}
	m.now = m.b.OpenUntil.Add(-time.Duration(rapid.Int64Range(0, 1).Draw(t, "edge")))
}

func (m *machine) allow(t *rapid.T) {
	before := m.b
	early := m.b.State == breaker.StateOpen && m.now.Before(m.b.OpenUntil)
	peeked := m.b.Peek(m.c, m.now)
	require.Equal(t, before, m.b, "Peek changed the breaker")

	d := m.b.Allow(m.c, m.now)
	require.Equal(t, peeked, d, "Peek and Allow disagree")
	if early {
		require.Equal(t, breaker.Rejected, d.Admission, "admitted before OpenUntil")
		require.Equal(t, before.OpenUntil, d.RetryAt)
	}
	if d.Transition != nil {
		require.Equal(t, breaker.ReasonOpenElapsed, d.Transition.Reason)
		m.trialSuccesses = 0
	}
	m.changed(t, before, d.Transition)
	switch d.Admission {
	case breaker.Rejected:
		require.Equal(t, breaker.Ticket{}, d.Ticket)
		require.NotEmpty(t, d.Reason)
	case breaker.Admitted:
		require.Equal(t, breaker.StateClosed, m.b.State)
		require.Equal(t, breaker.Ticket{Generation: m.b.Generation}, d.Ticket)
		m.outstanding = append(m.outstanding, d.Ticket)
	case breaker.Trial:
		require.Equal(t, breaker.StateHalfOpen, m.b.State)
		require.Equal(t, breaker.Ticket{Generation: m.b.Generation, Trial: true}, d.Ticket)
		m.outstanding = append(m.outstanding, d.Ticket)
	}
}

func (m *machine) record(t *rapid.T) {
	if len(m.outstanding) == 0 {
		return
	}
	// Count from the newest: rapid favours small draws, and the newest
	// tickets are the ones still current.
	i := len(m.outstanding) - 1 - rapid.IntRange(0, len(m.outstanding)-1).Draw(t, "ticket")
	ticket := m.outstanding[i]
	m.outstanding = slices.Delete(m.outstanding, i, i+1)
	o := rapid.SampledFrom([]breaker.Outcome{
		breaker.OutcomeFailure, breaker.OutcomeSuccess, breaker.OutcomeFailure,
		breaker.OutcomeSuccess, breaker.OutcomeIgnore, breaker.OutcomeAuthFailure,
	}).Draw(t, "outcome")

	before := m.b
	if ticket.Generation == before.Generation && ticket.Trial && o == breaker.OutcomeSuccess {
		m.trialSuccesses++
		if m.trialSuccesses >= m.c.HalfOpenTrials {
			// The only legitimate way to close from half-open.
			r := m.b.Record(m.c, m.now, ticket, o, m.rnd(t))
			require.NotNil(t, r.Transition)
			require.Equal(t, breaker.ReasonTrialsSucceeded, r.Transition.Reason)
			require.Equal(t, breaker.StateClosed, m.b.State)
			require.Equal(t, before.Generation+1, m.b.Generation)
			m.trialSuccesses = 0
			return
		}
	}
	r := m.b.Record(m.c, m.now, ticket, o, m.rnd(t))
	if ticket.Generation != before.Generation {
		require.Equal(t, breaker.Result{}, r)
		require.Equal(t, before, m.b, "a stale outcome changed the breaker")
		return
	}
	m.changed(t, before, r.Transition)
}

func (m *machine) reset(t *rapid.T) {
	before := m.b
	tr := m.b.Reset(m.c, m.now)
	require.Equal(t, breaker.ReasonReset, tr.Reason)
	m.changed(t, before, &tr)
}

func (m *machine) isolate(t *rapid.T) {
	before := m.b
	tr := m.b.Isolate(m.c, m.now)
	require.Equal(t, breaker.ReasonIsolate, tr.Reason)
	m.changed(t, before, &tr)
}

func (m *machine) check(t *rapid.T) {
	b := m.b
	require.GreaterOrEqual(t, b.TrialsInFlight, 0)
	require.LessOrEqual(t, b.TrialsInFlight, m.c.HalfOpenConcurrency)
	trials := 0
	for _, ticket := range m.outstanding {
		if ticket.Trial && ticket.Generation == b.Generation {
			trials++
		}
	}
	require.LessOrEqual(t, trials, m.c.HalfOpenConcurrency, "outstanding trials")
	require.Equal(t, trials, b.TrialsInFlight, "TrialsInFlight matches the outstanding trials")
	require.Less(t, b.TrialSuccesses, m.c.HalfOpenTrials)

	switch b.State {
	case breaker.StateClosed:
		require.Zero(t, b.OpenStreak)
		require.True(t, b.OpenUntil.IsZero())
	case breaker.StateOpen, breaker.StateHalfOpen:
		require.GreaterOrEqual(t, b.OpenStreak, 1)
		open := b.OpenUntil.Sub(b.OpenedAt)
		require.GreaterOrEqual(t, open, m.c.OpenDuration)
		require.LessOrEqual(t, open, m.c.MaxOpenDuration, "an open never outlasts max_open_duration, jitter included")
	case breaker.StateIsolated:
		require.True(t, b.OpenUntil.IsZero())
	}
	if b.State != breaker.StateHalfOpen {
		require.Zero(t, b.TrialsInFlight)
		require.Zero(t, b.TrialSuccesses)
	}
}

// TestBreakerInvariants drives breakers with random configs through random
// sequences of clock steps (many shorter than a bucket), admissions, outcomes
// of random outstanding requests, resets and the odd isolation, checking the
// invariants after every step. It runs its own step loop rather than
// rapid's Repeat to take a few hundred steps, enough to pass through several
// open and half-open periods.
func TestBreakerInvariants(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		c := validConfig().Draw(t, "config")
		m := &machine{c: c, b: breaker.New(c), now: epoch}
		actions := []struct {
			name string
			run  func(*rapid.T)
		}{
			{"advance", m.advance},
			{"allow", m.allow},
			{"record", m.record},
			{"advanceToOpenUntil", m.advanceToOpenUntil},
			{"allow", m.allow},
			{"record", m.record},
			{"reset", func(t *rapid.T) {
				if rapid.IntRange(0, 3).Draw(t, "reset rarely") == 3 {
					m.reset(t)
				}
			}},
			{"isolate", func(t *rapid.T) {
				if rapid.IntRange(0, 9).Draw(t, "isolate rarely") == 9 {
					m.isolate(t)
				}
			}},
		}
		steps := rapid.IntRange(1, 400).Draw(t, "steps")
		m.check(t)
		for range steps {
			action := rapid.IntRange(0, len(actions)-1).Draw(t, "action")
			actions[action].run(t)
			m.check(t)
		}
	})
}
