// Package retention keeps hookd's storage bounded: it creates the
// time partitions of messages, payloads, deliveries and attempts ahead of
// need, moves rows the default partitions caught into proper ones, makes
// deliveries that reach retention unfinished final (expired), drops whole
// partitions once retention has passed them, and prunes the small logs in
// batches. One process at a time does it (a session advisory lock); the
// others skip their turn.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookd/hookd/internal/store"
)

// Defaults of the flags.
const (
	DefaultInterval         = 24 * time.Hour
	DefaultRetention        = 720 * time.Hour
	DefaultHistoryRetention = 2160 * time.Hour
	// Ahead is how many intervals past the current one always have their
	// partitions: a week at the default interval, so a maintainer stopped
	// for up to six days leaves no row in a default partition.
	Ahead = 7
	// IdempotencyWindow is how long an idempotency key names its message.
	IdempotencyWindow = 24 * time.Hour
)

// Config sets the partition width and what is kept how long.
type Config struct {
	// Interval is the width of one partition (at least a minute).
	Interval time.Duration
	// Retention is how long messages, deliveries and attempts are kept.
	Retention time.Duration
	// PayloadRetention is how long payloads are kept (at most Retention).
	PayloadRetention time.Duration
	// HistoryRetention is how long breaker transitions, endpoint events
	// and class changes are kept.
	HistoryRetention time.Duration
	// Every is how often a maintenance run starts; zero: a sixth of the
	// interval, between 10 seconds and 10 minutes.
	Every time.Duration
	// Batch bounds the rows one statement deletes or expires; zero: 5000.
	Batch int
}

// ConfigError is a Config field whose value is not allowed.
type ConfigError struct {
	// Field is the dispatcher Config field's name (PartitionInterval,
	// Retention, PayloadRetention, HistoryRetention).
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("retention config: %s %s", e.Field, e.Reason)
}

// Validate returns a *ConfigError for the first setting that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Interval < time.Minute || c.Interval%time.Second != 0:
		return &ConfigError{"PartitionInterval", "must be at least 1m, in whole seconds"}
	case c.Retention < 2*c.Interval:
		return &ConfigError{"Retention", fmt.Sprintf("must be at least two partition intervals (%s)", 2*c.Interval)}
	case c.PayloadRetention < c.Interval || c.PayloadRetention > c.Retention:
		return &ConfigError{"PayloadRetention", fmt.Sprintf("must be from one partition interval (%s) to the retention (%s)", c.Interval, c.Retention)}
	case c.HistoryRetention < time.Minute:
		return &ConfigError{"HistoryRetention", "must be at least 1m"}
	}
	return nil
}

func (c Config) every() time.Duration {
	if c.Every > 0 {
		return c.Every
	}
	return min(max(c.Interval/6, 10*time.Second), 10*time.Minute)
}

func (c Config) batch() int {
	if c.Batch > 0 {
		return c.Batch
	}
	return 5000
}

// Metrics are the maintainer's series.
type Metrics struct {
	// DefaultRows is hookd_partition_default_rows{table}.
	DefaultRows *prometheus.GaugeVec
	// Partitions is hookd_partitions{table}.
	Partitions *prometheus.GaugeVec
	// Dropped is hookd_partitions_dropped_total{table}.
	Dropped *prometheus.CounterVec
	// Expired is webhook_delivery_expired_total{reason}, shared with the
	// delivery worker.
	Expired *prometheus.CounterVec
}

// NewMetrics registers the maintainer's own series on reg; expired is the
// delivery metrics' webhook_delivery_expired_total.
func NewMetrics(reg prometheus.Registerer, expired *prometheus.CounterVec) *Metrics {
	m := &Metrics{
		DefaultRows: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hookd_partition_default_rows",
			Help: "Rows in a table's default partition at the last maintenance run: rows whose interval had no partition when written (0 in steady state).",
		}, []string{"table"}),
		Partitions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hookd_partitions",
			Help: "Time partitions of a table at the last maintenance run.",
		}, []string{"table"}),
		Dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookd_partitions_dropped_total",
			Help: "Partitions dropped by retention, by table.",
		}, []string{"table"}),
		Expired: expired,
	}
	if reg != nil {
		reg.MustRegister(m.DefaultRows, m.Partitions, m.Dropped)
	}
	return m
}

// Store is what the maintainer needs of the database.
type Store interface {
	WithMaintenanceLock(ctx context.Context, fn func(context.Context) error) (bool, error)
	EnsurePartitions(ctx context.Context, now time.Time, interval time.Duration, ahead int) ([]store.PartitionChange, error)
	DrainDefault(ctx context.Context, interval time.Duration, limit int) ([]store.PartitionChange, error)
	DefaultRows(ctx context.Context) (map[string]int64, error)
	ExpireDeliveries(ctx context.Context, cutoff time.Time, lastError string, limit int) ([]store.ExpiredDelivery, error)
	RetirePartitions(ctx context.Context, cutoff, payloadCutoff time.Time, lastError string) ([]store.PartitionChange, error)
	ExpireIdempotencyKeys(ctx context.Context, cutoff time.Time, batch int) (int64, error)
	PruneHistory(ctx context.Context, cutoff time.Time, batch int) (int64, error)
	Partitions(ctx context.Context) ([]store.Partition, error)
}

var _ Store = (*store.Store)(nil)

// Deps are the maintainer's collaborators.
type Deps struct {
	Store Store
	// Now is the database's time (store.DBClock.Now): partitions and
	// cutoffs follow the clock every process shares.
	Now     func() time.Time
	Logger  *slog.Logger
	Metrics *Metrics
}

// Maintainer runs maintenance periodically.
type Maintainer struct {
	cfg  Config
	deps Deps
}

// New returns a maintainer; cfg must be valid.
func New(cfg Config, deps Deps) *Maintainer {
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	return &Maintainer{cfg: cfg, deps: deps}
}

// Report is what one run did.
type Report struct {
	// Ran is false when another process held the maintenance lock.
	Ran      bool
	Created  []store.PartitionChange
	Drained  []store.PartitionChange
	Dropped  []store.PartitionChange
	Expired  []store.ExpiredDelivery
	Keys     int64
	History  int64
	Defaults map[string]int64
}

// Run runs maintenance at once and then every period until ctx ends. A
// failed run is logged and retried at the next period.
func (m *Maintainer) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.every())
	defer t.Stop()
	for {
		if _, err := m.RunOnce(ctx, m.deps.Now()); err != nil && ctx.Err() == nil {
			m.deps.Logger.WarnContext(ctx, "maintenance_failed", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// expiredError is the last_error of a delivery retention made final.
func expiredError(retention time.Duration) string {
	return fmt.Sprintf("expired: not delivered within the retention (%s); its data is removed with its partition", retention)
}

// expired logs and counts deliveries retention made expired.
func (m *Maintainer) expired(ctx context.Context, ds []store.ExpiredDelivery) {
	for _, d := range ds {
		m.deps.Logger.WarnContext(ctx, "delivery_expired", slog.String("delivery", d.ID), slog.String("endpoint", d.EndpointID),
			slog.String("tenant", d.TenantID), slog.String("was", d.Was), slog.String("reason", "retention"))
	}
	if m.deps.Metrics != nil && m.deps.Metrics.Expired != nil {
		m.deps.Metrics.Expired.WithLabelValues("retention").Add(float64(len(ds)))
	}
}

// RunOnce runs one maintenance pass as of now (the database's time), if
// this process gets the maintenance lock: partitions ahead, the default
// partitions drained, the non-final deliveries past retention expired,
// the partitions past retention dropped, idempotency keys and history
// pruned.
func (m *Maintainer) RunOnce(ctx context.Context, now time.Time) (Report, error) {
	var rep Report
	ran, err := m.deps.Store.WithMaintenanceLock(ctx, func(ctx context.Context) error {
		rep.Ran = true
		return m.pass(ctx, now, &rep)
	})
	if err != nil {
		return rep, err
	}
	rep.Ran = ran
	return rep, nil
}

func (m *Maintainer) pass(ctx context.Context, now time.Time, rep *Report) error {
	log, cfg := m.deps.Logger, m.cfg
	// Each step runs whatever the others did: a creation that keeps
	// failing must not stop expiry and drops, nor they it.
	var errs []error
	var err error
	rep.Created, err = m.deps.Store.EnsurePartitions(ctx, now, cfg.Interval, Ahead)
	for _, c := range rep.Created {
		if c.Adopted {
			log.WarnContext(ctx, "partition_default_adopted", slog.String("table", c.Parent), slog.String("partition", c.Name),
				slog.Time("from", c.From), slog.Time("to", c.To),
				slog.String("why", "the interval being written had no partition and the default partition held too many rows to move (maintenance not running): it became this partition, moving no row"))
			continue
		}
		log.InfoContext(ctx, "partition_created", slog.String("table", c.Parent), slog.Time("from", c.From), slog.Time("to", c.To), slog.Int64("moved", c.Moved))
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("create partitions: %w", err))
	}
	rep.Drained, err = m.deps.Store.DrainDefault(ctx, cfg.Interval, 1000)
	for _, c := range rep.Drained {
		log.WarnContext(ctx, "partition_default_drained", slog.String("table", c.Parent), slog.Time("from", c.From),
			slog.Time("to", c.To), slog.Int64("moved", c.Moved),
			slog.String("why", "rows were written for an interval without a partition (a clock ahead or behind, or maintenance not running)"))
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("drain default partitions: %w", err))
	}
	if rep.Defaults, err = m.deps.Store.DefaultRows(ctx); err != nil {
		errs = append(errs, err)
	}
	for table, n := range rep.Defaults {
		if m.deps.Metrics != nil {
			m.deps.Metrics.DefaultRows.WithLabelValues(table).Set(float64(n))
		}
		if n > 0 {
			log.WarnContext(ctx, "partition_default_rows", slog.String("table", table), slog.Int64("rows", n),
				slog.String("why", "rows whose key names no time stay in the default partition, and a failed creation leaves rows there for the next run"))
		}
	}

	cutoff := now.Add(-cfg.Retention)
	reason := expiredError(cfg.Retention)
	for {
		batch, err := m.deps.Store.ExpireDeliveries(ctx, cutoff, reason, cfg.batch())
		m.expired(ctx, batch)
		rep.Expired = append(rep.Expired, batch...)
		if err != nil {
			errs = append(errs, err)
			break
		}
		if len(batch) < cfg.batch() {
			break
		}
	}
	// A key must not outlive its message.
	if rep.Keys, err = m.deps.Store.ExpireIdempotencyKeys(ctx, now.Add(-min(IdempotencyWindow, cfg.Retention)), cfg.batch()); err != nil {
		errs = append(errs, err)
	}
	rep.Dropped, err = m.deps.Store.RetirePartitions(ctx, cutoff, now.Add(-cfg.PayloadRetention), reason)
	for _, c := range rep.Dropped {
		// Deliveries that committed unfinished after the expiry pass, made
		// expired by the drop that held their partition.
		m.expired(ctx, c.Expired)
		rep.Expired = append(rep.Expired, c.Expired...)
		log.InfoContext(ctx, "partition_dropped", slog.String("table", c.Parent), slog.String("partition", c.Name), slog.Time("to", c.To))
		if m.deps.Metrics != nil {
			m.deps.Metrics.Dropped.WithLabelValues(c.Parent).Inc()
		}
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("drop partitions: %w", err))
	}
	if rep.History, err = m.deps.Store.PruneHistory(ctx, now.Add(-cfg.HistoryRetention), cfg.batch()); err != nil {
		errs = append(errs, err)
	}
	if m.deps.Metrics != nil {
		if parts, err := m.deps.Store.Partitions(ctx); err != nil {
			errs = append(errs, err)
		} else {
			counts := map[string]int{"messages": 0, "message_payloads": 0, "deliveries": 0, "delivery_attempts": 0}
			for _, p := range parts {
				counts[p.Parent]++
			}
			for table, n := range counts {
				m.deps.Metrics.Partitions.WithLabelValues(table).Set(float64(n))
			}
		}
	}
	return errors.Join(errs...)
}
