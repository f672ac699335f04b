// Package breaker owns the circuit-breaker state machine of one endpoint: its
// configuration, the time-bucketed rolling window of outcomes, and the pure
// transitions (state, outcome, time, random source) -> state shared by the
// live dispatcher and the offline replay tool. It does no I/O, reads no clock
// and draws no global randomness: every instant and random value is passed in,
// so the same inputs always give the same breaker.
package breaker
