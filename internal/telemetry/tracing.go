package telemetry

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracing is a process's OpenTelemetry tracing: a tracer provider, nil when
// tracing is off (callers then make no span at all, so an untraced process
// pays nothing), and the W3C trace-context propagator.
type Tracing struct {
	// Provider makes the process's tracers; nil when tracing is off.
	Provider trace.TracerProvider
	// Propagator reads and writes the traceparent and tracestate headers.
	Propagator propagation.TextMapPropagator

	shutdown func(context.Context) error
}

// The environment variables that switch tracing on, as the OpenTelemetry
// specification names them.
const (
	EnvTracesExporter       = "OTEL_TRACES_EXPORTER"
	EnvOTLPEndpoint         = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvOTLPTracesEndpoint   = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvOTLPProtocol         = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvOTLPTracesProtocol   = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	EnvServiceName          = "OTEL_SERVICE_NAME"
	defaultOTLPHTTPProtocol = "http/protobuf"
)

// NewTracing reads the standard OpenTelemetry variables through getenv:
// tracing is on when OTEL_TRACES_EXPORTER is "otlp", or when it is unset and
// an OTLP endpoint is; it is off for "none" and when nothing is set. Spans
// are exported over OTLP (OTEL_EXPORTER_OTLP_PROTOCOL "http/protobuf", the
// default, or "grpc") in batches, under OTEL_SERVICE_NAME or service.
func NewTracing(ctx context.Context, getenv func(string) string, service string) (*Tracing, error) {
	t := &Tracing{Propagator: propagation.TraceContext{}, shutdown: func(context.Context) error { return nil }}
	endpoint := firstSet(getenv, EnvOTLPTracesEndpoint, EnvOTLPEndpoint)
	switch exp := strings.TrimSpace(getenv(EnvTracesExporter)); exp {
	case "none":
		return t, nil
	case "":
		if endpoint == "" {
			return t, nil
		}
	case "otlp":
	default:
		return nil, fmt.Errorf("%s=%q: only otlp and none are supported", EnvTracesExporter, exp)
	}
	exporter, err := newOTLPExporter(ctx, getenv, endpoint)
	if err != nil {
		return nil, err
	}
	if name := getenv(EnvServiceName); name != "" {
		service = name
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exporter),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))),
	)
	t.Provider, t.shutdown = tp, tp.Shutdown
	return t, nil
}

// NewTracingWith returns tracing through tp (tests use an in-memory
// exporter); a nil tp is tracing off.
func NewTracingWith(tp trace.TracerProvider) *Tracing {
	return &Tracing{Provider: tp, Propagator: propagation.TraceContext{}, shutdown: func(context.Context) error { return nil }}
}

// Enabled reports whether spans are made.
func (t *Tracing) Enabled() bool { return t != nil && t.Provider != nil }

// Shutdown exports the spans still buffered and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.shutdown(ctx); err != nil {
		return fmt.Errorf("shut tracing down: %w", err)
	}
	return nil
}

func newOTLPExporter(ctx context.Context, getenv func(string) string, endpoint string) (sdktrace.SpanExporter, error) {
	protocol := firstSet(getenv, EnvOTLPTracesProtocol, EnvOTLPProtocol)
	if protocol == "" {
		protocol = defaultOTLPHTTPProtocol
	}
	switch protocol {
	case defaultOTLPHTTPProtocol:
		var opts []otlptracehttp.Option
		if endpoint != "" {
			if getenv(EnvOTLPTracesEndpoint) == "" {
				// The signal-less endpoint is a base URL; traces go to /v1/traces under it.
				endpoint = strings.TrimSuffix(endpoint, "/") + "/v1/traces"
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(endpoint))
		}
		exp, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("otlp http trace exporter: %w", err)
		}
		return exp, nil
	case "grpc":
		var opts []otlptracegrpc.Option
		if endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(endpoint))
		}
		exp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("otlp grpc trace exporter: %w", err)
		}
		return exp, nil
	default:
		return nil, fmt.Errorf("%s=%q: only http/protobuf and grpc are supported", EnvOTLPProtocol, protocol)
	}
}

func firstSet(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(getenv(n)); v != "" {
			return v
		}
	}
	return ""
}
