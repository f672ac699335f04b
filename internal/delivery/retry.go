package delivery

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Limits on retry schedules.
const (
	// MaxStep is the longest delay a schedule step may have, and the cap on a
	// delay asked for by Retry-After.
	MaxStep = 24 * time.Hour
	// MaxScheduleLen is the most attempts a schedule may have.
	MaxScheduleLen = 50
)

// Schedule is a retry schedule: Schedule[i] is the delay before attempt i+1,
// so Schedule[0] is the first attempt's delay (normally 0) and len(Schedule)
// is the total number of attempts.
type Schedule []time.Duration

// DefaultSchedule is eight attempts over about 28 hours, after the Standard
// Webhooks recommendation.
var DefaultSchedule = Schedule{
	0,
	5 * time.Second,
	5 * time.Minute,
	30 * time.Minute,
	2 * time.Hour,
	5 * time.Hour,
	10 * time.Hour,
	10 * time.Hour,
}

// ParseSchedule parses a comma-separated list of Go durations, such as
// "0s,5s,5m,30m,2h,5h,10h,10h" (spaces around entries are allowed). It rejects
// an empty schedule, more than MaxScheduleLen entries, and any entry that is
// empty, unparsable, negative or longer than MaxStep, naming its 1-based
// position.
func ParseSchedule(s string) (Schedule, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("parse schedule: empty")
	}
	if n := strings.Count(s, ",") + 1; n > MaxScheduleLen {
		return nil, fmt.Errorf("parse schedule: %d entries, at most %d allowed", n, MaxScheduleLen)
	}
	var sched Schedule
	for i, entry := range strings.Split(s, ",") {
		if strings.TrimSpace(entry) == "" {
			return nil, fmt.Errorf("parse schedule: entry %d is empty", i+1)
		}
		d, err := ParseStep(entry)
		if err != nil {
			return nil, fmt.Errorf("parse schedule: entry %d: %w", i+1, err)
		}
		sched = append(sched, d)
	}
	return sched, nil
}

// ParseStep parses one entry of a schedule: a Go duration from 0 to
// MaxStep (spaces around it are allowed).
func ParseStep(entry string) (time.Duration, error) {
	entry = strings.TrimSpace(entry)
	if entry == "" {
		return 0, errors.New("empty")
	}
	d, err := time.ParseDuration(entry)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, fmt.Errorf("negative delay %s", entry)
	}
	if d > MaxStep {
		return 0, fmt.Errorf("%s is longer than the %s maximum", entry, formatStep(MaxStep))
	}
	return d, nil
}

// String formats s in the form ParseSchedule reads, with zero units trimmed:
// "0s,5s,5m,30m,2h,5h,10h,10h".
func (s Schedule) String() string {
	var b strings.Builder
	for i, d := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(formatStep(d))
	}
	return b.String()
}

// formatStep formats d like time.Duration.String without trailing zero
// units: 5m instead of 5m0s, 2h instead of 2h0m0s.
func formatStep(d time.Duration) string {
	out := d.String()
	if strings.HasSuffix(out, "m0s") {
		out = out[:len(out)-2]
	}
	if strings.HasSuffix(out, "h0m") {
		out = out[:len(out)-2]
	}
	return out
}

// Step returns the un-jittered delay before attempt attempts+1, after
// attempts attempts have been made (so Step(0) is the first attempt's delay).
// It returns 0 when attempts is negative or the schedule is exhausted.
func (s Schedule) Step(attempts int) time.Duration {
	if attempts < 0 || attempts >= len(s) {
		return 0
	}
	return s[attempts]
}

// NextDelay returns the delay before the next attempt once attempts attempts
// have been made, with full jitter: uniform in [0, step], where rnd returns a
// value in [0, 1) (values outside are clamped). rnd must not be nil. It
// returns ok=false when the schedule is exhausted (attempts >= len(s)) or
// attempts is negative.
func (s Schedule) NextDelay(attempts int, rnd func() float64) (d time.Duration, ok bool) {
	if attempts < 0 || attempts >= len(s) {
		return 0, false
	}
	step := s[attempts]
	f := rnd()
	switch {
	case !(f > 0): // also catches NaN
		return 0, true
	case f >= 1:
		return step, true
	}
	return time.Duration(math.Round(f * float64(step))), true
}

// ParseRetryAfter parses a Retry-After header value, either delta-seconds or
// an HTTP-date (taken relative to now). It returns ok=false when h is empty,
// invalid, negative or a date in the past. Very large delta-seconds saturate
// rather than overflow; callers clamp the result anyway.
func ParseRetryAfter(h string, now time.Time) (time.Duration, bool) {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0, false
	}
	if isDigits(h) {
		secs, err := strconv.ParseInt(h, 10, 64)
		if err != nil || secs > int64(math.MaxInt64/time.Second) {
			return math.MaxInt64, true // only a range error gets here: all digits
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(h)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	if d < 0 {
		return 0, false
	}
	return d, true
}

// isDigits reports whether s is a non-empty run of ASCII digits.
func isDigits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// RetryDelay decides the delay before the next attempt once attempts attempts
// have been made and the last one was answered with status (0 for a transport
// error) and the given Retry-After header value. It returns ok=false when the
// schedule is exhausted or the status is 410 Gone (the endpoint asked to stop).
// For 429 and 503 with a valid Retry-After the delay is that value clamped to
// [Step(attempts), MaxStep], without jitter: Retry-After can lengthen a step,
// never shorten it. Otherwise it is NextDelay.
func (s Schedule) RetryDelay(attempts, status int, retryAfter string, now time.Time, rnd func() float64) (time.Duration, bool) {
	if status == http.StatusGone || attempts < 0 || attempts >= len(s) {
		return 0, false
	}
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		if ra, ok := ParseRetryAfter(retryAfter, now); ok {
			return max(min(ra, MaxStep), s.Step(attempts)), true
		}
	}
	return s.NextDelay(attempts, rnd)
}
