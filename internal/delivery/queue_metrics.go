package delivery

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookd/hookd/internal/store"
)

// QueueStatter measures a River queue and the database's horizon.
type QueueStatter interface {
	QueueStats(ctx context.Context, queue string) (store.QueueStats, error)
	Horizon(ctx context.Context) (store.Horizon, error)
}

var _ QueueStatter = (*store.Store)(nil)

// QueueMetrics are the deliver queue's backlog: fleet-wide figures that
// every dispatcher measures and exports alike, so dashboards and alerts
// take max() over the dispatchers rather than a sum.
type QueueMetrics struct {
	Depth         *prometheus.GaugeVec
	Jobs          *prometheus.GaugeVec
	OldestPending prometheus.Gauge
	// OldestTransaction, SnapshotAge and DeadTuples are the database's
	// horizon (store.Horizon): what a backup or a long query costs the
	// tables every delivery writes. Fleet-wide likewise.
	OldestTransaction prometheus.Gauge
	SnapshotAge       prometheus.Gauge
	DeadTuples        *prometheus.GaugeVec
}

// NewQueueMetrics creates and registers webhook_queue_depth,
// webhook_queue_jobs, webhook_oldest_pending_seconds and the database's
// horizon (dispatcher_db_*) on reg. Every state's series exists from
// the start, at 0.
func NewQueueMetrics(reg prometheus.Registerer) *QueueMetrics {
	m := &QueueMetrics{
		Depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "webhook_queue_depth",
			Help: "Deliveries of the deliver queue's unfinished jobs (one for a delivery job, each delivery a message job names) by River state (available: due and waiting for a worker; scheduled: retries, breaker and concurrency snoozes; running; retryable; pending). Fleet-wide: every dispatcher exports the same value.",
		}, []string{"state"}),
		Jobs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "webhook_queue_jobs",
			Help: "Unfinished jobs of the deliver queue (a message job for up to 50 first attempts of a message, a delivery job for each later one) by River state, as webhook_queue_depth. Fleet-wide: every dispatcher exports the same value.",
		}, []string{"state"}),
		OldestPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "webhook_oldest_pending_seconds",
			Help: "How long the longest-waiting due delivery (an available job of the deliver queue) has waited for a worker: the backlog's age, 0 when there is none. Fleet-wide: every dispatcher exports the same value.",
		}),
		OldestTransaction: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dispatcher_db_oldest_transaction_seconds",
			Help: "How long the longest-open transaction on hookd's database has been open (a pg_dump holds one for the whole dump), 0 when none: while it lives, vacuum keeps every row version deleted or updated since it began, and the scans of the queue and the deliveries skip them. Covers other roles' sessions only when hookd's role may read their activity (pg_read_all_stats or pg_monitor). Fleet-wide: every dispatcher exports the same value.",
		}),
		SnapshotAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dispatcher_db_snapshot_age_transactions",
			Help: "How many transactions the oldest snapshot held on hookd's database is behind (age of backend_xmin), with the same sessions as dispatcher_db_oldest_transaction_seconds. Fleet-wide: every dispatcher exports the same value.",
		}),
		DeadTuples: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dispatcher_db_dead_tuples",
			Help: "Dead row versions of each table every delivery writes (partitions summed), as PostgreSQL's statistics last counted them: they grow while a long transaction holds vacuum back. Fleet-wide: every dispatcher exports the same value.",
		}, []string{"table"}),
	}
	for _, t := range store.HorizonTables {
		m.DeadTuples.WithLabelValues(t)
	}
	for _, s := range store.QueueStates {
		m.Depth.WithLabelValues(s)
		m.Jobs.WithLabelValues(s)
	}
	if reg != nil {
		reg.MustRegister(m.Depth, m.Jobs, m.OldestPending, m.OldestTransaction, m.SnapshotAge, m.DeadTuples)
	}
	return m
}

// Update measures the deliver queue once.
func (m *QueueMetrics) Update(ctx context.Context, st QueueStatter) error {
	s, err := st.QueueStats(ctx, QueueDeliver)
	if err != nil {
		return err
	}
	for state, n := range s.Depth {
		m.Depth.WithLabelValues(state).Set(float64(n))
	}
	for state, n := range s.Jobs {
		m.Jobs.WithLabelValues(state).Set(float64(n))
	}
	m.OldestPending.Set(s.OldestAvailable.Seconds())
	h, err := st.Horizon(ctx)
	if err != nil {
		return err
	}
	m.OldestTransaction.Set(h.OldestTransaction.Seconds())
	m.SnapshotAge.Set(float64(h.SnapshotAge))
	for t, n := range h.DeadTuples {
		m.DeadTuples.WithLabelValues(t).Set(float64(n))
	}
	return nil
}

// Poll updates the metrics at once and then every interval until ctx ends.
// A failed measurement keeps the last values and is logged.
func (m *QueueMetrics) Poll(ctx context.Context, st QueueStatter, interval time.Duration, logger *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		qctx, cancel := context.WithTimeout(ctx, interval)
		err := m.Update(qctx, st)
		cancel()
		if err != nil && ctx.Err() == nil {
			logger.Warn("queue_metrics", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
