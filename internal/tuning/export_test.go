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
		out, used, err = t.pass(ctx, class, since, until, false, true)
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

// ActiveQuiet is the quiet time of segs (in time order) with traffic in
// rows (in time order), from since, counted a row at a time: the minutes
// with at least one row, each intersected with the quiet segments.
func ActiveQuiet(rows []replay.Row, segs []Segment, since time.Time) time.Duration {
	var total time.Duration
	base := since.UnixNano()
	last, j := int64(-1), 0
	for _, r := range rows {
		m := (int64(r.TS) - base) / int64(time.Minute)
		if m == last || int64(r.TS) < base {
			continue
		}
		last = m
		from := time.Unix(0, base+m*int64(time.Minute))
		to := from.Add(time.Minute)
		for j < len(segs) && !segs[j].To.After(from) {
			j++
		}
		for k := j; k < len(segs) && segs[k].From.Before(to); k++ {
			if segs[k].Incident != nil {
				continue
			}
			lo, hi := segs[k].From, segs[k].To
			if lo.Before(from) {
				lo = from
			}
			if hi.After(to) {
				hi = to
			}
			total += hi.Sub(lo)
		}
	}
	return total
}
