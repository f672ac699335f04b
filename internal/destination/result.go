package destination

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"time"
)

// Outcome is the verdict on one publish.
type Outcome string

// The outcomes of a publish.
const (
	// Confirmed: the system acknowledged the message (a publisher
	// confirm, a JetStream ack, Kafka acks from all in-sync replicas, an
	// SQS or Pub/Sub message id, a stream entry id, an MQTT PUBACK).
	Confirmed Outcome = "confirmed"
	// Failed: refused, timed out or unreachable. Evidence against the
	// destination's health, fed to its breaker like an HTTP 5xx.
	Failed Outcome = "failed"
	// AuthRefused: the system refused the credentials or their rights.
	// Handled as an HTTP 401/403 (the auth wall, auto-disabling).
	AuthRefused Outcome = "auth_refused"
)

// Reason says why a publish failed.
type Reason string

// The reasons of a Failed publish.
const (
	// Refused: the system answered and did not take the message (a nack,
	// a missing exchange, stream or topic, a broker error).
	Refused Reason = "refused"
	// Timeout: no confirmation within the publish's deadline.
	Timeout Reason = "timeout"
	// Unreachable: no connection could be made or kept.
	Unreachable Reason = "unreachable"
	// Blocked: the SSRF guard refused the address the host resolved to.
	Blocked Reason = "blocked"
)

// Result is what came of one publish.
type Result struct {
	Outcome Outcome
	// Reason is set for Failed.
	Reason Reason
	// Err is the system's error, nil when Confirmed.
	Err error
	// Ref is the system's reference to the stored message when it gives
	// one (a stream entry id, an SQS or Pub/Sub message id, a partition
	// and offset), for the attempt's record.
	Ref string
	// Duration is the publish's time, connecting included.
	Duration time.Duration
}

func confirmed(ref string) Result { return Result{Outcome: Confirmed, Ref: ref} }

func authRefused(err error) Result { return Result{Outcome: AuthRefused, Err: err} }

func failed(r Reason, err error) Result { return Result{Outcome: Failed, Reason: r, Err: err} }

// failure classifies a transport-level error the way the HTTP path does:
// the SSRF guard's refusal (wrapping blockedErr) is blocked, a deadline is
// a timeout, a refused or broken connection or a failed lookup is
// unreachable, anything else the system refused.
func failure(ctx context.Context, err, blockedErr error) Result {
	switch {
	case blockedErr != nil && errors.Is(err, blockedErr):
		return failed(Blocked, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), ctx.Err() != nil:
		return failed(Timeout, err)
	case isNetTimeout(err):
		return failed(Timeout, err)
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH), isDNS(err), isOpError(err):
		return failed(Unreachable, err)
	}
	return failed(Refused, err)
}

func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isDNS(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de)
}

func isOpError(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe)
}
