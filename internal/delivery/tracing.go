package delivery

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracerName names the tracer of delivery attempts.
const TracerName = "github.com/hookd/hookd/internal/delivery"

// SpanAttempt is the span of one delivery attempt, from the breaker's
// decision to the receiver's answer.
const SpanAttempt = "delivery.attempt"

// Attributes of a delivery attempt's span (docs/observability.md lists
// them).
const (
	AttrEndpointID      = attribute.Key("hookd.endpoint.id")
	AttrDeliveryID      = attribute.Key("hookd.delivery.id")
	AttrMessageID       = attribute.Key("hookd.message.id")
	AttrAttemptNumber   = attribute.Key("hookd.attempt.number")
	AttrHTTPStatus      = attribute.Key("http.response.status_code")
	AttrClassification  = attribute.Key("hookd.classification")
	AttrBreakerDecision = attribute.Key("hookd.breaker.decision")
	AttrBreakerReason   = attribute.Key("hookd.breaker.reason")
	AttrErrorType       = attribute.Key("error.type")
)

// Breaker decisions recorded on an attempt's span.
const (
	DecisionAdmitted = "admitted"
	DecisionTrial    = "trial"
	DecisionRefused  = "refused"
)

// noopTracer is the tracer when tracing is off: its spans record nothing.
var noopTracer trace.Tracer = noop.NewTracerProvider().Tracer(TracerName)

// startAttemptSpan starts an attempt's span as a child of the trace context
// the job carries; with tracing off it costs a no-op span.
func (w *Worker) startAttemptSpan(ctx context.Context, args DeliverArgs, attempt int) (context.Context, trace.Span) {
	if len(args.Trace) > 0 && w.deps.Propagator != nil {
		ctx = w.deps.Propagator.Extract(ctx, propagation.MapCarrier(args.Trace))
	}
	ctx, span := w.deps.Tracer.Start(ctx, SpanAttempt, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(
			AttrEndpointID.String(args.EndpointID),
			AttrDeliveryID.String(args.DeliveryID),
			AttrMessageID.String(args.MessageID),
			AttrAttemptNumber.Int(attempt),
		)
	}
	return ctx, span
}

// recordAttemptSpan records on span how the attempt ended.
func recordAttemptSpan(span trace.Span, class Classification, resp Response) {
	if span.IsRecording() {
		if resp.Status != 0 {
			span.SetAttributes(AttrHTTPStatus.Int(resp.Status))
		} else if resp.ErrorClass != "" {
			span.SetAttributes(AttrErrorType.String(string(resp.ErrorClass)))
		}
		span.SetAttributes(AttrClassification.String(string(class)))
		if class != ClassSuccess {
			span.SetStatus(codes.Error, describe(resp))
		}
	}
}

// recordDecision records the breaker's decision on span.
func recordDecision(span trace.Span, adm Admission) {
	if !span.IsRecording() {
		return
	}
	switch {
	case adm.Refused:
		span.SetAttributes(AttrBreakerDecision.String(DecisionRefused), AttrBreakerReason.String(adm.Reason))
	case adm.Trial:
		span.SetAttributes(AttrBreakerDecision.String(DecisionTrial))
	default:
		span.SetAttributes(AttrBreakerDecision.String(DecisionAdmitted))
	}
}
