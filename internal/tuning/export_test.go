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
	out, used, err := t.passUsed(ctx, class, since, until)
	if used == nil {
		return out, nil, nil, err
	}
	return out, used.configs, used.segments, err
}

// PassHeld runs a pass like Pass and also returns the most rows of the log
// it held at once.
func (t *Tuner) PassHeld(ctx context.Context, class string, since, until time.Time) (Recommendation, int, error) {
	out, used, err := t.passUsed(ctx, class, since, until)
	if used == nil {
		return out, 0, err
	}
	return out, used.held, err
}

func (t *Tuner) passUsed(ctx context.Context, class string, since, until time.Time) (Recommendation, *passUsed, error) {
	var (
		out  Recommendation
		used *passUsed
	)
	err := t.deps.Store.WithTuningLock(ctx, class, func(ctx context.Context) error {
		var err error
		out, used, err = t.pass(ctx, class, since, until, false)
		return err
	})
	return out, used, err
}

// ReadLogs reads the logs of ids in [since, until) as a pass reads them.
func (t *Tuner) ReadLogs(ctx context.Context, ids []string, since, until time.Time) ([][]replay.Row, error) {
	out := make([][]replay.Row, len(ids))
	for i, id := range ids {
		var err error
		if out[i], err = t.readLog(ctx, id, since, until, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ActiveQuiet is activeQuiet: the quiet time of segs with traffic in
// rows.
func ActiveQuiet(rows []replay.Row, segs []Segment, since time.Time) time.Duration {
	return activeQuiet(rows, segs, since)
}
