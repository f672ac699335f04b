package main

import (
	"context"
	"log/slog"
	"slices"
	"time"
)

// scenario is one named benchmark.
type scenario struct {
	name  string
	title string
	run   func(ctx context.Context, b *bench) (*scenarioResult, error)
	// faults is set when the receiver fails or hangs on purpose: a
	// duplicate there may be the at-least-once contract at work.
	faults bool
	// optIn keeps a scenario out of the full suite unless -only names it
	// (the smoke form runs it).
	optIn bool
}

// scenarios run in this order; targets compare them after all have run.
var scenarios = []scenario{
	{"s0", "S0 bare River no-op jobs (the ceiling)", runS0, false, false},
	{"s0i", "S0i River inserting jobs as the api does and working them (insert-and-work ceiling)", runS0i, false, false},
	{"s1", "S1 healthy fan-out, closed loop", runS1, false, false},
	{"s1rate", "S1 at a fixed offered rate (latency target)", runS1Rate, false, false},
	{"s2", "S2 breakers on vs off, alternated", runS2, false, false},
	{"s2s", "S2s shadow breakers of a tuning proposal on vs off, alternated", runS2s, false, false},
	{"s1trace", "S1 tracing off vs on (every span exported to a sink), alternated", runS1Trace, false, false},
	{"s3", "S3 hot endpoint beside the fan-out load", runS3, false, false},
	{"s4", "S4 head of line: a hanging endpoint gets 20% of messages", runS4, true, false},
	{"s4fifo", "S4fifo a stalled FIFO endpoint gets 20% of messages, against runs without it, alternated", runS4FIFO, true, false},
	{"s1filter", "S1filter accepted messages/s with every endpoint filtered vs none, alternated", runS1Filter, false, false},
	{"s5", "S5 half-open across two dispatchers", runS5, true, false},
	{"s6", "S6 10,000 endpoints", runS6, false, false},
	{"s11", "S11 wide fan-out: one tenant's 10,000 endpoints on one host, at a fixed rate", runS11, false, false},
	{"s12", "S12 each destination type (RabbitMQ, NATS, Redis, MQTT, Kafka, Pub/Sub) against HTTP: a backlog's drain and the breaker on a broker outage", runS12, true, false},
	{"s7", "S7 steady state under retention (RETENTION=3m, PARTITION_INTERVAL=1m)", runS7, false, false},
	{"s9", "S9 scale-out: 1, 2, 4 dispatchers and 2 api processes on one PostgreSQL", runS9, false, false},
	{"s10", "S10 partition maintainer restarted after 200 one-minute intervals down, under S1's half load", runS10, false, false},
	{"s13", "S13 S1rate's load behind a transaction held open 10 minutes (as a pg_dump holds one), against the same without it", runS13, false, true},
	{"s8", "S8 a month of history under S1's closed loop (make bench-month)", runS8, false, true},
	{"soak", "Soak: 30 minutes at a fixed rate under retention (make soak)", runSoak, false, true},
}

// runAll runs the selected scenarios in order; one that fails to run is
// recorded with its error and the rest still run.
func (b *bench) runAll(ctx context.Context) *results {
	res := newResults(ctx, b)
	for _, sc := range scenarios {
		if len(b.opts.only) > 0 && !slices.Contains(b.opts.only, sc.name) {
			continue
		}
		if len(b.opts.only) == 0 && sc.optIn && !b.opts.smoke {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		b.logger.Info("scenario_start", slog.String("scenario", sc.name), slog.String("title", sc.title))
		start := time.Now()
		b.receivers = nil
		r, err := sc.run(ctx, b)
		if r == nil {
			r = &scenarioResult{}
		}
		r.Name, r.Title, r.Faults = sc.name, sc.title, sc.faults
		for _, rcv := range b.receivers {
			r.Duplicates += rcv.duplicates()
		}
		res.Duplicates += r.Duplicates
		r.WallS = round1(time.Since(start).Seconds())
		if err != nil {
			r.Error = err.Error()
			b.logger.Error("scenario_failed", slog.String("scenario", sc.name), slog.String("error", err.Error()))
		} else {
			b.logger.Info("scenario_done", slog.String("scenario", sc.name), slog.Float64("deliveries_per_s", r.DeliveriesPerS),
				slog.Float64("p99_ms", r.LatencyP99Ms), slog.Int64("duplicates", r.Duplicates), slog.Float64("wall_s", r.WallS))
		}
		res.Scenarios = append(res.Scenarios, r)
	}
	return res
}
