package api

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/hookd/hookd/internal/store"
)

// TracerName names the API's tracer.
const TracerName = "github.com/hookd/hookd/internal/api"

// SpanMessageCommit is the span of storing one message with its deliveries
// and their jobs (the group commit's wait included).
const SpanMessageCommit = "message.commit"

// traced wraps h in a server span per request (otelhttp), named for the
// route once it is known, when tracing is on; off, h is served as it is.
func traced(h http.Handler, d Deps) http.Handler {
	if !d.Tracing.Enabled() {
		return h
	}
	named := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		// chi fills the route pattern in while routing: name the span by
		// the route, never the raw path (ids would make every name new).
		if rc := chi.RouteContext(r.Context()); rc != nil {
			if p := rc.RoutePattern(); p != "" {
				span := trace.SpanFromContext(r.Context())
				span.SetName(r.Method + " " + p)
				span.SetAttributes(semconv.HTTPRoute(p))
			}
		}
	})
	return otelhttp.NewHandler(withRouteContext(named), "http.request",
		otelhttp.WithTracerProvider(d.Tracing.Provider),
		otelhttp.WithPropagators(d.Tracing.Propagator))
}

// withRouteContext gives the request chi's route context before the router
// sees it, so the wrapper above can read the pattern chi matched (chi uses
// a route context already in the request instead of making its own).
func withRouteContext(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if chi.RouteContext(r.Context()) == nil {
			r = r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, chi.NewRouteContext()))
		}
		h.ServeHTTP(w, r)
	})
}

// tracer is the API's tracer: a no-op one when tracing is off.
func (d Deps) tracer() trace.Tracer {
	if !d.Tracing.Enabled() {
		return noop.NewTracerProvider().Tracer(TracerName)
	}
	return d.Tracing.Provider.Tracer(TracerName)
}

// startCommit starts the commit span of in and writes its context into
// in.Trace, which the message's delivery jobs carry to the dispatcher.
func startCommit(ctx context.Context, d Deps, in *store.NewMessage) (context.Context, trace.Span) {
	ctx, span := d.tracer().Start(ctx, SpanMessageCommit, trace.WithAttributes(
		attribute.String("hookd.tenant.id", in.TenantID),
		attribute.String("hookd.event_type", in.EventType)))
	if span.IsRecording() {
		in.Trace = map[string]string{}
		d.Tracing.Propagator.Inject(ctx, propagation.MapCarrier(in.Trace))
	}
	return ctx, span
}

// endCommit records the commit's outcome and ends its span.
func endCommit(span trace.Span, m store.Message, created bool, err error) {
	if span.IsRecording() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "commit failed")
		} else {
			span.SetAttributes(attribute.String("hookd.message.id", m.ID),
				attribute.Bool("hookd.message.created", created),
				attribute.Int("hookd.message.deliveries", len(m.Deliveries)))
		}
	}
	span.End()
}
