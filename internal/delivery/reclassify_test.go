package delivery_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
	"github.com/hookd/hookd/internal/trafficclass"
)

// TestReclassifyWorkerMovesAutoEndpoints: the periodic job measures every
// auto endpoint and moves the ones whose traffic changed class, leaving
// endpoints with an explicit class alone.
func TestReclassifyWorkerMovesAutoEndpoints(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	st := store.New(db.Pool, nil)
	ctx := context.Background()
	mk := func(class string) store.Endpoint {
		e, err := st.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", TrafficClass: class})
		require.NoError(t, err)
		_, err = db.Pool.Exec(ctx, `UPDATE endpoints SET created_at = now() - interval '2 hours' WHERE id = $1`, e.ID)
		require.NoError(t, err)
		// 5 requests/s for two hours: medium.
		_, err = db.Pool.Exec(ctx, `
			INSERT INTO delivery_attempts (delivery_id, message_id, endpoint_id, attempt_number, attempted_at, duration_ms, status_code, classification)
			SELECT 'd', 'm', $1, 1, ts, 3, 200, 'success' FROM generate_series(now() - interval '2 hours', now(), interval '200 milliseconds') ts`, e.ID)
		require.NoError(t, err)
		return e
	}
	auto := mk("auto")
	pinned := mk(trafficclass.High)

	w := &delivery.ReclassifyWorker{Store: st, Logger: slog.New(slog.DiscardHandler)}
	require.NoError(t, w.Work(ctx, &river.Job[delivery.ReclassifyArgs]{}))
	got, err := st.GetEndpoint(ctx, auto.ID)
	require.NoError(t, err)
	require.Equal(t, trafficclass.Medium, got.EffectiveClass())
	got, err = st.GetEndpoint(ctx, pinned.ID)
	require.NoError(t, err)
	require.Equal(t, trafficclass.High, got.EffectiveClass())
	changes, err := st.ListClassChanges(ctx, auto.ID, 5)
	require.NoError(t, err)
	require.Len(t, changes, 1)
	require.WithinDuration(t, time.Now(), changes[0].At, time.Minute)
}
