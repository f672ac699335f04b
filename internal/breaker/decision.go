package breaker

import (
	"strconv"
	"time"
)

// Admission is Allow's answer for one request.
type Admission uint8

const (
	// Rejected means the request must not be sent now.
	Rejected Admission = iota
	// Admitted means the request may be sent: the breaker is closed.
	Admitted
	// Trial means the request may be sent as a half-open trial whose outcome
	// decides whether the breaker closes.
	Trial
)

var admissionNames = [...]string{
	Rejected: "rejected",
	Admitted: "admitted",
	Trial:    "trial",
}

// String returns "rejected", "admitted" or "trial".
func (a Admission) String() string {
	if int(a) < len(admissionNames) {
		return admissionNames[a]
	}
	return "admission(" + strconv.Itoa(int(a)) + ")"
}

// Ticket is handed out with an admission and comes back with the request's
// outcome, so Record can tell which state period the outcome belongs to.
type Ticket struct {
	// Generation is the breaker generation the request was admitted under.
	Generation int64
	// Trial reports whether the request was admitted as a half-open trial.
	Trial bool
}

// Reasons a request is rejected, in Decision.Reason.
const (
	// ReasonOpen rejects a request while the breaker is open.
	ReasonOpen = "open"
	// ReasonHalfOpenBusy rejects a request while every trial slot is taken.
	ReasonHalfOpenBusy = "half_open_busy"
	// ReasonIsolated rejects a request while an operator holds the breaker open.
	ReasonIsolated = "isolated"
)

// Decision is what Allow or Peek decided for one request.
type Decision struct {
	// Admission says whether, and how, the request may be sent.
	Admission Admission
	// Ticket identifies the admission; it is zero when Rejected.
	Ticket Ticket
	// Reason says why a request was Rejected: ReasonOpen, ReasonHalfOpenBusy
	// or ReasonIsolated; it is empty otherwise.
	Reason string
	// RetryAt is, for a request rejected while open, the first instant a
	// trial could be admitted; it is zero otherwise.
	RetryAt time.Time
	// Transition is the open -> half_open transition this admission made, or
	// nil.
	Transition *Transition
}
