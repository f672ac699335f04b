package delivery

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"

	"github.com/hookd/hookd/internal/destination"
)

// Classification is the verdict on one delivery attempt. Classify is the one
// place in hookd where HTTP status codes and transport errors are interpreted;
// everything downstream (retries, the breaker, the ledger) works from a
// Classification.
type Classification string

// The five classifications of a delivery attempt.
const (
	// ClassSuccess is a 2xx answer: the message is delivered.
	ClassSuccess Classification = "success"
	// ClassFailure is evidence that the endpoint is unhealthy: a transport
	// error, a 5xx, a redirect or any other unexpected status.
	ClassFailure Classification = "failure"
	// ClassIgnore is a 4xx other than 401 and 403 (including 429): the
	// endpoint is up and rejecting this request, which says nothing about its
	// health.
	ClassIgnore Classification = "ignore"
	// ClassAuthFailure is a 401 or 403: a credential problem, routed to
	// auto-disabling and operators rather than counted as ill health.
	ClassAuthFailure Classification = "auth_failure"
	// ClassBlocked means the SSRF guard refused the address the endpoint
	// resolved to; no request left the process.
	ClassBlocked Classification = "blocked"
)

// ErrorClass names the transport failure of an attempt. It is stored in
// delivery_attempts.error_class; ErrNone means the attempt got an HTTP answer.
type ErrorClass string

// The transport failure classes, as produced by ErrorClassOf.
const (
	// ErrNone means there was no transport error.
	ErrNone ErrorClass = ""
	// ErrTimeout is a deadline hit while connecting, writing or reading.
	ErrTimeout ErrorClass = "timeout"
	// ErrConnRefused is a refused TCP connection.
	ErrConnRefused ErrorClass = "connection_refused"
	// ErrConnReset is a connection reset by the peer or a broken pipe.
	ErrConnReset ErrorClass = "connection_reset"
	// ErrDNS is a failed name resolution.
	ErrDNS ErrorClass = "dns"
	// ErrTLS is a failed TLS handshake: a bad certificate, an alert or a peer
	// that does not speak TLS.
	ErrTLS ErrorClass = "tls"
	// ErrEOF is a connection closed before the full response arrived.
	ErrEOF ErrorClass = "eof"
	// ErrBlocked means the SSRF guard refused the dialed IP.
	ErrBlocked ErrorClass = "blocked"
	// ErrOther is any other transport error.
	ErrOther ErrorClass = "other"
	// ErrRefused is a publish the destination answered and did not take
	// (a nack, a missing exchange, stream, topic or queue).
	ErrRefused ErrorClass = "refused"
	// ErrUnreachable is a publish that found no connection to its
	// destination, or lost it.
	ErrUnreachable ErrorClass = "unreachable"
	// ErrAuthRefused is a publish whose credentials, or their rights, the
	// destination refused.
	ErrAuthRefused ErrorClass = "auth_refused"
)

// ErrBlockedTarget is returned (wrapped) by the SSRF-guarded dialer when the
// address an endpoint resolves to is not allowed. ErrorClassOf maps any error
// wrapping it to ErrBlocked.
var ErrBlockedTarget = errors.New("target address is not allowed")

// Classify classifies one attempt from its HTTP status and transport error
// class. A transport error other than ErrBlocked is a failure and ErrBlocked is
// blocked, whatever the status. Without a transport error: 2xx is success; 401
// and 403 are auth_failure; 429 and every other 4xx are ignore; 3xx (redirects
// are not followed), 5xx, 1xx and any other status are failure.
func Classify(status int, ec ErrorClass) Classification {
	switch {
	case ec == ErrBlocked:
		return ClassBlocked
	case ec != ErrNone:
		return ClassFailure
	case status >= 200 && status <= 299:
		return ClassSuccess
	case status == 401 || status == 403:
		return ClassAuthFailure
	case status >= 400 && status <= 499:
		return ClassIgnore
	default:
		return ClassFailure
	}
}

// ClassifyPublish classifies one publish to a non-HTTP destination by its
// verdict, as Classify does an HTTP answer: confirmed is success; failed
// is a failure (timeout, refused, unreachable) like a 5xx or a transport
// error, or blocked when the SSRF guard refused its address; auth refused
// is an auth failure, the auth wall a 401 or 403 meets.
func ClassifyPublish(r destination.Result) (Classification, ErrorClass) {
	switch r.Outcome {
	case destination.Confirmed:
		return ClassSuccess, ErrNone
	case destination.AuthRefused:
		return ClassAuthFailure, ErrAuthRefused
	}
	switch r.Reason {
	case destination.Blocked:
		return ClassBlocked, ErrBlocked
	case destination.Timeout:
		return ClassFailure, ErrTimeout
	case destination.Unreachable:
		return ClassFailure, ErrUnreachable
	}
	return ClassFailure, ErrRefused
}

// Breaker outcome strings, as understood by the circuit breaker.
const (
	outcomeSuccess     = "success"
	outcomeFailure     = "failure"
	outcomeIgnore      = "ignore"
	outcomeAuthFailure = "auth_failure"
)

// BreakerOutcome maps c to the outcome string fed to the circuit breaker:
// success, failure, ignore or auth_failure. It returns ok=false for
// ClassBlocked (and any unknown value): a blocked attempt never reached the
// endpoint and must never feed its breaker.
func (c Classification) BreakerOutcome() (outcome string, ok bool) {
	switch c {
	case ClassSuccess:
		return outcomeSuccess, true
	case ClassFailure:
		return outcomeFailure, true
	case ClassIgnore:
		return outcomeIgnore, true
	case ClassAuthFailure:
		return outcomeAuthFailure, true
	default:
		return "", false
	}
}

// ErrorClassOf maps an error from http.Client.Do or from reading a response
// body to an ErrorClass. It returns ErrNone for a nil error. The checks run in
// this order, first match wins:
//
//   - an error wrapping ErrBlockedTarget: ErrBlocked;
//   - a *net.DNSError anywhere in the chain (even one that timed out): ErrDNS;
//   - context.DeadlineExceeded or a net.Error whose Timeout() is true
//     (http.Client.Timeout included): ErrTimeout;
//   - syscall.ECONNREFUSED: ErrConnRefused;
//   - syscall.ECONNRESET or syscall.EPIPE: ErrConnReset;
//   - TLS failures (tls.RecordHeaderError, http.ErrSchemeMismatch (the
//     transport's name for a plain-HTTP answer to a TLS handshake),
//     tls.AlertError, a received TLS alert, *tls.CertificateVerificationError
//     and the x509 verification errors): ErrTLS;
//   - io.EOF or io.ErrUnexpectedEOF: ErrEOF;
//   - anything else, context.Canceled included: ErrOther.
func ErrorClassOf(err error) ErrorClass {
	if err == nil {
		return ErrNone
	}
	if errors.Is(err, ErrBlockedTarget) {
		return ErrBlocked
	}
	if _, ok := errors.AsType[*net.DNSError](err); ok {
		return ErrDNS
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ErrTimeout
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return ErrTimeout
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return ErrConnRefused
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return ErrConnReset
	}
	if isTLSError(err) {
		return ErrTLS
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return ErrEOF
	}
	return ErrOther
}

// isTLSError reports whether err comes from a failed TLS handshake.
func isTLSError(err error) bool {
	if _, ok := errors.AsType[tls.RecordHeaderError](err); ok {
		return true
	}
	if errors.Is(err, http.ErrSchemeMismatch) {
		return true
	}
	if _, ok := errors.AsType[tls.AlertError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.HostnameError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.CertificateInvalidError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.SystemRootsError](err); ok {
		return true
	}
	// crypto/tls reports an alert received from the peer as a *net.OpError
	// with Op "remote error" wrapping an unexported alert type.
	if oe, ok := errors.AsType[*net.OpError](err); ok && oe.Op == "remote error" {
		return true
	}
	return false
}
