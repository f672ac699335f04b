package delivery_test

import (
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
)

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
