package breaker_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/hookd/hookd/internal/breaker"
)

func runOf(outcomes []breaker.Outcome) breaker.Run {
	var r breaker.Run
	for _, o := range outcomes {
		r.Add(o)
	}
	return r
}

func TestRunAdd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		outcomes string
		want     breaker.Run
	}{
		{"", breaker.Run{}},
		{"IA", breaker.Run{}},
		{"FFF", breaker.Run{Failures: 3, Prefix: 3, Max: 3, Suffix: 3}},
		{"S", breaker.Run{Successes: 1, Mixed: true}},
		{"FFSFFFSF", breaker.Run{Failures: 6, Successes: 2, Prefix: 2, Max: 3, Suffix: 1, Mixed: true}},
		{"FIFAS", breaker.Run{Failures: 2, Successes: 1, Prefix: 2, Max: 2, Mixed: true}},
		{"SFFFFS", breaker.Run{Failures: 4, Successes: 2, Max: 4, Mixed: true}},
	}
	for _, tt := range tests {
		t.Run(tt.outcomes, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, runOf(parseOutcomes(t, tt.outcomes)))
		})
	}
}

func TestRunThen(t *testing.T) {
	t.Parallel()
	tests := []struct {
		first, next string
	}{
		{"", "FFS"},
		{"FFS", ""},
		{"FF", "FF"},
		{"SFF", "FFS"},
		{"FF", "SFFFS"},
		{"SFFFS", "FF"},
		{"SF", "FS"},
	}
	for _, tt := range tests {
		t.Run(tt.first+"+"+tt.next, func(t *testing.T) {
			t.Parallel()
			first := runOf(parseOutcomes(t, tt.first))
			next := runOf(parseOutcomes(t, tt.next))
			whole := runOf(parseOutcomes(t, tt.first+tt.next))
			require.Equal(t, whole, first.Then(next))
		})
	}
}

func outcomeSequence() *rapid.Generator[[]breaker.Outcome] {
	return rapid.SliceOfN(rapid.SampledFrom([]breaker.Outcome{
		breaker.OutcomeSuccess, breaker.OutcomeFailure, breaker.OutcomeFailure,
		breaker.OutcomeFailure, breaker.OutcomeIgnore, breaker.OutcomeAuthFailure,
	}), 0, 60)
}

// splitIntoBatches cuts outcomes into consecutive, possibly empty, batches.
func splitIntoBatches(t *rapid.T, outcomes []breaker.Outcome) [][]breaker.Outcome {
	var batches [][]breaker.Outcome
	for rest := outcomes; ; {
		n := rapid.IntRange(0, len(rest)).Draw(t, "batch")
		batches = append(batches, rest[:n])
		rest = rest[n:]
		if len(rest) == 0 {
			return batches
		}
	}
}

func TestRunIsAMonoid(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		outcomes := outcomeSequence().Draw(t, "outcomes")
		whole := runOf(outcomes)

		var folded breaker.Run
		var runs []breaker.Run
		for _, batch := range splitIntoBatches(t, outcomes) {
			runs = append(runs, runOf(batch))
			folded = folded.Then(runOf(batch))
		}
		require.Equal(t, whole, folded)

		// Folding from the right gives the same Run: Then is associative.
		var right breaker.Run
		for i := len(runs) - 1; i >= 0; i-- {
			right = runs[i].Then(right)
		}
		require.Equal(t, whole, right)
	})
}

// TestApplyRunMatchesSequentialRecord checks that a consecutive breaker fed
// outcomes in random batches through ApplyRun trips iff recording them one at
// a time trips, and otherwise ends with the same count.
func TestApplyRunMatchesSequentialRecord(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		c := consecutiveConfig(rapid.IntRange(1, 8).Draw(t, "consecutive_failures"))
		outcomes := outcomeSequence().Draw(t, "outcomes")
		now := epoch

		sequential := breaker.New(c)
		ticket := sequential.Allow(c, now).Ticket
		var seqTrip *breaker.Transition
		for _, o := range outcomes {
			if r := sequential.Record(c, now, ticket, o, noJitter); r.Transition != nil {
				seqTrip = r.Transition
			}
		}

		batched := breaker.New(c)
		var batchTrip *breaker.Transition
		for _, batch := range splitIntoBatches(t, outcomes) {
			r := batched.ApplyRun(c, now, ticket.Generation, runOf(batch), noJitter)
			if r.Transition != nil {
				require.Nil(t, batchTrip, "tripped twice")
				batchTrip = r.Transition
			}
		}

		require.Equal(t, seqTrip != nil, batchTrip != nil, "trip")
		if seqTrip != nil {
			// The window figures differ: ApplyRun leaves the window to the
			// caller, who adds the batch to the shared buckets.
			withoutWindow := *seqTrip
			withoutWindow.FailureRate, withoutWindow.Observations, withoutWindow.Failures = 0, 0, 0
			require.Equal(t, withoutWindow, *batchTrip)
		}
		require.Equal(t, sequential.State, batched.State)
		require.Equal(t, sequential.Generation, batched.Generation)
		require.Equal(t, sequential.Consecutive, batched.Consecutive)
		require.Equal(t, sequential.OpenUntil, batched.OpenUntil)
	})
}

func TestApplyRunDropsStaleGenerations(t *testing.T) {
	t.Parallel()
	c := consecutiveConfig(3)
	b := breaker.New(c)
	stale := b.Generation
	b.Reset(c, epoch)
	before := b
	r := b.ApplyRun(c, epoch, stale, runOf(parseOutcomes(t, "FFFF")), noJitter)
	require.Equal(t, breaker.Result{}, r)
	require.Equal(t, before, b)

	b.Isolate(c, epoch)
	before = b
	require.Equal(t, breaker.Result{}, b.ApplyRun(c, epoch, b.Generation, runOf(parseOutcomes(t, "FFFF")), noJitter))
	require.Equal(t, before, b, "only a closed breaker takes a run")
}

func TestApplyRunTripsOnAPeakInsideTheBatch(t *testing.T) {
	t.Parallel()
	c := consecutiveConfig(3)
	b := breaker.New(c)
	require.Nil(t, b.ApplyRun(c, epoch, 1, runOf(parseOutcomes(t, "SFF")), noJitter).Transition)
	require.Equal(t, 2, b.Consecutive)
	// F completes the run of three before the success resets the count.
	r := b.ApplyRun(c, epoch, 1, runOf(parseOutcomes(t, "FSF")), noJitter)
	require.Equal(t, breaker.ReasonConsecutiveFailures, r.Transition.Reason)
	require.Equal(t, 3, r.Transition.Consecutive)
	require.Equal(t, breaker.StateOpen, b.State)
}
