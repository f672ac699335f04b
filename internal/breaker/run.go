package breaker

import "time"

// Run summarises a batch of outcomes, in order, as far as the consecutive
// count is concerned, so that outcomes flushed in batches move a breaker
// exactly as recording them one at a time would. Runs form a monoid under
// Then with the zero Run as identity.
type Run struct {
	// Failures is the number of failures in the batch.
	Failures int
	// Successes is the number of successes in the batch.
	Successes int
	// Prefix is the number of failures before the first success.
	Prefix int
	// Max is the longest run of failures with no success between them.
	Max int
	// Suffix is the number of failures after the last success.
	Suffix int
	// Mixed reports whether the batch holds a success; without one, Prefix,
	// Max and Suffix all equal Failures.
	Mixed bool
}

// Add appends one outcome to r; ignore and auth_failure are skipped, as they
// never touch the consecutive count.
func (r *Run) Add(o Outcome) {
	switch o {
	case OutcomeSuccess:
		r.Successes++
		r.Mixed = true
		r.Suffix = 0
	case OutcomeFailure:
		r.Failures++
		if !r.Mixed {
			r.Prefix++
		}
		r.Suffix++
		r.Max = max(r.Max, r.Suffix)
	}
}

// Then returns the Run of r's outcomes followed by next's.
func (r Run) Then(next Run) Run {
	joined := Run{
		Failures:  r.Failures + next.Failures,
		Successes: r.Successes + next.Successes,
		Prefix:    r.Prefix,
		Max:       max(r.Max, next.Max, r.Suffix+next.Prefix),
		Suffix:    next.Suffix,
		Mixed:     r.Mixed || next.Mixed,
	}
	if !r.Mixed {
		joined.Prefix = r.Prefix + next.Prefix
	}
	if !next.Mixed {
		joined.Suffix = r.Suffix + next.Suffix
	}
	return joined
}

// ApplyRun applies a batch of closed-state outcomes admitted under generation
// gen to Consecutive, exactly as recording them one at a time would have, and
// then evaluates b at now. A consecutive breaker trips if the count would
// have reached ConsecutiveFailures at any point of the batch, even if a later
// success in the batch reset it. The batch's counts are not added to Window:
// the caller adds them to the shared buckets. A stale gen, or a breaker that
// is not closed, changes nothing.
func (b *Breaker) ApplyRun(c Config, now time.Time, gen int64, r Run, rnd func() float64) Result {
	if gen != b.Generation || b.State != StateClosed {
		return Result{}
	}
	start := b.Consecutive
	peak := start + r.Prefix
	if r.Mixed {
		peak = max(peak, r.Max)
		b.Consecutive = r.Suffix
	} else {
		b.Consecutive += r.Failures
	}
	if c.Trip == TripConsecutive && peak >= c.ConsecutiveFailures {
		// Recording one at a time would have tripped when the count reached
		// the threshold, and dropped the rest of the batch as stale.
		b.Consecutive = max(start, c.ConsecutiveFailures)
		return Result{Applied: true, Transition: b.open(c, now, ReasonConsecutiveFailures, rnd)}
	}
	return b.Evaluate(c, now, rnd)
}
