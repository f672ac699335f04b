package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/hookd/hookd/internal/telemetry"
)

// TestTraceSinkTakesOTLPExports: the OTLP/HTTP exporter hookd's telemetry
// builds from the environment the scenario sets exports to the sink
// without an error (an empty 200 answer is a valid empty response), and
// the sink counts what it got.
func TestTraceSinkTakesOTLPExports(t *testing.T) {
	t.Parallel()
	sink, err := newTraceSink()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sink.close()) })
	ctx := context.Background()

	env := tracingEnv(sink.url)
	tr, err := telemetry.NewTracing(ctx, func(k string) string { return env[k] }, "hookd-api")
	require.NoError(t, err)
	require.True(t, tr.Enabled(), "the scenario's environment switches tracing on")
	require.NoError(t, tr.Shutdown(ctx))

	// The same protocol and path, with a synchronous exporter, so the
	// export's own error is seen.
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(sink.url+"/v1/traces"))
	require.NoError(t, err)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "hookd-dispatcher"))))
	_, span := tp.Tracer("bench").Start(ctx, "deliver")
	span.End()
	require.NoError(t, tp.ForceFlush(ctx))
	require.NoError(t, tp.Shutdown(ctx))
	require.Positive(t, sink.requests.Load())
	require.Positive(t, sink.bytes.Load())
	require.EqualValues(t, 1, sink.dispatcherRequests.Load(), "the span names its service")
	require.Zero(t, sink.apiRequests.Load(), "the api's tracing made no span")
}

func TestTracingTarget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		scenarios []*scenarioResult
		status    string
	}{
		{"not run", nil, "n/a"},
		{"within 5%", []*scenarioResult{{Name: "s1trace", Extra: map[string]any{"tracing_on_median_per_s": 960.0, "tracing_off_median_per_s": 1000.0}}}, "met"},
		{"over 5%", []*scenarioResult{{Name: "s1trace", Extra: map[string]any{"tracing_on_median_per_s": 940.0, "tracing_off_median_per_s": 1000.0}}}, "missed"},
		{"failed", []*scenarioResult{{Name: "s1trace", Error: "boom"}}, "missed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &results{Scenarios: tc.scenarios}
			evaluate(r)
			var got *target
			for i := range r.Targets {
				if r.Targets[i].Goal == "S1 tracing on >= 0.95 x tracing off" {
					got = &r.Targets[i]
				}
			}
			require.NotNil(t, got)
			require.Equal(t, tc.status, got.Status, got.Measured)
		})
	}

	// The figures survive bench-results.json.
	r := &results{Scenarios: []*scenarioResult{{Name: "s1trace", Extra: map[string]any{"tracing_on_median_per_s": 960.0, "tracing_off_median_per_s": 1000.0}}}}
	evaluate(r)
	b, err := json.Marshal(r)
	require.NoError(t, err)
	var back map[string]any
	require.NoError(t, json.Unmarshal(b, &back))
	require.InDelta(t, 960.0, back["s1_tracing_on_per_s"], 1e-9)
	require.InDelta(t, 1000.0, back["s1_tracing_off_per_s"], 1e-9)
}
