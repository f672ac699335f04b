package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestQueueStatsCountUnfinishedJobsAndTheBacklogAge: the deliver queue's
// unfinished deliveries and jobs by state, and the backlog's age.
func TestQueueStatsCountUnfinishedJobsAndTheBacklogAge(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()

	st, err := s.QueueStats(ctx, "deliver")
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"available": 0, "pending": 0, "retryable": 0, "running": 0, "scheduled": 0}, st.Depth)
	require.Equal(t, st.Depth, st.Jobs)
	require.Zero(t, st.OldestAvailable, "an empty queue has no backlog")

	insert := func(queue, state string, priority int, scheduledAgo time.Duration) {
		t.Helper()
		_, err := b.db.Pool.Exec(ctx, `
			INSERT INTO river_job (args, kind, max_attempts, queue, state, priority, scheduled_at, finalized_at)
			VALUES ('{}', 'deliver', 25, $1, $2::river_job_state, $3, now() - $4::interval,
				CASE WHEN $2 IN ('completed', 'cancelled', 'discarded') THEN now() END)`,
			queue, state, priority, scheduledAgo.String())
		require.NoError(t, err)
	}
	insert("deliver", "available", 1, 40*time.Second)
	insert("deliver", "available", 2, 90*time.Second) // the oldest, at another priority
	insert("deliver", "available", 1, 5*time.Second)
	insert("deliver", "scheduled", 1, -time.Minute)
	insert("deliver", "running", 1, 10*time.Minute)
	insert("deliver", "retryable", 1, -time.Second)
	insert("deliver", "completed", 1, time.Hour)
	insert("deliver", "discarded", 1, time.Hour)
	insert("default", "available", 1, time.Hour) // another queue
	// Message jobs count their deliveries, in each version's shape.
	_, err = b.db.Pool.Exec(ctx, `
		INSERT INTO river_job (args, kind, max_attempts, queue, state, priority, scheduled_at)
		VALUES ('{"v":2,"endpoints":["ep_1","ep_2","ep_3"]}', 'deliver_message', 25, 'deliver', 'available', 1, now()),
			('{"deliveries":[{"id":"dlv_1","endpoint_id":"ep_1"},{"id":"dlv_2","endpoint_id":"ep_2"}]}', 'deliver_message', 25, 'deliver', 'scheduled', 1, now() + interval '1 minute')`)
	require.NoError(t, err)

	st, err = s.QueueStats(ctx, "deliver")
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"available": 6, "pending": 0, "retryable": 1, "running": 1, "scheduled": 3}, st.Depth,
		"deliveries: a delivery job's one, a message job's each")
	require.Equal(t, map[string]int64{"available": 4, "pending": 0, "retryable": 1, "running": 1, "scheduled": 2}, st.Jobs)
	require.InDelta(t, 90, st.OldestAvailable.Seconds(), 5, "the oldest available job of the queue, whatever its priority")
}
