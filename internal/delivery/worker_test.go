package delivery_test

import (
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
)

// TestNextRetryIsInRiversFuture: River schedules by this process's clock and
// rejects a retry time already past, so the worker's answer is a local time
// at least a little ahead, whatever the offset to the database clock.
func TestNextRetryIsInRiversFuture(t *testing.T) {
	t.Parallel()
	local := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name     string
		dbOffset time.Duration
		rnd      float64
		attempt  int
		want     time.Duration
	}{
		{"zero jitter: the floor", 0, 0, 1, 20 * time.Millisecond},
		{"database clock an hour ahead", time.Hour, 1, 1, 100 * time.Millisecond},
		{"database clock behind", -time.Hour, 1, 2, 300 * time.Millisecond},
		{"schedule exhausted: the last step", 0, 1, 9, 400 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := delivery.NewWorker(delivery.WorkerConfig{
				Schedule: delivery.Schedule{0, 100 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond},
			}, delivery.WorkerDeps{
				Sender:   delivery.NewSender(delivery.SenderConfig{Timeout: time.Second}),
				Now:      func() time.Time { return local.Add(tt.dbOffset) },
				LocalNow: func() time.Time { return local },
				Rand:     func() float64 { return tt.rnd },
			})
			job := &river.Job[delivery.DeliverArgs]{JobRow: &rivertype.JobRow{ID: 1, Attempt: tt.attempt}}
			require.Equal(t, local.Add(tt.want), w.NextRetry(job))
		})
	}
}

// TestNextRetryNeverInThePast: River replaces a next retry before its own
// now with its default policy (attempt^4 seconds), so a jittered step that
// ended before the attempt did must come back as now, not as that past time.
func TestNextRetryNeverInThePast(t *testing.T) {
	t.Parallel()
	past := time.Now().Add(-time.Hour)
	w := delivery.NewWorker(delivery.WorkerConfig{Schedule: delivery.Schedule{0, 0, 0}}, delivery.WorkerDeps{
		Sender: delivery.NewSender(delivery.SenderConfig{Timeout: time.Second}),
		Now:    func() time.Time { return past },
		Rand:   func() float64 { return 0 },
	})
	for attempt := 1; attempt <= 4; attempt++ {
		before := time.Now()
		got := w.NextRetry(&river.Job[delivery.DeliverArgs]{JobRow: &rivertype.JobRow{ID: int64(attempt), Attempt: attempt}})
		require.False(t, got.Before(before), "attempt %d: next retry %s is before now %s", attempt, got, before)
		require.WithinDuration(t, time.Now(), got, time.Second)
	}
}
