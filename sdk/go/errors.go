package hookd

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hookd/hookd/sdk/go/api"
)

// FieldError names one field at fault in a refused request: a JSON name
// (url, event_types[2], metadata.team), a query parameter, or body.
type FieldError = api.FieldError

// Error is an answer of the API other than the one a call expects: the
// RFC 9457 problem it carries (every error of the API is
// application/problem+json). Get it with errors.As:
//
//	var herr *hookd.Error
//	if errors.As(err, &herr) && herr.Status == http.StatusBadRequest { ... herr.Errors ... }
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Type is a URI naming the kind of problem, such as
	// https://hookd.dev/problems/validation.
	Type string
	// Title is the problem kind's short summary.
	Title string
	// Detail explains this occurrence.
	Detail string
	// Instance is the request path.
	Instance string
	// Errors names every field at fault of a 400.
	Errors []FieldError
	// RetryAfter is the wait the answer asked for (429 and 503), zero when
	// it asked for none.
	RetryAfter time.Duration
	// Body is the answer's body as received.
	Body []byte
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "hookd: %d", e.Status)
	if e.Title != "" {
		b.WriteString(" " + e.Title)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	for i, f := range e.Errors {
		if i == 0 {
			b.WriteString(" (")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(f.Field + ": " + f.Message)
		if i == len(e.Errors)-1 {
			b.WriteString(")")
		}
	}
	return b.String()
}

// Field returns the error naming field, if the problem names it.
func (e *Error) Field(field string) (FieldError, bool) {
	for _, f := range e.Errors {
		if f.Field == field {
			return f, true
		}
	}
	return FieldError{}, false
}

// newError builds the *Error of an unexpected answer from its body, which
// is a problem unless something other than hookd (a proxy) answered.
func newError(resp *http.Response, body []byte) *Error {
	e := &Error{Status: resp.StatusCode, Body: body}
	var p api.Problem
	if json.Unmarshal(body, &p) == nil {
		e.Type, e.Title = p.Type, p.Title
		if p.Detail != nil {
			e.Detail = *p.Detail
		}
		if p.Instance != nil {
			e.Instance = *p.Instance
		}
		if p.Errors != nil {
			e.Errors = *p.Errors
		}
	}
	if e.Title == "" {
		e.Title = http.StatusText(resp.StatusCode)
	}
	e.RetryAfter, _ = retryAfter(resp.Header.Get("Retry-After"), time.Now())
	return e
}

// result returns a call's decoded answer, or an *Error when the API
// answered anything but the expected status.
func result[T any](got *T, resp *http.Response, body []byte) (*T, error) {
	if got != nil {
		return got, nil
	}
	return nil, newError(resp, body)
}

// noContent is result for calls that answer 204 with no body.
func noContent(resp *http.Response, body []byte) error {
	if resp.StatusCode == http.StatusNoContent {
		return nil
	}
	return newError(resp, body)
}
