package telemetrytest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/telemetry"
	"github.com/hookd/hookd/internal/telemetry/telemetrytest"
)

// TestAPIMetricsCatalogue: the api's registry as cmd/api builds it.
func TestAPIMetricsCatalogue(t *testing.T) {
	t.Parallel()
	rec := telemetrytest.NewRecorder()
	telemetry.RegisterRuntime(rec)
	telemetry.NewHTTPMetrics(rec)
	cat, err := rec.Catalogue()
	require.NoError(t, err)

	require.Equal(t, telemetrytest.Family{
		Name: "http_requests_total", Help: "HTTP requests served, by method, route pattern and status code.",
		Labels: []string{"method", "route", "status"}, Type: "counter",
	}, cat["http_requests_total"])
	require.Equal(t, "histogram", cat["http_request_duration_seconds"].Type)
	require.Equal(t, "gauge", cat["go_goroutines"].Type)
	require.Equal(t, "summary", cat["go_gc_duration_seconds"].Type)
	require.Contains(t, cat.Names(), "process_resident_memory_bytes")

	f, ok := cat.Series("http_request_duration_seconds_bucket")
	require.True(t, ok)
	require.Equal(t, []string{"method", "route", "status", "le"}, f.Labels)
	_, ok = cat.Series("http_request_duration_seconds_count")
	require.True(t, ok)
	_, ok = cat.Series("go_gc_duration_seconds_sum")
	require.True(t, ok)
	_, ok = cat.Series("go_gc_duration_seconds_bucket")
	require.False(t, ok, "a summary has no buckets")
	_, ok = cat.Series("http_requests_total_count")
	require.False(t, ok, "a counter has no _count")
	_, ok = cat.Series("http_requests")
	require.False(t, ok)
}
