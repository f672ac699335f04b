package tuning

import (
	"context"
	"time"

	"github.com/hookd/hookd/internal/breaker"
)

// PassDetail runs a pass like Pass and also returns the configs it ranked
// and the segments it replayed, by endpoint.
func (t *Tuner) PassDetail(ctx context.Context, class string, since, until time.Time) (Recommendation, []breaker.Config, map[string][]Segment, error) {
	var (
		out  Recommendation
		used *passUsed
	)
	err := t.deps.Store.WithTuningLock(ctx, class, func(ctx context.Context) error {
		var err error
		out, used, err = t.pass(ctx, class, since, until, false)
		return err
	})
	if used == nil {
		return out, nil, nil, err
	}
	return out, used.configs, used.segments, err
}
