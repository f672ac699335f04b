package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
)

// S0: bare River.

type noopArgs struct{}

func (noopArgs) Kind() string { return "bench_noop" }

// noopWorker does nothing and notes when the 10%, 90% and last jobs ran.
type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	total    int64
	clock    *clock
	n        atomic.Int64
	p10, p90 atomic.Int64 // clock offsets, ns
	done     chan struct{}
}

func (w *noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	switch n := w.n.Add(1); n {
	case w.total / 10:
		w.p10.Store(int64(w.clock.now()))
	case w.total * 9 / 10:
		w.p90.Store(int64(w.clock.now()))
	case w.total:
		close(w.done)
	}
	return nil
}

// runS0 measures bare River: a client in this process with the
// dispatcher's settings (pool size, workers on the deliver queue plus the
// default queue's 10, fetch cooldown and poll interval, retention) works
// no-op jobs inserted beforehand with InsertManyFast. The rate is taken
// between the 10% and the 90% job, leaving out start-up and the tail.
func runS0(ctx context.Context, b *bench) (*scenarioResult, error) {
	res := &scenarioResult{
		Layout:   fmt.Sprintf("%d no-op jobs on the deliver queue, inserted with InsertManyFast before the client starts", b.plan.s0Jobs),
		Load:     "River client in the bench process with the dispatcher's settings; rate between the 10% and the 90% job",
		Settings: b.river.env(),
	}
	s := &stage{b: b, name: "s0", db: "bench_s0", clock: newClock()}
	defer s.close()
	var err error
	if s.pool, s.oid, err = b.pg.createDatabase(ctx, s.db); err != nil {
		return nil, err
	}
	pool, err := store.OpenPool(ctx, store.PoolConfig{URL: b.pg.url(roleDispatcher, s.db), MaxConns: int32(b.river.DBMaxConns), ApplicationName: "bench-s0"})
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	worker := &noopWorker{total: int64(b.plan.s0Jobs), clock: s.clock, done: make(chan struct{})}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := b.river.bareClient(pool, workers)
	if err != nil {
		return nil, err
	}
	insertStart := time.Now()
	const batch = 10_000
	for left := b.plan.s0Jobs; left > 0; left -= batch {
		params := make([]river.InsertManyParams, min(left, batch))
		for i := range params {
			params[i] = river.InsertManyParams{Args: noopArgs{}, InsertOpts: &river.InsertOpts{Queue: delivery.QueueDeliver}}
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return nil, fmt.Errorf("insert no-op jobs: %w", err)
		}
	}
	insertRate := float64(b.plan.s0Jobs) / time.Since(insertStart).Seconds()

	pr, err := s.begin(ctx, 250*time.Millisecond)
	if err != nil {
		return nil, err
	}
	t0 := s.clock.now()
	if err := client.Start(ctx); err != nil {
		pr.stop()
		return nil, fmt.Errorf("start river: %w", err)
	}
	select {
	case <-worker.done:
	case <-time.After(3 * time.Minute):
	case <-ctx.Done():
	}
	t1 := s.clock.now()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	stopErr := client.Stop(sctx)
	cancel()
	if err := pr.end(ctx, res, worker.n.Load()); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if stopErr != nil {
		return nil, fmt.Errorf("stop river: %w", stopErr)
	}
	// The rate is taken between the 10% and the 90% job: on a machine
	// busy with other work the tail may not have run within the 3 minutes.
	if worker.p90.Load() == 0 {
		return nil, fmt.Errorf("only %d of %d no-op jobs ran in 3 minutes", worker.n.Load(), worker.total)
	}
	span := time.Duration(worker.p90.Load() - worker.p10.Load())
	res.Deliveries = int(worker.total)
	res.MeasuredS = round1(span.Seconds())
	res.DeliveriesPerS = round1(float64(worker.total*8/10) / span.Seconds())
	res.Extra = map[string]any{
		"jobs":                   worker.total,
		"jobs_run":               worker.n.Load(),
		"all_jobs_s":             round2((t1 - t0).Seconds()),
		"all_jobs_per_s":         round1(float64(worker.total) / (t1 - t0).Seconds()),
		"insert_many_fast_per_s": round1(insertRate),
	}
	// The bench process is the River client here.
	res.DispatcherRSSMB = 0
	return res, nil
}

// bareClient is a River client in the bench process with the dispatcher's
// queue settings and workers: the ceilings S0 and S0i measure River alone.
func (rs riverSettings) bareClient(pool *pgxpool.Pool, workers *river.Workers) (*river.Client[pgx.Tx], error) {
	cooldown, _ := time.ParseDuration(rs.FetchCooldown)
	poll, _ := time.ParseDuration(rs.FetchPollInterval)
	retention, _ := time.ParseDuration(rs.JobRetention)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:                      slog.New(slog.DiscardHandler),
		Workers:                     workers,
		Queues:                      map[string]river.QueueConfig{delivery.QueueDeliver: {MaxWorkers: rs.Workers}, river.QueueDefault: {MaxWorkers: 10}},
		FetchCooldown:               cooldown,
		FetchPollInterval:           poll,
		CompletedJobRetentionPeriod: retention,
	})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	return client, nil
}
