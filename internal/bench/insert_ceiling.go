package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
)

// S0i: bare River inserting jobs the way the api does and working them.

// insertArgs is a no-op job whose args are the size of a delivery job's
// (delivery, message and endpoint ids, the event type, the series).
type insertArgs struct {
	DeliveryID string `json:"delivery_id"`
	MessageID  string `json:"message_id"`
	EndpointID string `json:"endpoint_id"`
	EventType  string `json:"event_type"`
	Series     int    `json:"series"`
}

func (insertArgs) Kind() string { return "bench_insert_noop" }

// insertWorker counts the jobs it has worked.
type insertWorker struct {
	river.WorkerDefaults[insertArgs]
	n atomic.Int64
}

func (w *insertWorker) Work(context.Context, *river.Job[insertArgs]) error {
	w.n.Add(1)
	return nil
}

const (
	// insertGroups is how many group transactions insert at once: two,
	// one more than the api's MessageCommitter commits at once, so the
	// ceiling is not held down by one transaction's commit latency.
	insertGroups = 2
	// insertGroupJobs is the jobs in one group: S1's groups of about 3
	// messages fanned out to 10 endpoints each.
	insertGroupJobs = 30
)

// runS0i measures the ceiling of insert-and-work: a River client with the
// dispatcher's settings works no-op jobs while insertGroups goroutines
// insert them as the api's group commit does, insertGroupJobs per
// transaction (BEGIN, InsertManyTx, COMMIT), as long as fewer than the
// closed loop's bound are inserted and not yet worked. Its rate is the
// jobs worked over the measured window, like S1's deliveries.
func runS0i(ctx context.Context, b *bench) (*scenarioResult, error) {
	res := &scenarioResult{
		Layout: fmt.Sprintf("no-op jobs with a delivery job's args on the deliver queue, inserted while they are worked: %d goroutines, %d jobs per transaction (BEGIN, InsertManyTx, COMMIT)",
			insertGroups, insertGroupJobs),
		Load:     fmt.Sprintf("closed loop: inserts go on while fewer than %d jobs are inserted and not yet worked; %s warm-up, %s measured", b.plan.maxOutstanding, b.plan.warmup, b.plan.s1Measure),
		Settings: b.river.env(),
	}
	s := &stage{b: b, name: "s0i", db: "bench_s0i", clock: newClock()}
	defer s.close()
	var err error
	if s.pool, s.oid, err = b.pg.createDatabase(ctx, s.db); err != nil {
		return nil, err
	}
	// One pool as the dispatcher's role: River's inserts and its fetches and
	// completions are counted together as the dispatcher's statements.
	pool, err := store.OpenPool(ctx, store.PoolConfig{URL: b.pg.url(roleDispatcher, s.db), MaxConns: int32(b.river.DBMaxConns + insertGroups), ApplicationName: "bench-s0i"})
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	worker := &insertWorker{}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := b.river.bareClient(pool, workers)
	if err != nil {
		return nil, err
	}
	if err := client.Start(ctx); err != nil {
		return nil, fmt.Errorf("start river: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	}()

	pr, err := s.begin(ctx, 250*time.Millisecond)
	if err != nil {
		return nil, err
	}
	var inserted atomic.Int64
	var insertErr error
	var errOnce sync.Once
	lctx, cancel := context.WithTimeout(ctx, b.plan.warmup+b.plan.s1Measure)
	defer cancel()
	var wg sync.WaitGroup
	var groups atomic.Int64
	for g := range insertGroups {
		wg.Go(func() {
			seq := 0
			for lctx.Err() == nil {
				if inserted.Load()-worker.n.Load() >= b.plan.maxOutstanding {
					time.Sleep(time.Millisecond) // the closed loop's bound: wait for the workers
					continue
				}
				params := make([]river.InsertManyParams, insertGroupJobs)
				for i := range params {
					seq++
					params[i] = river.InsertManyParams{Args: insertArgs{
						DeliveryID: fmt.Sprintf("dlv_%02d%024d", g, seq), MessageID: fmt.Sprintf("msg_%02d%024d", g, seq/10),
						EndpointID: fmt.Sprintf("ep_%026d", seq%1000), EventType: "bench.event", Series: 1,
					}, InsertOpts: &river.InsertOpts{Queue: delivery.QueueDeliver}}
				}
				err := pgx.BeginFunc(lctx, pool, func(tx pgx.Tx) error {
					_, err := client.InsertManyTx(lctx, tx, params)
					return err
				})
				if err != nil {
					if lctx.Err() == nil {
						errOnce.Do(func() { insertErr = err })
						cancel()
					}
					return
				}
				inserted.Add(insertGroupJobs)
				groups.Add(1)
			}
		})
	}
	t0 := s.clock.now()
	var atWarm, atEnd int64
	warm := time.NewTimer(b.plan.warmup)
	select {
	case <-warm.C:
		atWarm = worker.n.Load()
	case <-lctx.Done():
	}
	<-lctx.Done()
	atEnd = worker.n.Load()
	t1 := s.clock.now()
	wg.Wait()
	// Drain what is left so the probe counts every inserted job worked.
	deadline := time.Now().Add(b.plan.drain)
	for worker.n.Load() < inserted.Load() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond) // polling a counter of the in-process client
	}
	if err := pr.end(ctx, res, worker.n.Load()); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if insertErr != nil {
		return nil, fmt.Errorf("insert jobs: %w", insertErr)
	}
	measured := (t1 - t0 - b.plan.warmup).Seconds()
	if atWarm == 0 || measured <= 0 || atEnd <= atWarm {
		return nil, fmt.Errorf("no jobs worked in the measured window (%d inserted, %d worked)", inserted.Load(), worker.n.Load())
	}
	res.Deliveries = int(atEnd - atWarm)
	res.MeasuredS = round1(measured)
	res.DeliveriesPerS = round1(float64(atEnd-atWarm) / measured)
	res.Drained = worker.n.Load() >= inserted.Load()
	res.Extra = map[string]any{
		"jobs_inserted":    inserted.Load(),
		"jobs_worked":      worker.n.Load(),
		"insert_groups":    groups.Load(),
		"jobs_per_group":   insertGroupJobs,
		"groups_in_flight": insertGroups,
		"max_outstanding":  b.plan.maxOutstanding,
	}
	res.DispatcherRSSMB = 0
	return res, nil
}
