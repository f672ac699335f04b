package delivery_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/telemetry"
	"github.com/hookd/hookd/internal/telemetry/telemetrytest"
	"github.com/hookd/hookd/internal/trafficclass"
)

// TestDispatcherMetricsNameTheDocumentedSeries holds the dispatcher's
// registry, built as cmd/dispatcher builds it, to the stable names and labels
// docs/observability.md documents.
func TestDispatcherMetricsNameTheDocumentedSeries(t *testing.T) {
	t.Parallel()
	rec := telemetrytest.NewRecorder()
	telemetry.RegisterRuntime(rec)
	delivery.NewDispatcherMetrics(rec, &delivery.EndpointLabels{Max: 10})
	cat, err := rec.Catalogue()
	require.NoError(t, err)

	want := []telemetrytest.Family{
		{Name: "webhook_delivery_total", Labels: []string{"endpoint", "outcome"}, Type: "counter"},
		{Name: "webhook_delivery_5xx_total", Labels: []string{"endpoint"}, Type: "counter"},
		{Name: "webhook_delivery_duration_seconds", Labels: []string{}, Type: "histogram"},
		{Name: "breaker_open_total", Labels: []string{"endpoint"}, Type: "counter"},
		{Name: "breaker_state", Labels: []string{"endpoint", "state"}, Type: "gauge"},
		{Name: "breaker_trip_suppressed_total", Labels: []string{"reason"}, Type: "counter"},
		{Name: "breaker_rejected_total", Labels: []string{"endpoint"}, Type: "counter"},
		{Name: "breaker_fleet_suspect", Labels: []string{}, Type: "gauge"},
		{Name: "breaker_open_duration_seconds", Labels: []string{"class"}, Type: "histogram"},
		{Name: "breaker_class_open_duration_seconds", Labels: []string{"class"}, Type: "gauge"},
		{Name: "endpoint_auto_disabled_total", Labels: []string{"reason"}, Type: "counter"},
		{Name: "webhook_queue_depth", Labels: []string{"state"}, Type: "gauge"},
		{Name: "webhook_oldest_pending_seconds", Labels: []string{}, Type: "gauge"},
		{Name: "go_goroutines", Labels: []string{}, Type: "gauge"},
		{Name: "process_cpu_seconds_total", Labels: []string{}, Type: "counter"},
	}
	for _, f := range want {
		got := cat[f.Name]
		require.NotEmpty(t, got.Help, "%s has no help text", f.Name)
		got.Help = ""
		require.Equal(t, f, got, f.Name)
	}
}

// TestSeriesExistBeforeTheFirstEvent: counters with a bounded label set
// start at 0, so rate() and increase() see the first event.
func TestSeriesExistBeforeTheFirstEvent(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	delivery.NewDispatcherMetrics(reg, &delivery.EndpointLabels{})
	for name, series := range map[string]int{
		"breaker_trip_suppressed_total": 2, // min_throughput, fleet_suspect
		"endpoint_auto_disabled_total":  1, // auth_failures
		"webhook_queue_depth":           len(store.QueueStates),
		"dispatcher_db_dead_tuples":     len(store.HorizonTables),
		"breaker_fleet_suspect":         1,
	} {
		n, err := testutil.GatherAndCount(reg, name)
		require.NoError(t, err)
		require.Equal(t, series, n, name)
	}
}

type fakeQueue struct {
	stats   store.QueueStats
	horizon store.Horizon
	err     error
}

func (f *fakeQueue) Horizon(context.Context) (store.Horizon, error) { return f.horizon, f.err }

func (f *fakeQueue) QueueStats(_ context.Context, queue string) (store.QueueStats, error) {
	if queue != delivery.QueueDeliver {
		return store.QueueStats{}, errors.New("wrong queue " + queue)
	}
	return f.stats, f.err
}

func TestQueueMetricsExportTheDeliverQueue(t *testing.T) {
	t.Parallel()
	m := delivery.NewQueueMetrics(prometheus.NewRegistry())
	q := &fakeQueue{stats: store.QueueStats{
		Depth:           map[string]int64{"available": 120, "pending": 0, "retryable": 3, "running": 40, "scheduled": 7},
		Jobs:            map[string]int64{"available": 12, "pending": 0, "retryable": 3, "running": 4, "scheduled": 7},
		OldestAvailable: 95 * time.Second,
	}, horizon: store.Horizon{OldestTransaction: 240 * time.Second, SnapshotAge: 70_000,
		DeadTuples: map[string]int64{"river_job": 480_000, "deliveries": 1_200_000}}}
	require.NoError(t, m.Update(context.Background(), q))
	require.Equal(t, 240.0, testutil.ToFloat64(m.OldestTransaction))
	require.Equal(t, 70_000.0, testutil.ToFloat64(m.SnapshotAge))
	require.Equal(t, 480_000.0, testutil.ToFloat64(m.DeadTuples.WithLabelValues("river_job")))
	require.Equal(t, 1_200_000.0, testutil.ToFloat64(m.DeadTuples.WithLabelValues("deliveries")))
	require.Equal(t, 120.0, testutil.ToFloat64(m.Depth.WithLabelValues("available")))
	require.Equal(t, 12.0, testutil.ToFloat64(m.Jobs.WithLabelValues("available")))
	require.Equal(t, 40.0, testutil.ToFloat64(m.Depth.WithLabelValues("running")))
	require.Equal(t, 95.0, testutil.ToFloat64(m.OldestPending))

	// A failed measurement keeps the last figures.
	q.err = errors.New("database away")
	require.Error(t, m.Update(context.Background(), q))
	require.Equal(t, 95.0, testutil.ToFloat64(m.OldestPending))

	// Poll measures at once, then stops with its context.
	q.err = nil
	q.stats.OldestAvailable = 0
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Poll(ctx, q, time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.OldestPending) == 0 }, 5*time.Second, 5*time.Millisecond)
	cancel()
	<-done
}

type classList []trafficclass.Class

func (c *classList) ListClasses(context.Context) ([]trafficclass.Class, error) { return *c, nil }

func TestClassBookExportsEachClassOpenDuration(t *testing.T) {
	t.Parallel()
	m := delivery.NewBreakerMetrics(prometheus.NewRegistry(), &delivery.EndpointLabels{})
	fast := trafficclass.Default("fast")
	fast.Breaker.OpenDuration = 2 * time.Second
	classes := classList(append(trafficclass.Builtins(), fast))
	book := delivery.NewClassBook(&classes, nil)
	book.OpenDurations = m.ClassOpenDuration
	require.NoError(t, book.Load(context.Background()))
	require.Equal(t, 15.0, testutil.ToFloat64(m.ClassOpenDuration.WithLabelValues(trafficclass.High)))
	require.Equal(t, 30.0, testutil.ToFloat64(m.ClassOpenDuration.WithLabelValues(trafficclass.Trickle)))
	require.Equal(t, 2.0, testutil.ToFloat64(m.ClassOpenDuration.WithLabelValues("fast")))
	require.Equal(t, 5, testutil.CollectAndCount(m.ClassOpenDuration))

	// A deleted class's series goes with it.
	classes = classes[:4]
	require.NoError(t, book.Load(context.Background()))
	require.Equal(t, 4, testutil.CollectAndCount(m.ClassOpenDuration))

	fastTarget := &delivery.Target{Endpoint: store.Endpoint{TrafficClass: "fast"}}
	require.Equal(t, trafficclass.DefaultClass, book.ClassName(fastTarget), "an endpoint of a deleted class runs under the default class")
}
