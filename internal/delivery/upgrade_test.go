package delivery_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
)

// nextVersionArgs are a message job's arguments as a next version of
// hookd might write them: version 3, with a field this version does not
// know.
type nextVersionArgs struct {
	V         int      `json:"v"`
	MessageID string   `json:"message_id"`
	EventType string   `json:"event_type"`
	Endpoints []string `json:"endpoints"`
	Hosts     []string `json:"hosts"`
}

func (nextVersionArgs) Kind() string { return delivery.MessageArgs{}.Kind() }

func (nextVersionArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: delivery.QueueDeliver}
}

// nextVersionWorker stands in for a next version's dispatcher: it runs
// version 3 jobs (here by the same path, the new field ignored) and
// every older one.
type nextVersionWorker struct {
	*delivery.MessageWorker
	mu  sync.Mutex
	ran map[int64]bool
}

func (n *nextVersionWorker) Work(ctx context.Context, job *river.Job[delivery.MessageArgs]) error {
	n.mu.Lock()
	n.ran[job.ID] = true
	n.mu.Unlock()
	if job.Args.V == 3 {
		job.Args.V = delivery.MessageArgsVersion
	}
	return n.MessageWorker.Work(ctx, job)
}

func (n *nextVersionWorker) hasRun(id int64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ran[id]
}

// TestRollingUpgradeTwoVersionsOneDatabase: this version's dispatcher and
// a next version's share one database, as in a rolling upgrade (or a
// rollback, this version being the older). This version runs the jobs it
// knows and leaves a newer version's job untouched (snoozed, counted);
// the next version's dispatcher runs it. Nothing is discarded, completed
// unsent or sent twice.
func TestRollingUpgradeTwoVersionsOneDatabase(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := map[string]int{} // webhook-id: requests
	metrics := delivery.NewMetrics(nil, nil)
	b := setupMessageJob(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get("webhook-id")+" "+r.URL.Path]++
		mu.Unlock()
	}, delivery.WorkerConfig{UnknownJobWait: 200 * time.Millisecond}, delivery.WorkerDeps{Metrics: metrics})
	ctx := context.Background()
	b.endpoint(t, "/a", store.Endpoint{})
	b.endpoint(t, "/b", store.Endpoint{})

	inserter, err := river.NewClient(riverpgxv5.New(b.db.Pool), &river.Config{})
	require.NoError(t, err)
	var known []store.Message
	for range 3 {
		m, _, err := b.st.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{"n":1}`)},
			&delivery.Enqueuer{Client: inserter})
		require.NoError(t, err)
		known = append(known, m)
	}
	// A message the next version's api queued.
	newer, _, err := b.st.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "a", Payload: json.RawMessage(`{"n":2}`)}, &countingEnqueuer{})
	require.NoError(t, err)
	args := nextVersionArgs{V: 3, MessageID: newer.ID, EventType: "a", Hosts: []string{"x"}}
	for _, d := range newer.Deliveries {
		args.Endpoints = append(args.Endpoints, d.EndpointID)
	}
	res, err := inserter.Insert(ctx, args, nil)
	require.NoError(t, err)
	newerJob := res.Job.ID
	_, err = b.db.Pool.Exec(ctx, `UPDATE deliveries SET job_id = $2 WHERE message_id = $1`, newer.ID, newerJob)
	require.NoError(t, err)

	start := func(worker river.Worker[delivery.MessageArgs]) {
		workers := river.NewWorkers()
		river.AddWorker(workers, worker)
		c, err := river.NewClient(riverpgxv5.New(b.db.Pool), &river.Config{
			Queues:            map[string]river.QueueConfig{delivery.QueueDeliver: {MaxWorkers: 4}},
			Workers:           workers,
			FetchPollInterval: 100 * time.Millisecond,
			Logger:            slog.New(slog.DiscardHandler),
		})
		require.NoError(t, err)
		require.NoError(t, c.Start(ctx))
		t.Cleanup(func() { require.NoError(t, c.Stop(context.Background())) })
	}
	status := func(m store.Message) []string {
		var out []string
		for _, d := range m.Deliveries {
			out = append(out, b.delivery(t, d.ID).Status)
		}
		return out
	}
	delivered := []string{store.DeliveryDelivered, store.DeliveryDelivered}

	// This version alone: it delivers what it knows and leaves the rest.
	start(b.mw)
	require.Eventually(t, func() bool {
		for _, m := range known {
			if !slices.Equal(status(m), delivered) {
				return false
			}
		}
		return testutil.ToFloat64(metrics.JobsLeft) >= 1
	}, time.Minute, 20*time.Millisecond, "this version delivers its jobs and leaves the newer one")
	for _, d := range newer.Deliveries {
		got := b.delivery(t, d.ID)
		require.Zero(t, got.AttemptCount, "left untouched")
		require.NotEqual(t, store.DeliveryDelivered, got.Status)
	}
	var state string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, newerJob).Scan(&state))
	require.Contains(t, []string{"scheduled", "available", "running"}, state, "left for a dispatcher that can run it")

	// The next version joins: it runs the job this one left.
	next := &nextVersionWorker{MessageWorker: b.mw, ran: map[int64]bool{}}
	start(next)
	require.Eventually(t, func() bool { return slices.Equal(status(newer), delivered) },
		time.Minute, 20*time.Millisecond, "the next version delivers the newer job")
	require.True(t, next.hasRun(newerJob))
	require.Eventually(t, func() bool {
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, newerJob).Scan(&state))
		return state == "completed"
	}, time.Minute, 20*time.Millisecond)
	var lost int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state IN ('discarded', 'cancelled')`).Scan(&lost))
	require.Zero(t, lost, "no job discarded or cancelled")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 2*(len(known)+1), "every delivery sent")
	for k, n := range got {
		require.Equal(t, 1, n, "%s sent once", k)
	}
}
