package trafficclass_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/hookd/hookd/internal/trafficclass"
)

// Example classifies an endpoint from two weeks of measured traffic, as the
// reclassification job does for an endpoint whose class is "auto", and
// prints the class it lands in as the API shows it.
func Example() {
	// Per-minute request counts: about 48 a minute, never fewer than 45.
	perMinute := make([]float64, 14*24*60)
	for i := range perMinute {
		perMinute[i] = float64(45 + i%7)
	}
	// 5-minute failure rates outside breaker-open periods.
	fiveMinute := []float64{0.01, 0.02, 0.015, 0.03}

	m := trafficclass.Measure(perMinute, fiveMinute)
	name, reason := trafficclass.Classify(m, trafficclass.Builtins())
	fmt.Println(name)
	fmt.Println(reason)

	c, _ := trafficclass.Builtin(name)
	out, _ := json.MarshalIndent(c, "", "  ")
	fmt.Println(string(out))
	// Output:
	// low
	// quiet-time volume 0.75 rps is in low's range [0.0167, 1) rps
	// {
	//   "name": "low",
	//   "trip": "rate",
	//   "failure_rate_threshold": 0.6,
	//   "window": "10m",
	//   "min_throughput": 10,
	//   "consecutive_failures": 5,
	//   "open_duration": "30s",
	//   "open_jitter": 0.3,
	//   "open_backoff": 2,
	//   "max_open_duration": "2m",
	//   "half_open_trials": 3,
	//   "half_open_concurrency": 1,
	//   "enforce": true,
	//   "auth_disable_after": 10,
	//   "auth_disable_min_duration": "5m",
	//   "tenant_selectable": false,
	//   "auto_tune": "recommend",
	//   "tune_min_throughput_floor": 1,
	//   "tune_min_throughput_ceiling": 10000,
	//   "tune_failure_rate_floor": 0,
	//   "tune_failure_rate_ceiling": 1,
	//   "builtin": true
	// }
}

// ExampleDecode decodes a custom class the way a PUT does: omitted members
// take their defaults, and every bad member is reported at once by name.
func ExampleDecode() {
	c, err := trafficclass.Decode([]byte(`{"name": "batch-jobs", "window": "2m", "min_throughput": 30, "enforce": false}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(c.Name, c.Breaker.Window, c.Breaker.MinThroughput, c.Breaker.FailureRateThreshold, c.Enforce, c.AuthDisableAfter)

	_, err = trafficclass.Decode([]byte(`{"name": "batch-jobs", "window": 120, "half_open_trials": 0, "colour": "red"}`))
	fmt.Println(err)
	// Output:
	// batch-jobs 2m0s 30 0.5 false 10
	// decode traffic class: window: must be a duration string such as "30s"; half_open_trials: must be at least 1; colour: unknown field
}

// ExampleMinThroughputFor applies the rule to a busy endpoint (40 rps), a
// quiet one (0.01 rps, held at the floor) and the bottom of the high band.
func ExampleMinThroughputFor() {
	fmt.Println(trafficclass.MinThroughputFor(40, 30*time.Second, 20))
	fmt.Println(trafficclass.MinThroughputFor(0.01, 30*time.Second, 20)) // the floor
	fmt.Println(trafficclass.MinThroughputFor(20, 5*time.Second, 20))    // high
	// Output:
	// 600
	// 20
	// 50
}
