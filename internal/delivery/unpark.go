package delivery

import (
	"context"
	"log/slog"
	"time"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/store"
)

// ParkedStore finds and releases parked deliveries.
type ParkedStore interface {
	ParkedEndpoints(ctx context.Context, ids []string) ([]store.ParkedEndpoint, error)
	ReleaseParked(ctx context.Context, endpointID string, limit int, enq store.Enqueuer) (int, error)
}

var _ ParkedStore = (*store.Store)(nil)

// Unparker gives parked deliveries their jobs back. When an endpoint's
// breaker is closed it releases all of them, oldest first; when it could
// admit a probe (open past open_until, or half-open with no trial in
// flight) it releases the oldest one, which becomes the probe, so an
// endpoint whose whole backlog is parked still gets probed without new
// traffic. It runs a pass over every endpoint with parked deliveries every
// interval, and a pass over one endpoint when Kick names it (the breaker
// gate kicks on every transition and trial it sees). Concurrent unparkers
// in other processes never release a delivery twice.
type Unparker struct {
	store    ParkedStore
	enq      store.Enqueuer
	interval time.Duration
	logger   *slog.Logger
	metrics  *Metrics
	kick     chan string
}

// releaseBatch is how many deliveries one release transaction queues.
const releaseBatch = 500

// NewUnparker returns an unparker; call Run.
func NewUnparker(st ParkedStore, enq store.Enqueuer, interval time.Duration, logger *slog.Logger, metrics *Metrics) *Unparker {
	if interval <= 0 {
		interval = 2 * time.Second
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Unparker{store: st, enq: enq, interval: interval, logger: logger, metrics: metrics, kick: make(chan string, 1024)}
}

// Kick asks for a pass over one endpoint soon. It never blocks.
func (u *Unparker) Kick(endpointID string) {
	select {
	case u.kick <- endpointID:
	default: // the periodic pass catches up
	}
}

// Run passes until ctx ends.
func (u *Unparker) Run(ctx context.Context) {
	t := time.NewTicker(u.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			u.Pass(ctx, nil)
		case id := <-u.kick:
			u.Pass(ctx, []string{id})
		}
	}
}

// Pass releases what may go now, for the endpoints in ids (all when nil).
func (u *Unparker) Pass(ctx context.Context, ids []string) {
	list, err := u.store.ParkedEndpoints(ctx, ids)
	if err != nil {
		if ctx.Err() == nil {
			u.logger.Warn("unpark_pass", slog.String("error", err.Error()))
		}
		return
	}
	for _, pe := range list {
		switch pe.Breaker.EffectiveState(pe.Now) {
		case breaker.StateClosed:
			u.release(ctx, pe.EndpointID, pe.Parked)
		case breaker.StateHalfOpen:
			if !pe.TrialInFlight {
				u.release(ctx, pe.EndpointID, 1)
			}
		}
	}
}

// release queues up to n parked deliveries of one endpoint.
func (u *Unparker) release(ctx context.Context, endpointID string, n int) {
	released := 0
	for released < n && ctx.Err() == nil {
		got, err := u.store.ReleaseParked(ctx, endpointID, min(n-released, releaseBatch), u.enq)
		if err != nil {
			if ctx.Err() == nil {
				u.logger.Warn("unpark_release", slog.String("endpoint", endpointID), slog.String("error", err.Error()))
			}
			break
		}
		if got == 0 {
			break
		}
		released += got
	}
	if released == 0 {
		return
	}
	if u.metrics != nil {
		u.metrics.Unparked.Add(float64(released))
	}
	u.logger.Info("deliveries_unparked", slog.String("endpoint", endpointID), slog.Int("released", released))
}
