package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookd/hookd/internal/store"
)

// FieldError names one bad input field.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// ValidationError is bad input: every field at fault.
type ValidationError struct {
	Fields []FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Message
	}
	return "invalid input: " + strings.Join(parts, "; ")
}

// fieldErrors collects validation failures in order.
type fieldErrors []FieldError

func (fe *fieldErrors) add(field, message string) {
	*fe = append(*fe, FieldError{Field: field, Message: message})
}

// err returns a *ValidationError, or nil when nothing was added.
func (fe fieldErrors) err() error {
	if len(fe) == 0 {
		return nil
	}
	return &ValidationError{Fields: fe}
}

// invalid returns a ValidationError for one field.
func invalid(field, message string) error {
	return &ValidationError{Fields: []FieldError{{Field: field, Message: message}}}
}

// Error kinds that are not store errors.
var (
	errUnauthorized      = errors.New("a valid bearer token is required")
	errRateLimited       = errors.New("too many requests; retry after the time in Retry-After")
	errRouteNotFound     = errors.New("no such route")
	errMethodNotAllowed  = errors.New("method not allowed on this route")
	errTooLarge          = errors.New("request body too large")
	errUnsupportedMedia  = errors.New("content-type must be application/json")
	errDatabaseUnhealthy = errors.New("the database is unavailable; try again shortly")
	errNotReady          = errors.New("the database schema is not current; run migrations")
)

// tooLargeError is a body or payload over its limit, naming the field.
type tooLargeError struct {
	field string
	limit int64
}

func (e *tooLargeError) Error() string { return errTooLarge.Error() }
func (e *tooLargeError) Is(target error) bool {
	return target == errTooLarge
}

// problemKind maps an error kind to its HTTP status and problem type.
type problemKind struct {
	target error
	status int
	slug   string
	title  string
}

// problemKinds is the one table from error kinds to HTTP statuses.
var problemKinds = []problemKind{
	{errUnauthorized, http.StatusUnauthorized, "unauthorized", "Unauthorized"},
	{errPortalCode, http.StatusUnauthorized, "portal-code", "Unauthorized"},
	{errCSRF, http.StatusForbidden, "csrf", "Forbidden"},
	{errAdminOnly, http.StatusForbidden, "forbidden", "Forbidden"},
	{errReadOnly, http.StatusForbidden, "forbidden", "Forbidden"},
	{errReadOnlySecret, http.StatusForbidden, "forbidden", "Forbidden"},
	{errOtherTenant, http.StatusForbidden, "forbidden", "Forbidden"},
	{errNoScope, http.StatusForbidden, "forbidden", "Forbidden"},
	{errClassNotSelectable, http.StatusForbidden, "forbidden", "Forbidden"},
	{errDashboardAdmin, http.StatusForbidden, "forbidden", "Forbidden"},
	{errRouteNotFound, http.StatusNotFound, "not-found", "Not Found"},
	{store.ErrNotFound, http.StatusNotFound, "not-found", "Not Found"},
	{errMethodNotAllowed, http.StatusMethodNotAllowed, "method-not-allowed", "Method Not Allowed"},
	// The conflicts that say what conflicts, before the kind they wrap.
	{store.ErrClassExists, http.StatusConflict, "conflict", "Conflict"},
	{store.ErrClassInUse, http.StatusConflict, "conflict", "Conflict"},
	{store.ErrBuiltinClass, http.StatusConflict, "conflict", "Conflict"},
	{store.ErrNotAuto, http.StatusConflict, "conflict", "Conflict"},
	{store.ErrConflict, http.StatusConflict, "conflict", "Conflict"},
	{store.ErrNotRetryable, http.StatusConflict, "conflict", "Conflict"},
	{store.ErrNotSkippable, http.StatusConflict, "conflict", "Conflict"},
	{store.ErrPayloadExpired, http.StatusConflict, "conflict", "Conflict"},
	{store.ErrRecoveryReleasing, http.StatusConflict, "conflict", "Conflict"},
	{errTooLarge, http.StatusRequestEntityTooLarge, "too-large", "Payload Too Large"},
	{errUnsupportedMedia, http.StatusUnsupportedMediaType, "unsupported-media-type", "Unsupported Media Type"},
	{errRateLimited, http.StatusTooManyRequests, "rate-limited", "Too Many Requests"},
	{errDatabaseUnhealthy, http.StatusServiceUnavailable, "unavailable", "Service Unavailable"},
	{errNotReady, http.StatusServiceUnavailable, "not-ready", "Service Unavailable"},
}

// ProblemTypeBase prefixes every problem type URI.
const ProblemTypeBase = "https://hookd.dev/problems/"

// Problem is an RFC 9457 problem details body.
type Problem struct {
	Type     string       `json:"type"`
	Title    string       `json:"title"`
	Status   int          `json:"status"`
	Detail   string       `json:"detail,omitempty"`
	Instance string       `json:"instance,omitempty"`
	Errors   []FieldError `json:"errors,omitempty"`
}

// writeProblem renders err as problem+json with the status its kind maps to.
// Unknown errors are logged and answered 500 without detail.
func writeProblem(w http.ResponseWriter, r *http.Request, logger *slog.Logger, err error) {
	var ve *ValidationError
	if !errors.As(err, &ve) && isUnavailable(err) {
		err = errDatabaseUnhealthy
		w.Header().Set("Retry-After", "1")
	}
	p := problemOf(err)
	p.Instance = r.URL.Path
	if p.Status == http.StatusInternalServerError {
		logger.ErrorContext(r.Context(), "request_failed", slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("error", err.Error()))
		p.Type, p.Title, p.Detail = ProblemTypeBase+"internal", "Internal Server Error", ""
	}
	if p.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="hookd"`)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// problemOf is the problem of bad input or of an error of a kind in
// problemKinds (500, without type, for any other error), without its
// instance.
func problemOf(err error) Problem {
	var ve *ValidationError
	var tl *tooLargeError
	var ot *otherTenantError
	var cs *classNotSelectableError
	var ue *unprocessableError
	if errors.As(err, &ve) {
		return Problem{Type: ProblemTypeBase + "validation", Title: "Bad Request", Status: http.StatusBadRequest, Detail: ve.Error(), Errors: ve.Fields}
	}
	if errors.As(err, &ue) {
		return Problem{Type: ProblemTypeBase + "unprocessable", Title: "Unprocessable Content", Status: http.StatusUnprocessableEntity,
			Detail: "the message breaks the event type catalogue (strict mode)", Errors: []FieldError{{Field: ue.field, Message: ue.message}}}
	}
	p := Problem{Status: http.StatusInternalServerError}
	for _, k := range problemKinds {
		if errors.Is(err, k.target) {
			p.Type, p.Title, p.Status, p.Detail = ProblemTypeBase+k.slug, k.title, k.status, k.target.Error()
			break
		}
	}
	if errors.As(err, &tl) {
		p.Errors = []FieldError{{Field: tl.field, Message: "larger than the limit of " + formatBytes(tl.limit)}}
	}
	if errors.As(err, &ot) {
		p.Errors = []FieldError{{Field: ot.field, Message: "names another tenant than the token's"}}
	}
	if errors.As(err, &cs) {
		p.Errors = []FieldError{{Field: cs.field, Message: "is not a traffic class an admin made tenant_selectable"}}
	}
	if errors.Is(err, store.ErrPayloadExpired) {
		p.Errors = []FieldError{{Field: "payload", Message: "dropped by payload retention: there is nothing left to send"}}
	}
	return p
}

// isUnavailable reports whether err means Postgres could not be reached,
// or went away in the middle of the request.
func isUnavailable(err error) bool {
	var ce *pgconn.ConnectError
	var ne net.Error
	if errors.As(err, &ce) || errors.As(err, &ne) {
		return true
	}
	// A connection the server closed (a restart) fails its next use with
	// "conn closed", or a read with an unexpected EOF.
	if errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.ErrUnexpectedEOF) || pgconn.SafeToRetry(err) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// connection_exception (08...), admin_shutdown, crash_shutdown,
		// cannot_connect_now
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	return errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
}
