package breaker

import "time"

// Reasons for a transition, in Transition.Reason.
const (
	// ReasonFailureRate opens a rate breaker whose window failure rate
	// reached the threshold.
	ReasonFailureRate = "failure_rate"
	// ReasonConsecutiveFailures opens a consecutive breaker after
	// consecutive_failures failures in a row.
	ReasonConsecutiveFailures = "consecutive_failures"
	// ReasonTrialFailed re-opens a half-open breaker whose trial failed.
	ReasonTrialFailed = "trial_failed"
	// ReasonTrialsSucceeded closes a half-open breaker after half_open_trials
	// consecutive trial successes.
	ReasonTrialsSucceeded = "trials_succeeded"
	// ReasonOpenElapsed moves an open breaker to half-open when its open
	// duration has elapsed and a trial is admitted.
	ReasonOpenElapsed = "open_elapsed"
	// ReasonReset closes a breaker on an operator's request.
	ReasonReset = "reset"
	// ReasonIsolate holds a breaker open on an operator's request.
	ReasonIsolate = "isolate"
)

// Transition is one state change of a breaker, with the evidence at that
// moment, for the transition log and its diagnostics.
type Transition struct {
	// From is the stored state before the transition.
	From State
	// To is the state after the transition.
	To State
	// At is the instant of the transition.
	At time.Time
	// Generation is the breaker generation after the transition.
	Generation int64
	// FailureRate is Failures / Observations, or 0 with no observations.
	FailureRate float64
	// Observations is the number of outcomes in the window at At.
	Observations int
	// Failures is the number of failures in the window at At.
	Failures int
	// Consecutive is the run of consecutive failures just before the
	// transition.
	Consecutive int
	// OpenUntil is, when To is StateOpen, the first instant a trial may be
	// admitted; it is zero otherwise.
	OpenUntil time.Time
	// Reason says why the breaker moved, such as ReasonFailureRate.
	Reason string
}

// Suppression reports a rate breaker whose failure rate reached the threshold
// but that did not trip because the window held fewer than min_throughput
// observations.
type Suppression struct {
	// Observations is the number of outcomes in the window.
	Observations int
	// Failures is the number of failures in the window.
	Failures int
	// FailureRate is Failures / Observations.
	FailureRate float64
}

// Result is what Record, Evaluate or ApplyRun did to a breaker.
type Result struct {
	// Applied reports whether the input was taken into account. It is false
	// for a stale ticket or generation, for an outcome the breaker never
	// counts in its current state (ignore or auth_failure while closed), and
	// for a breaker not in the state the input belongs to.
	Applied bool
	// Transition is the state change made, or nil.
	Transition *Transition
	// Suppressed is set when the min_throughput guard held back a trip.
	Suppressed *Suppression
}
