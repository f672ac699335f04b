package breaker

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Trip names the condition that opens a closed breaker.
type Trip string

const (
	// TripRate opens the breaker when the failure rate in the rolling window
	// reaches the threshold, once the window holds at least min_throughput
	// observations.
	TripRate Trip = "rate"
	// TripConsecutive opens the breaker after consecutive_failures failures in
	// a row with no success between them.
	TripConsecutive Trip = "consecutive"
)

// BucketsPerWindow is the number of buckets a rate window is divided into.
const BucketsPerWindow = 20

// MinWindow is the shortest rolling window a Config may ask for.
const MinWindow = 100 * time.Millisecond

// Config is one breaker's tuning. The contract name of each field (used by
// traffic classes, the replay tool and FieldError) is given in its comment.
type Config struct {
	// Trip is the trip condition (trip): TripRate or TripConsecutive.
	Trip Trip
	// FailureRateThreshold is the failure fraction that trips a rate breaker
	// (failure_rate_threshold), in (0, 1].
	FailureRateThreshold float64
	// Window is the length of the rolling window (window), at least MinWindow.
	Window time.Duration
	// MinThroughput is the number of observations the window must hold before
	// its failure rate can trip the breaker (min_throughput), at least 1.
	MinThroughput int
	// ConsecutiveFailures is the run of failures that trips a consecutive
	// breaker (consecutive_failures), at least 1.
	ConsecutiveFailures int
	// OpenDuration is how long the breaker stays open before a trial
	// (open_duration), positive.
	OpenDuration time.Duration
	// OpenJitter is the largest fraction of the open duration added at random
	// (open_jitter), in [0, 1].
	OpenJitter float64
	// OpenBackoff multiplies the open duration for each repeated open without
	// a full recovery (open_backoff), at least 1; 1 turns backoff off.
	OpenBackoff float64
	// MaxOpenDuration caps the backed-off, jittered open duration
	// (max_open_duration), at least OpenDuration.
	MaxOpenDuration time.Duration
	// HalfOpenTrials is the number of consecutive trial successes that close a
	// half-open breaker (half_open_trials), at least 1.
	HalfOpenTrials int
	// HalfOpenConcurrency is the number of trials admitted at once
	// (half_open_concurrency), at least 1.
	HalfOpenConcurrency int
}

// DefaultConfig returns the starting values recommended for a busy webhook
// endpoint: a 50% failure rate over 30s with at least 20 observations, open
// for 30s plus up to 30% jitter, and three serialized trials to close.
func DefaultConfig() Config {
	return Config{
		Trip:                 TripRate,
		FailureRateThreshold: 0.5,
		Window:               30 * time.Second,
		MinThroughput:        20,
		ConsecutiveFailures:  5,
		OpenDuration:         30 * time.Second,
		OpenJitter:           0.3,
		OpenBackoff:          1,
		MaxOpenDuration:      10 * time.Minute,
		HalfOpenTrials:       3,
		HalfOpenConcurrency:  1,
	}
}

// Validate reports every field of c that is out of range as FieldErrors, or
// nil when c is usable.
func (c Config) Validate() error {
	var errs FieldErrors
	bad := func(field, message string) {
		errs = append(errs, FieldError{Field: field, Message: message})
	}
	if c.Trip != TripRate && c.Trip != TripConsecutive {
		bad("trip", fmt.Sprintf("must be %q or %q", TripRate, TripConsecutive))
	}
	if !(c.FailureRateThreshold > 0 && c.FailureRateThreshold <= 1) {
		bad("failure_rate_threshold", "must be in (0, 1]")
	}
	switch {
	case c.Window <= 0:
		bad("window", "must be positive")
	case c.Window < MinWindow:
		bad("window", "must be at least "+MinWindow.String())
	}
	if c.MinThroughput < 1 {
		bad("min_throughput", "must be at least 1")
	}
	if c.ConsecutiveFailures < 1 {
		bad("consecutive_failures", "must be at least 1")
	}
	if c.OpenDuration <= 0 {
		bad("open_duration", "must be positive")
	}
	if !(c.OpenJitter >= 0 && c.OpenJitter <= 1) {
		bad("open_jitter", "must be in [0, 1]")
	}
	if !(c.OpenBackoff >= 1) || math.IsInf(c.OpenBackoff, 1) {
		bad("open_backoff", "must be a finite number of at least 1")
	}
	if c.MaxOpenDuration < c.OpenDuration || c.MaxOpenDuration <= 0 {
		bad("max_open_duration", "must be at least open_duration")
	}
	if c.HalfOpenTrials < 1 {
		bad("half_open_trials", "must be at least 1")
	}
	if c.HalfOpenConcurrency < 1 {
		bad("half_open_concurrency", "must be at least 1")
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// OpenDurationFor returns how long an open lasts when it is the streak-th open
// since the breaker last closed: OpenDuration * OpenBackoff^(streak-1), plus
// rnd()*OpenJitter of that, capped at MaxOpenDuration (jitter included, so
// no open lasts longer than the cap). rnd returns a uniform value in [0, 1);
// a nil rnd adds no jitter, and a streak below 1 counts as 1.
func OpenDurationFor(c Config, streak int, rnd func() float64) time.Duration {
	base := c.OpenDuration
	if streak > 1 && c.OpenBackoff > 1 {
		grown := float64(c.OpenDuration) * math.Pow(c.OpenBackoff, float64(streak-1))
		if grown >= float64(c.MaxOpenDuration) || math.IsNaN(grown) {
			base = c.MaxOpenDuration
		} else {
			base = time.Duration(grown)
		}
	}
	base = min(base, c.MaxOpenDuration)
	if rnd == nil || !(c.OpenJitter > 0) {
		return base
	}
	r := rnd()
	switch {
	case !(r > 0):
		r = 0
	case r > 1:
		r = 1
	}
	extra := time.Duration(float64(base) * c.OpenJitter * r)
	if extra > c.MaxOpenDuration-base {
		return c.MaxOpenDuration
	}
	return base + extra
}

// FieldError is one out-of-range Config field, named by its contract name.
type FieldError struct {
	// Field is the contract name of the field, such as "min_throughput".
	Field string
	// Message says what the field must be, such as "must be at least 1".
	Message string
}

// Error returns "field: message".
func (e FieldError) Error() string {
	return e.Field + ": " + e.Message
}

// FieldErrors is every out-of-range field of one Config, in field order.
type FieldErrors []FieldError

// Error joins the field errors with "; ".
func (errs FieldErrors) Error() string {
	parts := make([]string, len(errs))
	for i, e := range errs {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}
