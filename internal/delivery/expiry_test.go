package delivery_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
)

// retention is the workers' retention in these tests; their sender's
// timeout (setupOwnership) is 5 s, so a job may run up to 10 s.
const retention = time.Hour

// setupRetention is setupOwnership with retention configured, the
// worker's clock age past the delivery's creation, metrics and logs.
func setupRetention(t *testing.T, age time.Duration) (*ownershipBundle, *delivery.Metrics, *syncBuffer) {
	t.Helper()
	m := delivery.NewMetrics(nil, nil)
	logs := &syncBuffer{}
	b := setupOwnership(t, func(cfg *delivery.WorkerConfig, deps *delivery.WorkerDeps) {
		cfg.Retention = retention
		deps.Metrics = m
		deps.Logger = slog.New(slog.NewTextHandler(logs, nil))
		deps.Now = func() time.Time { return time.Now().Add(age) }
	})
	return b, m, logs
}

// TestFirstRunOfAnExpiredDeliverySendsNothing: retention made the
// delivery expired after River had handed its job to a worker (a running
// job is not cancelled): the job's first run must not send it.
func TestFirstRunOfAnExpiredDeliverySendsNothing(t *testing.T) {
	t.Parallel()
	b, _, _ := setupRetention(t, retention+time.Minute)
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE deliveries SET status = 'expired', last_error = 'expired: retention' WHERE id = $1`, b.delivery.ID)
	require.NoError(t, err)

	require.NoError(t, b.run(t, *b.delivery.JobID, 1))
	require.Zero(t, b.hits.Load(), "an expired delivery is never sent")
	d, err := b.st.GetDelivery(context.Background(), b.delivery.ID)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryExpired, d.Status)
}

// TestFirstRunNearRetentionWaitsForTheMaintainer: a pending delivery that
// retention reaches within the job's timeout is not sent (the attempt
// could be under way as the maintainer expires it): the job snoozes past
// retention, the delivery stays pending for the maintainer to expire, and
// one further from retention than the longest job timeout (an endpoint's
// own timeout may reach MaxEndpointTimeout) is sent.
func TestFirstRunNearRetentionWaitsForTheMaintainer(t *testing.T) {
	t.Parallel()
	b, _, _ := setupRetention(t, retention-time.Second)
	err := b.run(t, *b.delivery.JobID, 1)
	var snooze *river.JobSnoozeError
	require.ErrorAs(t, err, &snooze)
	require.Greater(t, snooze.Duration, time.Second, "until retention has passed it")
	require.Zero(t, b.hits.Load())
	d, err := b.st.GetDelivery(context.Background(), b.delivery.ID)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryPending, d.Status)

	young, _, _ := setupRetention(t, retention-5*time.Minute)
	require.NoError(t, young.run(t, *young.delivery.JobID, 1))
	require.Equal(t, int64(1), young.hits.Load())
}

// TestJobOfAMissingDeliveryIsLoggedAndCounted: a job whose delivery row is
// gone (retention dropped its partition after making it expired) sends
// nothing, logs delivery_missing and counts it, on its first run as on a
// retry.
func TestJobOfAMissingDeliveryIsLoggedAndCounted(t *testing.T) {
	t.Parallel()
	for _, attempt := range []int{1, 2} {
		t.Run(fmt.Sprintf("attempt %d", attempt), func(t *testing.T) {
			t.Parallel()
			b, m, logs := setupRetention(t, retention+time.Minute)
			_, err := b.db.Pool.Exec(context.Background(), `DELETE FROM deliveries WHERE id = $1`, b.delivery.ID)
			require.NoError(t, err)
			require.NoError(t, b.run(t, *b.delivery.JobID, attempt))
			require.Zero(t, b.hits.Load())
			require.InDelta(t, 1, testutil.ToFloat64(m.Missing), 0)
			require.Contains(t, logs.String(), "msg=delivery_missing delivery="+b.delivery.ID)
		})
	}
}
