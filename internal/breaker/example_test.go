package breaker_test

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hookd/hookd/internal/breaker"
)

// Example drives one breaker through failure, cool-off, a failed probe and
// recovery, with the clock and the random source under its control: three
// consecutive failures open it for five seconds, and one successful trial
// closes it.
func Example() {
	c := breaker.DefaultConfig()
	c.Trip = breaker.TripConsecutive
	c.ConsecutiveFailures = 3
	c.OpenDuration = 5 * time.Second
	c.MaxOpenDuration = 5 * time.Second
	c.OpenJitter = 0 // keeps the transcript exact; the default is 0.3
	c.HalfOpenTrials = 1
	if err := c.Validate(); err != nil {
		panic(err)
	}

	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rnd := rand.New(rand.NewPCG(1, 2)).Float64 // seeded: the same run every time
	b := breaker.New(c)

	requests := []struct {
		at           time.Duration
		dependencyUp bool
	}{
		{0, false}, {0, false}, {0, false}, {0, false}, {0, false},
		{5 * time.Second, false},
		{10 * time.Second, true},
		{10 * time.Second, true},
	}
	for i, r := range requests {
		now := start.Add(r.at)
		from := b.EffectiveState(now)
		note := "no call made"
		if d := b.Allow(c, now); d.Admission != breaker.Rejected {
			outcome := breaker.OutcomeFailure
			note = "call failed"
			if r.dependencyUp {
				outcome, note = breaker.OutcomeSuccess, "ok"
			}
			b.Record(c, now, d.Ticket, outcome, rnd)
		}
		label := fmt.Sprintf("t=%dms request %d", r.at.Milliseconds(), i+1)
		fmt.Printf("%-20s %-9s -> %-9s %s\n", label, from, b.EffectiveState(now), note)
	}
	fmt.Println("trips:", b.Trips, "generation:", b.Generation)

	// Output:
	// t=0ms request 1      closed    -> closed    call failed
	// t=0ms request 2      closed    -> closed    call failed
	// t=0ms request 3      closed    -> open      call failed
	// t=0ms request 4      open      -> open      no call made
	// t=0ms request 5      open      -> open      no call made
	// t=5000ms request 6   half_open -> open      call failed
	// t=10000ms request 7  half_open -> closed    ok
	// t=10000ms request 8  closed    -> closed    ok
	// trips: 2 generation: 6
}

// ExampleConfig_Validate shows that every bad field is reported at once, by
// its contract name.
func ExampleConfig_Validate() {
	c := breaker.DefaultConfig()
	c.Window = 0
	c.MinThroughput = 0
	fmt.Println(c.Validate())
	// Output:
	// window: must be positive; min_throughput: must be at least 1
}

// ExampleRun shows two batches of outcomes flushed separately tripping a
// consecutive breaker exactly where recording them one at a time would: the
// run of three failures spans the two batches.
func ExampleRun() {
	c := breaker.DefaultConfig()
	c.Trip = breaker.TripConsecutive
	c.ConsecutiveFailures = 3
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := breaker.New(c)
	gen := b.Allow(c, now).Ticket.Generation

	var first, second breaker.Run
	for _, o := range []breaker.Outcome{breaker.OutcomeSuccess, breaker.OutcomeFailure, breaker.OutcomeFailure} {
		first.Add(o)
	}
	for _, o := range []breaker.Outcome{breaker.OutcomeFailure, breaker.OutcomeSuccess} {
		second.Add(o)
	}
	b.ApplyRun(c, now, gen, first, nil)
	fmt.Println(b.State, b.Consecutive)
	r := b.ApplyRun(c, now, gen, second, nil)
	fmt.Println(b.State, r.Transition.Reason)
	// Output:
	// closed 2
	// open consecutive_failures
}
