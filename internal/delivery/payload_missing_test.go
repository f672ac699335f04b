package delivery_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
)

// payloadRetention is the workers' payload retention in these tests.
const payloadRetention = time.Hour

// setupMissingPayload is setupOwnership with payload retention configured,
// the worker's clock age past the message's acceptance, metrics, and the
// message's payload deleted as a payload partition's drop would.
func setupMissingPayload(t *testing.T, age time.Duration) (*ownershipBundle, *delivery.Metrics) {
	t.Helper()
	m := delivery.NewMetrics(nil, nil)
	b := setupOwnership(t, func(cfg *delivery.WorkerConfig, deps *delivery.WorkerDeps) {
		cfg.PayloadRetention = payloadRetention
		deps.Metrics = m
		deps.Now = func() time.Time { return time.Now().Add(age) }
	})
	_, err := b.db.Pool.Exec(context.Background(), `DELETE FROM message_payloads WHERE message_id = $1`, b.args.MessageID)
	require.NoError(t, err)
	return b, m
}

// TestMissingPayloadOfAYoungMessageIsRetried: a message younger than
// payload retention cannot have lost its payload to retention, so a worker
// that finds none sends nothing, leaves the delivery pending and returns an
// error River retries (counted); once the payload reads again, the retry
// delivers it.
func TestMissingPayloadOfAYoungMessageIsRetried(t *testing.T) {
	t.Parallel()
	b, m := setupMissingPayload(t, 0)
	job := *b.delivery.JobID

	err := b.run(t, job, 1)
	require.Error(t, err)
	var snooze *river.JobSnoozeError
	require.NotErrorAs(t, err, &snooze, "an error River retries with the next attempt, not a snooze")
	require.Contains(t, err.Error(), "payload missing")
	require.Zero(t, b.hits.Load(), "nothing was sent")
	require.InDelta(t, 1, testutil.ToFloat64(m.PayloadMissing), 0)
	require.InDelta(t, 0, testutil.ToFloat64(m.Expired.WithLabelValues(delivery.ExpiredPayload)), 0)
	d, err := b.st.GetDelivery(context.Background(), b.delivery.ID)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryPending, d.Status, "not expired")

	_, err = b.db.Pool.Exec(context.Background(), `INSERT INTO message_payloads (message_id, payload) VALUES ($1, '{"n":1}')`, b.args.MessageID)
	require.NoError(t, err)
	require.NoError(t, b.run(t, job, 2), "River's retry")
	require.Equal(t, int64(1), b.hits.Load())
	d, err = b.st.GetDelivery(context.Background(), b.delivery.ID)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryDelivered, d.Status)
}

// TestMissingPayloadOfAnOldMessageExpires: once the message is at least
// payload retention old (its id's time against the worker's database
// clock), a missing payload was dropped by retention: the delivery is made
// final as expired, nothing sent.
func TestMissingPayloadOfAnOldMessageExpires(t *testing.T) {
	t.Parallel()
	b, m := setupMissingPayload(t, payloadRetention+time.Minute)

	require.NoError(t, b.run(t, *b.delivery.JobID, 1))
	require.Zero(t, b.hits.Load(), "nothing was sent")
	require.InDelta(t, 1, testutil.ToFloat64(m.Expired.WithLabelValues(delivery.ExpiredPayload)), 0)
	require.InDelta(t, 0, testutil.ToFloat64(m.PayloadMissing), 0)
	d, err := b.st.GetDelivery(context.Background(), b.delivery.ID)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryExpired, d.Status)
	require.NotNil(t, d.LastError)
	require.Contains(t, *d.LastError, "payload")
}
