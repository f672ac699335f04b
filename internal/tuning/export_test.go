package tuning

import (
	"context"
	"time"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/replay"
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

// ReadLogs reads the logs of ids in [since, until) as a pass reads them.
func (t *Tuner) ReadLogs(ctx context.Context, ids []string, since, until time.Time) ([][]replay.Row, error) {
	logs, err := t.readLogs(ctx, ids, since, until, false, &spent{})
	if err != nil {
		return nil, err
	}
	out := make([][]replay.Row, len(logs))
	for i, l := range logs {
		out[i] = l.all()
	}
	return out, nil
}
