package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/filter"
	"github.com/hookd/hookd/internal/retention"
	"github.com/hookd/hookd/internal/store"
)

// An endpoint's delivery options: ordering and on_exhausted, filter,
// retry_schedule and timeout. The last three may be absent, null or a
// value; on PATCH, absent keeps the option and null removes it (the
// dispatcher's defaults then apply).

// nullableJSON is a request member kept raw, so validation can name the
// field (and the path inside it) whatever was sent.
type nullableJSON struct {
	set bool
	raw json.RawMessage
}

// UnmarshalJSON keeps the member's JSON, compacted (encoding/json calls
// it for null too, and hands it valid JSON).
func (n *nullableJSON) UnmarshalJSON(b []byte) error {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return err
	}
	n.set = true
	n.raw = buf.Bytes()
	return nil
}

// MarshalJSON writes the member back as it came (null when absent).
func (n nullableJSON) MarshalJSON() ([]byte, error) {
	if !n.set {
		return []byte("null"), nil
	}
	return n.raw, nil
}

// IsZero reports whether the member was absent.
func (n nullableJSON) IsZero() bool { return !n.set }

func (n nullableJSON) null() bool { return !n.set || bytes.Equal(n.raw, []byte("null")) }

// endpointOptions are the options as a create or PATCH request carries
// them.
type endpointOptions struct {
	Ordering      *string      `json:"ordering"`
	OnExhausted   *string      `json:"on_exhausted"`
	Filter        nullableJSON `json:"filter,omitzero"`
	RetrySchedule nullableJSON `json:"retry_schedule,omitzero"`
	Timeout       nullableJSON `json:"timeout,omitzero"`
}

func (o endpointOptions) validate(fe *fieldErrors) {
	if o.Ordering != nil && *o.Ordering != store.OrderingUnordered && *o.Ordering != store.OrderingFIFO {
		fe.add("ordering", `must be "unordered" or "fifo"`)
	}
	if o.OnExhausted != nil && *o.OnExhausted != store.ExhaustedSkip && *o.OnExhausted != store.ExhaustedBlock {
		fe.add("on_exhausted", `must be "skip" or "block"`)
	}
	if !o.Filter.null() {
		if _, err := filter.Parse(o.Filter.raw); err != nil {
			var e *filter.Error
			if !errors.As(err, &e) {
				fe.add("filter", err.Error())
			} else if e.Path == "" {
				fe.add("filter", e.Message)
			} else {
				fe.add("filter."+e.Path, e.Message)
			}
		}
	}
	if !o.RetrySchedule.null() {
		parseEndpointSchedule(fe, o.RetrySchedule.raw)
	}
	if !o.Timeout.null() {
		if _, err := parseEndpointTimeout(o.Timeout.raw); err != nil {
			fe.add("timeout", err.Error())
		}
	}
}

// parseEndpointSchedule reads a retry_schedule: an array of 1 to
// delivery.MaxEndpointScheduleLen delays, each in --retry-schedule's
// grammar (a Go duration from 0 to 24h), the delay before each attempt.
func parseEndpointSchedule(fe *fieldErrors, raw json.RawMessage) ([]time.Duration, bool) {
	var entries []string
	if err := json.Unmarshal(raw, &entries); err != nil || len(entries) == 0 || len(entries) > delivery.MaxEndpointScheduleLen {
		fe.add("retry_schedule", fmt.Sprintf(`must be an array of 1 to %d delays such as ["0s", "30s", "5m"] (the delay before each attempt), or null for the dispatcher's`,
			delivery.MaxEndpointScheduleLen))
		return nil, false
	}
	out := make([]time.Duration, len(entries))
	ok := true
	for i, e := range entries {
		d, err := delivery.ParseStep(e)
		if err != nil {
			fe.add(fmt.Sprintf("retry_schedule[%d]", i), fmt.Sprintf("must be a delay such as 30s, from 0 to %s: %v", delivery.MaxStep, err))
			ok = false
		}
		out[i] = d
	}
	return out, ok
}

// parseEndpointTimeout reads a timeout: a Go duration from
// delivery.MinEndpointTimeout to delivery.MaxEndpointTimeout.
func parseEndpointTimeout(raw json.RawMessage) (time.Duration, error) {
	var s string
	err := json.Unmarshal(raw, &s)
	var d time.Duration
	if err == nil {
		d, err = time.ParseDuration(strings.TrimSpace(s))
	}
	if err != nil || d < delivery.MinEndpointTimeout || d > delivery.MaxEndpointTimeout {
		return 0, fmt.Errorf("must be a duration from %s to %s such as \"10s\", or null for the dispatcher's", delivery.MinEndpointTimeout, delivery.MaxEndpointTimeout)
	}
	return d, nil
}

// checkScheduleWithinRetention refuses a retry schedule whose delays add
// up to more than the retention: its last attempts would come after the
// delivery expired.
func checkScheduleWithinRetention(d Deps, raw nullableJSON) error {
	if raw.null() {
		return nil
	}
	var fe fieldErrors
	sched, ok := parseEndpointSchedule(&fe, raw.raw)
	if !ok {
		return fe.err()
	}
	kept := d.Retention
	if kept <= 0 {
		kept = retention.DefaultRetention
	}
	var total time.Duration
	for _, step := range sched {
		total += step
	}
	if total > kept {
		return invalid("retry_schedule", fmt.Sprintf("adds up to %s, more than the %s retention: the last attempts would come after the delivery expired", total, kept))
	}
	return nil
}

// apply copies the options onto an endpoint being created; validate has
// checked them.
func (o endpointOptions) apply(e *store.Endpoint) {
	if o.Ordering != nil {
		e.Ordering = *o.Ordering
	}
	if o.OnExhausted != nil {
		e.OnExhausted = *o.OnExhausted
	}
	if !o.Filter.null() {
		e.Filter = o.Filter.raw
	}
	if !o.RetrySchedule.null() {
		e.RetrySchedule, _ = parseEndpointSchedule(&fieldErrors{}, o.RetrySchedule.raw)
	}
	if !o.Timeout.null() {
		e.Timeout, _ = parseEndpointTimeout(o.Timeout.raw)
	}
}

// patch copies the options onto an endpoint patch: an absent member
// keeps the option, null removes it.
func (o endpointOptions) patch(p *store.EndpointPatch) {
	p.Ordering, p.OnExhausted = o.Ordering, o.OnExhausted
	if o.Filter.set {
		f := json.RawMessage(nil)
		if !o.Filter.null() {
			f = o.Filter.raw
		}
		p.Filter = &f
	}
	if o.RetrySchedule.set {
		var sched []time.Duration
		if !o.RetrySchedule.null() {
			sched, _ = parseEndpointSchedule(&fieldErrors{}, o.RetrySchedule.raw)
		}
		p.RetrySchedule = &sched
	}
	if o.Timeout.set {
		var d time.Duration
		if !o.Timeout.null() {
			d, _ = parseEndpointTimeout(o.Timeout.raw)
		}
		p.Timeout = &d
	}
}

// endpointOptionsResponse are the options as an endpoint shows them.
type endpointOptionsResponse struct {
	Ordering    string `json:"ordering"`
	OnExhausted string `json:"on_exhausted"`
	// Filter is null when the endpoint has none.
	Filter json.RawMessage `json:"filter"`
	// RetrySchedule and Timeout are null when the dispatcher's apply.
	RetrySchedule []string `json:"retry_schedule"`
	Timeout       *string  `json:"timeout"`
	// BlockedBy is the failed delivery that stops a FIFO queue whose
	// on_exhausted is block, until it is retried or skipped.
	BlockedBy *string `json:"blocked_by"`
}

func toEndpointOptions(e store.Endpoint) endpointOptionsResponse {
	out := endpointOptionsResponse{Ordering: e.Ordering, OnExhausted: e.OnExhausted, BlockedBy: e.BlockedBy}
	if len(e.Filter) > 0 {
		out.Filter = e.Filter
	}
	if len(e.RetrySchedule) > 0 {
		out.RetrySchedule = strings.Split(delivery.Schedule(e.RetrySchedule).String(), ",")
	}
	if e.Timeout > 0 {
		s := delivery.Schedule{e.Timeout}.String()
		out.Timeout = &s
	}
	return out
}
