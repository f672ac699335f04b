package dispatcher_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/dispatcher"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
	"github.com/hookd/hookd/internal/telemetry"
)

// TestTraceRunsFromRequestToAttempt posts a message to the API and lets a
// Dispatcher deliver it, both traced into one in-memory exporter: the API
// request's span, the message's commit span and the attempt's span form one
// trace, the attempt carrying its attributes; the receiver gets a
// traceparent naming the attempt's span only with PropagateTrace.
func TestTraceRunsFromRequestToAttempt(t *testing.T) {
	for _, propagate := range []bool{true, false} {
		t.Run(fmt.Sprintf("propagate=%v", propagate), func(t *testing.T) {
			traceRun(t, propagate)
		})
	}
}

func traceRun(t *testing.T, propagate bool) {
	db := storetest.New(t)
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	tracing := telemetry.NewTracingWith(tp)

	traceparents := make(chan string, 1)
	secret := newSecret(t)
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{secret}, Respond: func(r *deliverytest.Request) deliverytest.Response {
		select {
		case traceparents <- r.Header.Get("Traceparent"):
		default:
		}
		return deliverytest.Response{Status: http.StatusOK}
	}})
	st := store.New(db.Pool, nil)
	ep, err := st.CreateEndpoint(t.Context(), store.Endpoint{TenantID: "acme", URL: rc.URL("/hook"), Secret: secret})
	require.NoError(t, err)
	inserter, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	require.NoError(t, err)
	const token = "trace-test-token-7d2a"
	srv := httptest.NewServer(api.NewServer(api.Deps{
		Store: st, Enqueuer: &delivery.Enqueuer{Client: inserter}, Token: token, Tracing: tracing, Now: time.Now,
	}))
	t.Cleanup(srv.Close)

	cfg := dispatcher.DefaultConfig()
	cfg.MetricsAddr = "127.0.0.1:0"
	cfg.AllowPrivateTargets = true
	cfg.ShutdownGrace = 10 * time.Second
	cfg.PropagateTrace = propagate
	_, cancel, done := startRunWith(t, cfg, dispatcher.Deps{Pool: db.Pool, Tracing: tracing}, slog.LevelWarn)
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages",
		strings.NewReader(`{"tenant_id":"acme","event_type":"order.created","payload":{"n":1}}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := srv.Client().Do(req)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusAccepted, res.StatusCode)

	var traceparent string
	select {
	case traceparent = <-traceparents:
	case <-time.After(waitFor):
		t.Fatal("the message never arrived")
	}
	var attempt tracetest.SpanStub
	require.Eventually(t, func() bool {
		for _, s := range exporter.GetSpans() {
			if s.Name == delivery.SpanAttempt {
				attempt = s
				return true
			}
		}
		return false
	}, waitFor, 10*time.Millisecond, "the attempt's span ends after its answer")

	spans := map[string]tracetest.SpanStub{}
	for _, s := range exporter.GetSpans() {
		spans[s.Name] = s
	}
	request, ok := spans["POST /v1/messages"]
	require.True(t, ok, "the request's span is named for its route: %v", names(spans))
	commit, ok := spans[api.SpanMessageCommit]
	require.True(t, ok)
	require.Equal(t, trace.SpanKindServer, request.SpanKind)
	require.Equal(t, request.SpanContext.TraceID(), commit.SpanContext.TraceID())
	require.Equal(t, request.SpanContext.SpanID(), commit.Parent.SpanID())
	require.Equal(t, request.SpanContext.TraceID(), attempt.SpanContext.TraceID(), "one trace from the request to the attempt")
	require.Equal(t, commit.SpanContext.SpanID(), attempt.Parent.SpanID())
	require.Equal(t, trace.SpanKindClient, attempt.SpanKind)

	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range attempt.Attributes {
		attrs[kv.Key] = kv.Value
	}
	require.Equal(t, ep.ID, attrs[delivery.AttrEndpointID].AsString())
	require.Equal(t, int64(1), attrs[delivery.AttrAttemptNumber].AsInt64())
	require.Equal(t, int64(http.StatusOK), attrs[delivery.AttrHTTPStatus].AsInt64())
	require.Equal(t, string(delivery.ClassSuccess), attrs[delivery.AttrClassification].AsString())
	require.Equal(t, delivery.DecisionAdmitted, attrs[delivery.AttrBreakerDecision].AsString())

	if !propagate {
		require.Empty(t, traceparent, "no traceparent without the flag")
		return
	}
	want := fmt.Sprintf("00-%s-%s-01", attempt.SpanContext.TraceID(), attempt.SpanContext.SpanID())
	require.Equal(t, want, traceparent, "the receiver's parent is the attempt's span")
}

func names(spans map[string]tracetest.SpanStub) []string {
	var out []string
	for n := range spans {
		out = append(out, n)
	}
	return out
}
