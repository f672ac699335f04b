// Package trafficclass owns traffic classes: the named, stored breaker configs
// that endpoints are bucketed into by measured traffic volume, together with
// each class's 401/403 auto-disable rule and its enforce (shadow mode) flag.
// It holds the four built-in classes and the rules they are derived with
// (min_throughput is half a window's requests, floored; the window comes
// from the time a full outage takes to open it), the
// strict JSON form of a class, and the pure statistics that turn an endpoint's
// measured traffic into a class. It does no I/O and reads no clock: storage,
// the API and the reclassification job are built on its types elsewhere.
package trafficclass

import (
	"errors"
	"math"
	"regexp"
	"slices"
	"time"

	"github.com/hookd/hookd/internal/breaker"
)

// Names of the built-in classes, and the reserved name Auto.
const (
	// High is the class for quiet-time volume of at least 20 requests/s.
	High = "high"
	// Medium is the class for quiet-time volume from 1 up to 20 requests/s.
	Medium = "medium"
	// Low is the class for quiet-time volume from 1 request/min up to
	// 1 request/s.
	Low = "low"
	// Trickle is the class for quiet-time volume below 1 request/min, where
	// the breaker cannot gather evidence and stays closed.
	Trickle = "trickle"
	// Auto is the reserved class name an endpoint carries when its class is
	// chosen from its measured traffic by Classify. No class may be named
	// Auto.
	Auto = "auto"
	// DefaultClass is the class of an endpoint with too little history to
	// classify, such as a brand-new one. Trickle is the only built-in that
	// neither trips on a new endpoint's sparse, often failing, test traffic
	// (it needs 20 counted outcomes inside one minute) nor leaves a busy new
	// endpoint unprotected (20 outcomes a minute, half of them failing, is
	// real evidence, and it opens within about 30 s).
	DefaultClass = Trickle
)

// Defaults for the fields of a Class that are not breaker settings.
const (
	// DefaultAuthDisableAfter is the default number of consecutive 401/403
	// answers that disable an endpoint.
	DefaultAuthDisableAfter = 10
	// DefaultAuthDisableMinDuration is the default shortest time the streak of
	// 401/403 answers must span before the endpoint is disabled.
	DefaultAuthDisableMinDuration = 5 * time.Minute
)

// Class is a traffic class: a named breaker config, the rule that disables an
// endpoint on a streak of 401/403 answers, and whether the breaker is
// enforced. Every endpoint runs under exactly one class.
type Class struct {
	// Name is the class name (name), matching ^[a-z0-9][a-z0-9_-]{0,63}$ and
	// never Auto.
	Name string
	// Breaker is every field of the class's breaker config, under the field
	// names breaker.Config documents.
	Breaker breaker.Config
	// Enforce reports whether the breaker may refuse deliveries (enforce).
	// When false the class runs in shadow mode: the breaker computes and
	// records would-be transitions but never refuses a delivery.
	Enforce bool
	// AuthDisableAfter is the number of consecutive auth failures (401 or
	// 403) after which the endpoint is disabled (auth_disable_after), at
	// least 1.
	AuthDisableAfter int
	// AuthDisableMinDuration is how long the streak of auth failures must
	// also span before the endpoint is disabled (auth_disable_min_duration),
	// at least 0.
	AuthDisableMinDuration time.Duration
	// TenantSelectable reports whether a tenant (a tenant token or a
	// portal session) may put its endpoints in the class
	// (tenant_selectable). A class decides how leniently the breaker and
	// the auth rule treat an endpoint, so only classes an admin marked so
	// are a tenant's to pick; none is by default.
	TenantSelectable bool
	// AutoTune is what automatic tuning may do to the class (auto_tune):
	// AutoTuneOff, AutoTuneRecommend (the default) or AutoTuneApply.
	AutoTune string
	// TuneMinThroughputFloor is the lowest min_throughput automatic tuning
	// may set (tune_min_throughput_floor), at least 1.
	TuneMinThroughputFloor int
	// TuneMinThroughputCeiling is the highest min_throughput automatic
	// tuning may set (tune_min_throughput_ceiling), at least the floor.
	TuneMinThroughputCeiling int
	// TuneFailureRateFloor is the lowest failure_rate_threshold automatic
	// tuning may set (tune_failure_rate_floor), in [0, 1].
	TuneFailureRateFloor float64
	// TuneFailureRateCeiling is the highest failure_rate_threshold
	// automatic tuning may set (tune_failure_rate_ceiling), in [0, 1] and at
	// least the floor.
	TuneFailureRateCeiling float64
	// Builtin reports whether the class is one of the four built-ins
	// (builtin). It is derived from Name: built-ins can be tuned but not
	// deleted, and a class named after one is that built-in.
	Builtin bool
}

// DefaultTuneMinThroughputCeiling is tune_min_throughput_ceiling's default
// and the highest min_throughput automatic tuning ever sets.
const DefaultTuneMinThroughputCeiling = 10000

// What automatic tuning may do to a class (Class.AutoTune).
const (
	// AutoTuneOff runs no periodic pass and never changes the class.
	AutoTuneOff = "off"
	// AutoTuneRecommend proposes configs for an admin to apply.
	AutoTuneRecommend = "recommend"
	// AutoTuneApply tries each proposal in shadow and applies it when the
	// shadow agrees with the replay.
	AutoTuneApply = "apply"
)

// Range is the band of quiet-time volume a built-in class is for, with the
// floor its min_throughput was derived with.
type Range struct {
	// Class is the built-in class name.
	Class string
	// MinRPS is the lowest quiet-time volume in the band, in requests/s,
	// inclusive.
	MinRPS float64
	// MaxRPS is the upper end of the band, in requests/s, exclusive; +Inf
	// for the busiest class.
	MaxRPS float64
	// Floor is the floor of the min_throughput rule for the class: the
	// fewest observations whose failure rate it treats as meaningful.
	Floor int
}

// perMinute is one request a minute, in requests/s.
const perMinute = 1.0 / 60

// ranges lists the built-in bands from the busiest down. They cover [0, +Inf)
// with no gaps or overlaps.
var ranges = []Range{
	{Class: High, MinRPS: 20, MaxRPS: math.Inf(1), Floor: 20},
	{Class: Medium, MinRPS: 1, MaxRPS: 20, Floor: 20},
	{Class: Low, MinRPS: perMinute, MaxRPS: 1, Floor: 10},
	{Class: Trickle, MinRPS: 0, MaxRPS: perMinute, Floor: 20},
}

// Ranges returns the quiet-time volume band of every built-in class, busiest
// first. Together they cover [0, +Inf) requests/s with no gaps or overlaps.
func Ranges() []Range {
	return slices.Clone(ranges)
}

// RangeFor returns the band that holds a quiet-time volume of rps requests/s.
// It reports false for a negative or NaN rps.
func RangeFor(rps float64) (Range, bool) {
	for _, r := range ranges {
		if rps >= r.MinRPS && (rps < r.MaxRPS || math.IsInf(r.MaxRPS, 1)) {
			return r, true
		}
	}
	return Range{}, false
}

// newBuiltin returns the built-in class name with the given window, threshold
// and open duration; the rest is shared by every built-in. Its min_throughput comes from MinThroughputFor at the bottom of
// the class's band.
func newBuiltin(name string, window time.Duration, threshold float64, open time.Duration) Class {
	r := ranges[slices.IndexFunc(ranges, func(r Range) bool { return r.Class == name })]
	c := breaker.DefaultConfig()
	c.Trip = breaker.TripRate
	c.FailureRateThreshold = threshold
	c.Window = window
	c.MinThroughput = MinThroughputFor(r.MinRPS, window, r.Floor)
	c.OpenDuration = open
	c.OpenBackoff = 2
	c.MaxOpenDuration = 2 * time.Minute
	return Class{
		Name:                     name,
		Breaker:                  c,
		Enforce:                  true,
		AuthDisableAfter:         DefaultAuthDisableAfter,
		AuthDisableMinDuration:   DefaultAuthDisableMinDuration,
		AutoTune:                 AutoTuneRecommend,
		TuneMinThroughputFloor:   1,
		TuneMinThroughputCeiling: DefaultTuneMinThroughputCeiling,
		TuneFailureRateCeiling:   1,
		Builtin:                  true,
	}
}

// Builtins returns fresh copies of the four built-in classes, busiest first:
//
//	high     >= 20 rps         rate >= 50% over 5s,  min 50, open 15s
//	medium   [1, 20) rps       rate >= 50% over 30s, min 20, open 30s
//	low      [1/min, 1) rps    rate >= 60% over 10m, min 10, open 30s
//	trickle  < 1/min           rate >= 50% over 1m,  min 20, open 30s
//
// All of them back off x2 per repeated open up to 2m, add up to 30% jitter,
// close after 3 serialized trial successes, are enforced, and disable an
// endpoint after 10 consecutive 401/403 answers spanning at least 5m.
// docs/traffic-classes.md gives the reasoning behind every number.
func Builtins() []Class {
	return []Class{
		newBuiltin(High, 5*time.Second, 0.5, 15*time.Second),
		newBuiltin(Medium, 30*time.Second, 0.5, 30*time.Second),
		newBuiltin(Low, 10*time.Minute, 0.6, 30*time.Second),
		newBuiltin(Trickle, time.Minute, 0.5, 30*time.Second),
	}
}

// Builtin returns a fresh copy of the built-in class called name.
func Builtin(name string) (Class, bool) {
	for _, c := range Builtins() {
		if c.Name == name {
			return c, true
		}
	}
	return Class{}, false
}

// IsBuiltin reports whether name is the name of a built-in class.
func IsBuiltin(name string) bool {
	return slices.ContainsFunc(ranges, func(r Range) bool { return r.Class == name })
}

// Default returns a custom class called name with every other field at its
// documented default: breaker.DefaultConfig(), enforced, and the default
// auth rule. It is what Decode fills omitted fields from.
func Default(name string) Class {
	return Class{
		Name:                     name,
		Breaker:                  breaker.DefaultConfig(),
		Enforce:                  true,
		AuthDisableAfter:         DefaultAuthDisableAfter,
		AuthDisableMinDuration:   DefaultAuthDisableMinDuration,
		AutoTune:                 AutoTuneRecommend,
		TuneMinThroughputFloor:   1,
		TuneMinThroughputCeiling: DefaultTuneMinThroughputCeiling,
		TuneFailureRateCeiling:   1,
		Builtin:                  IsBuiltin(name),
	}
}

// MinThroughputFor returns the minimum-throughput rule: half the
// requests expected in one window at rps requests/s, never below floor,
//
//	max(floor, ceil(rps * window * 0.5))
//
// A product within 1e-9 (relative) of a whole number counts as that number,
// so float noise in a rate such as 1/60 does not add a request. A NaN,
// negative or zero rps or window gives floor, a floor below 1 counts as 1,
// and the result is capped at math.MaxInt.
func MinThroughputFor(rps float64, window time.Duration, floor int) int {
	floor = max(floor, 1)
	half := rps * window.Seconds() * 0.5
	if !(half > 0) {
		return floor
	}
	if r := math.Round(half); math.Abs(half-r) <= 1e-9*r {
		half = r
	}
	need := math.Ceil(half)
	if need >= math.MaxInt {
		return math.MaxInt
	}
	return max(floor, int(need))
}

// TimeToOpen returns the estimate of how long a rate breaker takes to
// open once an endpoint goes fully down: the failure fraction in the window
// climbs from baseline towards 1 and crosses threshold after
//
//	window * (threshold - baseline) / (1 - baseline)
//
// It assumes the window holds min_throughput observations throughout. A
// threshold at or below baseline gives 0; a baseline of 1 or more gives
// window.
func TimeToOpen(window time.Duration, threshold, baseline float64) time.Duration {
	if !(baseline < 1) {
		return window
	}
	if !(threshold > baseline) {
		return 0
	}
	return time.Duration(float64(window) * (threshold - baseline) / (1 - baseline))
}

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// Validate reports every out-of-range field of c as breaker.FieldErrors, named
// by their JSON names in field order, or returns nil when c is usable: name
// is required, matches ^[a-z0-9][a-z0-9_-]{0,63}$ and is not Auto; every
// breaker field passes breaker.Config.Validate; auth_disable_after is at
// least 1; auth_disable_min_duration is at least 0; auto_tune is off,
// recommend or apply; tune_min_throughput_floor is at least 1 and
// tune_min_throughput_ceiling at least the floor; tune_failure_rate_floor
// and tune_failure_rate_ceiling are in [0, 1], the ceiling at least the
// floor.
func (c Class) Validate() error {
	var errs breaker.FieldErrors
	bad := func(field, message string) {
		errs = append(errs, breaker.FieldError{Field: field, Message: message})
	}
	switch {
	case c.Name == "":
		bad("name", "is required")
	case !namePattern.MatchString(c.Name):
		bad("name", "must match ^[a-z0-9][a-z0-9_-]{0,63}$")
	case c.Name == Auto:
		bad("name", `"auto" is reserved`)
	}
	if err := c.Breaker.Validate(); err != nil {
		var fields breaker.FieldErrors
		if !errors.As(err, &fields) {
			return err
		}
		errs = append(errs, fields...)
	}
	if c.AuthDisableAfter < 1 {
		bad("auth_disable_after", "must be at least 1")
	}
	if c.AuthDisableMinDuration < 0 {
		bad("auth_disable_min_duration", "must not be negative")
	}
	switch c.AutoTune {
	case AutoTuneOff, AutoTuneRecommend, AutoTuneApply:
	default:
		bad("auto_tune", `must be "off", "recommend" or "apply"`)
	}
	if c.TuneMinThroughputFloor < 1 {
		bad("tune_min_throughput_floor", "must be at least 1")
	}
	if c.TuneMinThroughputCeiling < max(c.TuneMinThroughputFloor, 1) {
		bad("tune_min_throughput_ceiling", "must be at least 1 and tune_min_throughput_floor")
	}
	if !(c.TuneFailureRateFloor >= 0 && c.TuneFailureRateFloor <= 1) {
		bad("tune_failure_rate_floor", "must be in [0, 1]")
	}
	switch {
	case !(c.TuneFailureRateCeiling >= 0 && c.TuneFailureRateCeiling <= 1):
		bad("tune_failure_rate_ceiling", "must be in [0, 1]")
	case c.TuneFailureRateFloor <= 1 && c.TuneFailureRateCeiling < c.TuneFailureRateFloor:
		bad("tune_failure_rate_ceiling", "must be at least tune_failure_rate_floor")
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// Noisy reports whether an endpoint whose healthy error rate is
// healthyErrorRate is too noisy for c's breaker: c trips on a failure rate
// and its threshold sits within NoiseFactor of that healthy rate (a
// threshold belongs at least a few times above it, or normal noise trips it). A breaker that
// trips on consecutive failures, or a NaN or non-positive rate, is never
// reported.
func (c Class) Noisy(healthyErrorRate float64) bool {
	return c.Breaker.Trip == breaker.TripRate && healthyErrorRate > 0 &&
		c.Breaker.FailureRateThreshold < NoiseFactor*healthyErrorRate
}

// NoiseFactor is how many times the healthy error rate a failure-rate
// threshold must be for Noisy to stay quiet.
const NoiseFactor = 3
