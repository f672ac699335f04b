package trafficclass

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hookd/hookd/internal/breaker"
)

// wire is the JSON shape of a Class, in field order.
type wire struct {
	Name                     string  `json:"name"`
	Trip                     string  `json:"trip"`
	FailureRateThreshold     float64 `json:"failure_rate_threshold"`
	Window                   string  `json:"window"`
	MinThroughput            int     `json:"min_throughput"`
	ConsecutiveFailures      int     `json:"consecutive_failures"`
	OpenDuration             string  `json:"open_duration"`
	OpenJitter               float64 `json:"open_jitter"`
	OpenBackoff              float64 `json:"open_backoff"`
	MaxOpenDuration          string  `json:"max_open_duration"`
	HalfOpenTrials           int     `json:"half_open_trials"`
	HalfOpenConcurrency      int     `json:"half_open_concurrency"`
	Enforce                  bool    `json:"enforce"`
	AuthDisableAfter         int     `json:"auth_disable_after"`
	AuthDisableMinDuration   string  `json:"auth_disable_min_duration"`
	TenantSelectable         bool    `json:"tenant_selectable"`
	AutoTune                 string  `json:"auto_tune"`
	TuneMinThroughputFloor   int     `json:"tune_min_throughput_floor"`
	TuneMinThroughputCeiling int     `json:"tune_min_throughput_ceiling"`
	TuneFailureRateFloor     float64 `json:"tune_failure_rate_floor"`
	TuneFailureRateCeiling   float64 `json:"tune_failure_rate_ceiling"`
	Builtin                  bool    `json:"builtin"`
}

// MarshalJSON encodes c as one flat object with every field under its JSON
// name, in field order: durations as Go duration strings without trailing
// zero units ("500ms", "30s", "5m", "1h30m"), fractions as numbers. It fails
// only for a NaN or infinite fraction, which Validate rejects.
func (c Class) MarshalJSON() ([]byte, error) {
	b := c.Breaker
	data, err := json.Marshal(wire{
		Name:                     c.Name,
		Trip:                     string(b.Trip),
		FailureRateThreshold:     b.FailureRateThreshold,
		Window:                   FormatDuration(b.Window),
		MinThroughput:            b.MinThroughput,
		ConsecutiveFailures:      b.ConsecutiveFailures,
		OpenDuration:             FormatDuration(b.OpenDuration),
		OpenJitter:               b.OpenJitter,
		OpenBackoff:              b.OpenBackoff,
		MaxOpenDuration:          FormatDuration(b.MaxOpenDuration),
		HalfOpenTrials:           b.HalfOpenTrials,
		HalfOpenConcurrency:      b.HalfOpenConcurrency,
		Enforce:                  c.Enforce,
		AuthDisableAfter:         c.AuthDisableAfter,
		AuthDisableMinDuration:   FormatDuration(c.AuthDisableMinDuration),
		TenantSelectable:         c.TenantSelectable,
		AutoTune:                 c.AutoTune,
		TuneMinThroughputFloor:   c.TuneMinThroughputFloor,
		TuneMinThroughputCeiling: c.TuneMinThroughputCeiling,
		TuneFailureRateFloor:     c.TuneFailureRateFloor,
		TuneFailureRateCeiling:   c.TuneFailureRateCeiling,
		Builtin:                  c.Builtin,
	})
	if err != nil {
		return nil, fmt.Errorf("encode traffic class %q: %w", c.Name, err)
	}
	return data, nil
}

// FormatDuration formats d as time.Duration.String does but without trailing
// zero units: "5m" rather than "5m0s", "2h" rather than "2h0m0s". The result
// parses back to d with time.ParseDuration.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// field decodes one JSON member into a Class, returning a FieldError message
// when the value has the wrong type or cannot be parsed.
type field struct {
	name   string
	decode func(raw json.RawMessage, c *Class) (message string)
}

// fields lists every JSON member of a Class in field order.
var fields = []field{
	{"name", str(func(c *Class, v string) { c.Name = v })},
	{"trip", str(func(c *Class, v string) { c.Breaker.Trip = breaker.Trip(v) })},
	{"failure_rate_threshold", num(func(c *Class, v float64) { c.Breaker.FailureRateThreshold = v })},
	{"window", dur(func(c *Class, v time.Duration) { c.Breaker.Window = v })},
	{"min_throughput", integer(func(c *Class, v int) { c.Breaker.MinThroughput = v })},
	{"consecutive_failures", integer(func(c *Class, v int) { c.Breaker.ConsecutiveFailures = v })},
	{"open_duration", dur(func(c *Class, v time.Duration) { c.Breaker.OpenDuration = v })},
	{"open_jitter", num(func(c *Class, v float64) { c.Breaker.OpenJitter = v })},
	{"open_backoff", num(func(c *Class, v float64) { c.Breaker.OpenBackoff = v })},
	{"max_open_duration", dur(func(c *Class, v time.Duration) { c.Breaker.MaxOpenDuration = v })},
	{"half_open_trials", integer(func(c *Class, v int) { c.Breaker.HalfOpenTrials = v })},
	{"half_open_concurrency", integer(func(c *Class, v int) { c.Breaker.HalfOpenConcurrency = v })},
	{"enforce", boolean(func(c *Class, v bool) { c.Enforce = v })},
	{"auth_disable_after", integer(func(c *Class, v int) { c.AuthDisableAfter = v })},
	{"auth_disable_min_duration", dur(func(c *Class, v time.Duration) { c.AuthDisableMinDuration = v })},
	{"tenant_selectable", boolean(func(c *Class, v bool) { c.TenantSelectable = v })},
	{"auto_tune", str(func(c *Class, v string) { c.AutoTune = v })},
	{"tune_min_throughput_floor", integer(func(c *Class, v int) { c.TuneMinThroughputFloor = v })},
	{"tune_min_throughput_ceiling", integer(func(c *Class, v int) { c.TuneMinThroughputCeiling = v })},
	{"tune_failure_rate_floor", num(func(c *Class, v float64) { c.TuneFailureRateFloor = v })},
	{"tune_failure_rate_ceiling", num(func(c *Class, v float64) { c.TuneFailureRateCeiling = v })},
}

// ignored is the output-only member Decode accepts and ignores: Builtin
// follows from the name.
const ignored = "builtin"

// Decode decodes and validates one class from its JSON object, the body of a
// create or a PUT. A PUT replaces the whole class: every omitted member takes
// its documented default, never the stored value (breaker.DefaultConfig()
// for the breaker fields, enforce true, auth_disable_after 10,
// auth_disable_min_duration "5m", tenant_selectable false, auto_tune
// "recommend", tune_min_throughput_floor 1, tune_min_throughput_ceiling
// 10000, tune_failure_rate_floor 0, tune_failure_rate_ceiling 1);
// name has no default and is required.
// Durations are Go duration strings ("500ms", "30s", "5m"); numbers and null
// are not accepted for them. The builtin member is ignored whatever its
// value: Builtin is derived from the name, so tuning a built-in means
// sending a class named after it.
//
// Every problem with a member comes back at once as breaker.FieldErrors,
// wrapped, named by the member and in field order: an unknown member (names
// are case-sensitive), a null, a value of the wrong type, a bad duration
// string, and each field Validate rejects. Anything that is not one JSON
// object is a plain error.
func Decode(data []byte) (Class, error) {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return Class{}, errors.New("decode traffic class: must be a JSON object")
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		return Class{}, fmt.Errorf("decode traffic class: %w", err)
	}

	delete(members, ignored)
	c := Default("")
	var errs breaker.FieldErrors
	failed := make(map[string]bool)
	for _, f := range fields {
		raw, ok := members[f.name]
		if !ok {
			continue
		}
		delete(members, f.name)
		message := "must not be null"
		if string(raw) != "null" {
			message = f.decode(raw, &c)
		}
		if message != "" {
			errs = append(errs, breaker.FieldError{Field: f.name, Message: message})
			failed[f.name] = true
		}
	}
	c.Builtin = IsBuiltin(c.Name)

	var invalid breaker.FieldErrors
	if err := c.Validate(); err != nil && !errors.As(err, &invalid) {
		return Class{}, fmt.Errorf("decode traffic class: %w", err)
	}
	for _, e := range invalid {
		if !failed[e.Field] {
			errs = append(errs, e)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(members)) {
		errs = append(errs, breaker.FieldError{Field: name, Message: "unknown field"})
	}
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b breaker.FieldError) int {
			return fieldIndex(a.Field) - fieldIndex(b.Field)
		})
		return Class{}, fmt.Errorf("decode traffic class: %w", errs)
	}
	return c, nil
}

// UnmarshalJSON decodes data into c with Decode's rules: defaults for omitted
// members, every problem reported as field errors, and validation.
func (c *Class) UnmarshalJSON(data []byte) error {
	decoded, err := Decode(data)
	if err != nil {
		return err
	}
	*c = decoded
	return nil
}

// fieldIndex returns the position of a JSON member in field order; unknown
// members sort after every known one, in the order they were added.
func fieldIndex(name string) int {
	if i := slices.IndexFunc(fields, func(f field) bool { return f.name == name }); i >= 0 {
		return i
	}
	return len(fields)
}

func str(set func(*Class, string)) func(json.RawMessage, *Class) string {
	return func(raw json.RawMessage, c *Class) string {
		var v string
		if json.Unmarshal(raw, &v) != nil {
			return "must be a string"
		}
		set(c, v)
		return ""
	}
}

func num(set func(*Class, float64)) func(json.RawMessage, *Class) string {
	return func(raw json.RawMessage, c *Class) string {
		var v float64
		if json.Unmarshal(raw, &v) != nil {
			return "must be a number"
		}
		set(c, v)
		return ""
	}
}

func integer(set func(*Class, int)) func(json.RawMessage, *Class) string {
	return func(raw json.RawMessage, c *Class) string {
		var v int
		if json.Unmarshal(raw, &v) != nil {
			return "must be an integer"
		}
		set(c, v)
		return ""
	}
}

func boolean(set func(*Class, bool)) func(json.RawMessage, *Class) string {
	return func(raw json.RawMessage, c *Class) string {
		var v bool
		if json.Unmarshal(raw, &v) != nil {
			return "must be true or false"
		}
		set(c, v)
		return ""
	}
}

func dur(set func(*Class, time.Duration)) func(json.RawMessage, *Class) string {
	return func(raw json.RawMessage, c *Class) string {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return `must be a duration string such as "30s"`
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Sprintf(`must be a duration string such as "30s", not %q`, s)
		}
		set(c, v)
		return ""
	}
}
