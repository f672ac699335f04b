// Package breaker owns the circuit-breaker state machine of one endpoint: its
// configuration, the time-bucketed rolling window of outcomes, and the pure
// transitions (state, outcome, time, random source) -> state shared by the
// live dispatcher and the offline replay tool. It does no I/O, reads no clock
// and draws no global randomness: every instant and random value is passed in,
// so the same inputs always give the same breaker.
package breaker

import "time"

// Breaker is the whole state of one endpoint's circuit breaker. It is a plain
// value: the dispatcher persists its fields and the replay tool keeps it in
// memory, and both move it with the same methods.
type Breaker struct {
	// State is the stored state. An open breaker whose OpenUntil has passed is
	// still stored as StateOpen until a trial is admitted; EffectiveState
	// reports it as half-open.
	State State
	// Generation identifies the current state period. It is bumped on every
	// state change, and outcomes admitted under an older generation are
	// dropped.
	Generation int64
	// OpenedAt is when the current open, half-open or isolated period began
	// with an open or an isolation; it is zero while closed.
	OpenedAt time.Time
	// OpenUntil is, while open, the first instant a trial may be admitted;
	// it is zero while closed or isolated.
	OpenUntil time.Time
	// TrialsInFlight is the number of half-open trials admitted whose
	// outcome has not been recorded.
	TrialsInFlight int
	// TrialSuccesses is the number of consecutive trial successes in the
	// current half-open period.
	TrialSuccesses int
	// OpenStreak is the number of opens since the breaker last closed; it
	// drives open_backoff.
	OpenStreak int
	// Trips is the lifetime number of transitions to open.
	Trips int64
	// Consecutive is the run of consecutive failures in the current closed
	// generation; it is zero in every other state.
	Consecutive int
	// Window holds the outcomes of the current closed generation. It is
	// replaced with an empty window whenever the breaker closes.
	Window Window
}

// New returns a closed breaker of generation 1 with an empty window.
func New(c Config) Breaker {
	return Breaker{State: StateClosed, Generation: 1, Window: NewWindow(c)}
}

// EffectiveState returns the state b is in at now: StateHalfOpen for an open
// breaker whose OpenUntil has passed, since half-open is derived from the
// clock rather than set by a timer, and the stored State otherwise.
func (b Breaker) EffectiveState(now time.Time) State {
	if b.State == StateOpen && !now.Before(b.OpenUntil) {
		return StateHalfOpen
	}
	return b.State
}

// Peek returns the Decision Allow would return at now, including any
// transition it would make, without changing b. A Trial admission from Peek
// means a trial may be admitted now.
func (b Breaker) Peek(c Config, now time.Time) Decision {
	return b.Allow(c, now)
}

// Allow decides whether one request may be sent at now. A closed breaker
// admits it under the current generation. An open breaker rejects it until
// OpenUntil; from then on the first request moves the breaker to half-open
// and is admitted as a trial. A half-open breaker admits trials while fewer
// than HalfOpenConcurrency are in flight. An isolated breaker rejects
// everything.
func (b *Breaker) Allow(c Config, now time.Time) Decision {
	var moved *Transition
	switch b.State {
	case StateClosed:
		return Decision{Admission: Admitted, Ticket: Ticket{Generation: b.Generation}}
	case StateOpen:
		if now.Before(b.OpenUntil) {
			return Decision{Admission: Rejected, Reason: ReasonOpen, RetryAt: b.OpenUntil}
		}
		moved = b.move(now, StateHalfOpen, ReasonOpenElapsed)
	case StateHalfOpen:
	default:
		return Decision{Admission: Rejected, Reason: ReasonIsolated}
	}
	if b.TrialsInFlight >= c.HalfOpenConcurrency {
		return Decision{Admission: Rejected, Reason: ReasonHalfOpenBusy, Transition: moved}
	}
	b.TrialsInFlight++
	return Decision{
		Admission:  Trial,
		Ticket:     Ticket{Generation: b.Generation, Trial: true},
		Transition: moved,
	}
}

// Record applies the outcome o, observed at now, of a request admitted with
// ticket t. rnd returns a uniform value in [0, 1) and draws the jitter of any
// open it causes; a nil rnd adds no jitter.
//
// A ticket of another generation is stale and changes nothing. While closed,
// a success or failure goes into the window and the consecutive count and the
// breaker is evaluated; ignore and auth_failure change nothing. For a
// half-open trial, a success counts towards HalfOpenTrials and closes the
// breaker with a fresh window once there are enough; a failure re-opens it at
// once; ignore and auth_failure only give back the trial slot.
func (b *Breaker) Record(c Config, now time.Time, t Ticket, o Outcome, rnd func() float64) Result {
	if t.Generation != b.Generation {
		return Result{}
	}
	switch {
	case b.State == StateClosed && !t.Trial:
		switch o {
		case OutcomeSuccess:
			b.Window.Add(now, 1, 0)
			b.Consecutive = 0
		case OutcomeFailure:
			b.Window.Add(now, 0, 1)
			b.Consecutive++
		default:
			return Result{}
		}
		return b.Evaluate(c, now, rnd)
	case b.State == StateHalfOpen && t.Trial:
		b.TrialsInFlight = max(b.TrialsInFlight-1, 0)
		switch o {
		case OutcomeSuccess:
			b.TrialSuccesses++
			if b.TrialSuccesses < c.HalfOpenTrials {
				return Result{Applied: true}
			}
			return Result{Applied: true, Transition: b.close(c, now, ReasonTrialsSucceeded)}
		case OutcomeFailure:
			return Result{Applied: true, Transition: b.open(c, now, ReasonTrialFailed, rnd)}
		default:
			return Result{Applied: true}
		}
	default:
		// Open and isolated breakers hand out no tickets of their own
		// generation, and a ticket's Trial flag always matches its state.
		return Result{}
	}
}

// Evaluate checks the evidence of a closed breaker at now and opens it if
// warranted; rnd draws the open jitter. Record calls it after every counted
// outcome, and the Postgres store calls it after loading the shared buckets
// into Window and the shared count into Consecutive. It does nothing to a
// breaker that is not closed.
//
// A rate breaker first applies the min_throughput guard: with fewer
// observations it never trips, and reports Suppressed if the failure rate has
// reached the threshold anyway. With enough observations it trips once the
// failure rate reaches FailureRateThreshold. A consecutive breaker trips once
// Consecutive reaches ConsecutiveFailures.
func (b *Breaker) Evaluate(c Config, now time.Time, rnd func() float64) Result {
	if b.State != StateClosed {
		return Result{}
	}
	switch c.Trip {
	case TripRate:
		observations, failures := b.Window.Counts(now)
		rate := failureRate(observations, failures)
		if observations < c.MinThroughput {
			if observations > 0 && rate >= c.FailureRateThreshold {
				return Result{Applied: true, Suppressed: &Suppression{
					Observations: observations,
					Failures:     failures,
					FailureRate:  rate,
				}}
			}
			return Result{Applied: true}
		}
		if rate >= c.FailureRateThreshold {
			return Result{Applied: true, Transition: b.open(c, now, ReasonFailureRate, rnd)}
		}
	case TripConsecutive:
		if b.Consecutive >= c.ConsecutiveFailures {
			return Result{Applied: true, Transition: b.open(c, now, ReasonConsecutiveFailures, rnd)}
		}
	}
	return Result{Applied: true}
}

// Reset closes b at now on an operator's request, from any state, with an
// empty window and no open streak.
func (b *Breaker) Reset(c Config, now time.Time) Transition {
	return *b.close(c, now, ReasonReset)
}

// Isolate holds b open at now on an operator's request, from any state: it
// rejects every request and admits no trials until Reset.
func (b *Breaker) Isolate(c Config, now time.Time) Transition {
	t := b.move(now, StateIsolated, ReasonIsolate)
	b.OpenedAt = now
	b.OpenUntil = time.Time{}
	return *t
}

// open moves b to StateOpen at now for the jittered, backed-off open
// duration of its new streak.
func (b *Breaker) open(c Config, now time.Time, reason string, rnd func() float64) *Transition {
	t := b.move(now, StateOpen, reason)
	b.OpenStreak++
	b.Trips++
	b.OpenedAt = now
	b.OpenUntil = now.Add(OpenDurationFor(c, b.OpenStreak, rnd))
	t.OpenUntil = b.OpenUntil
	return t
}

// close moves b to StateClosed at now with a new, empty window.
func (b *Breaker) close(c Config, now time.Time, reason string) *Transition {
	t := b.move(now, StateClosed, reason)
	b.Window = NewWindow(c)
	b.OpenStreak = 0
	b.OpenedAt = time.Time{}
	b.OpenUntil = time.Time{}
	return t
}

// move changes b's state to to, bumps its generation and starts the new
// state's counts afresh, returning the transition with the window figures at
// now.
func (b *Breaker) move(now time.Time, to State, reason string) *Transition {
	observations, failures := b.Window.Counts(now)
	t := &Transition{
		From:         b.State,
		To:           to,
		At:           now,
		FailureRate:  failureRate(observations, failures),
		Observations: observations,
		Failures:     failures,
		Consecutive:  b.Consecutive,
		Reason:       reason,
	}
	b.State = to
	b.Generation++
	b.TrialsInFlight = 0
	b.TrialSuccesses = 0
	b.Consecutive = 0
	t.Generation = b.Generation
	return t
}

func failureRate(observations, failures int) float64 {
	if observations == 0 {
		return 0
	}
	return float64(failures) / float64(observations)
}
