package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/trafficclass"
)

// ReclassifyArgs is the periodic job that re-evaluates the class of every
// endpoint whose traffic class is auto. River's leader enqueues periodic
// jobs, so it runs once fleet-wide per period.
type ReclassifyArgs struct{}

// Kind names the job kind.
func (ReclassifyArgs) Kind() string { return "reclassify" }

// Reclassifier measures and reclassifies endpoints.
type Reclassifier interface {
	ListClasses(ctx context.Context) ([]trafficclass.Class, error)
	AutoEndpointIDs(ctx context.Context, after string, limit int) ([]string, error)
	Reclassify(ctx context.Context, endpointID string, classes []trafficclass.Class) (store.Reclassification, error)
}

var _ Reclassifier = (*store.Store)(nil)

// ReclassifyWorker works ReclassifyArgs.
type ReclassifyWorker struct {
	river.WorkerDefaults[ReclassifyArgs]
	Store  Reclassifier
	Logger *slog.Logger
}

// Timeout allows a long pass over a large fleet.
func (w *ReclassifyWorker) Timeout(*river.Job[ReclassifyArgs]) time.Duration { return time.Hour }

// Work reclassifies every auto endpoint, logging each change; one endpoint's
// failure does not stop the pass.
func (w *ReclassifyWorker) Work(ctx context.Context, _ *river.Job[ReclassifyArgs]) error {
	classes, err := w.Store.ListClasses(ctx)
	if err != nil {
		return fmt.Errorf("load classes: %w", err)
	}
	var after string
	var seen, changed, failed int
	for {
		ids, err := w.Store.AutoEndpointIDs(ctx, after, 500)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			break
		}
		for _, id := range ids {
			seen++
			rc, err := w.Store.Reclassify(ctx, id, classes)
			if err != nil {
				failed++
				w.Logger.WarnContext(ctx, "reclassify_endpoint", slog.String("endpoint", id), slog.String("error", err.Error()))
				continue
			}
			if rc.Changed {
				changed++
				LogReclassified(ctx, w.Logger, rc)
			}
		}
		after = ids[len(ids)-1]
	}
	w.Logger.InfoContext(ctx, "reclassify_done", slog.Int("endpoints", seen), slog.Int("changed", changed), slog.Int("failed", failed))
	return nil
}

// LogReclassified logs one class change with its figures.
func LogReclassified(ctx context.Context, logger *slog.Logger, rc store.Reclassification) {
	logger.InfoContext(ctx, "endpoint_reclassified",
		slog.String("endpoint", rc.EndpointID),
		slog.String("old_class", rc.OldClass),
		slog.String("new_class", rc.NewClass),
		slog.Float64("quiet_rps", rc.Measurement.QuietRPS),
		slog.Float64("healthy_error_rate", rc.Measurement.HealthyErrorRate),
		slog.Int("history_minutes", rc.Measurement.Minutes),
		slog.String("reason", rc.Reason))
}
