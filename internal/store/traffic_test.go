package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/trafficclass"
)

// seedHistory writes an endpoint's delivery log: one attempt every
// `every` over the last `span`, a fraction `failing` of them failures.
func (b *testBundle) seedHistory(t *testing.T, endpointID string, span, every time.Duration, failing float64) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE endpoints SET created_at = now() - $2::interval WHERE id = $1`, endpointID, span)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(context.Background(), `
		INSERT INTO delivery_attempts (delivery_id, message_id, endpoint_id, attempt_number, attempted_at, duration_ms, status_code, classification)
		SELECT 'dlv_seed', 'msg_seed', $1, 1, ts, 5,
			CASE WHEN random() < $4 THEN 500 ELSE 200 END,
			CASE WHEN random() < $4 THEN 'failure' ELSE 'success' END
		FROM generate_series(now() - $2::interval, now(), $3::interval) AS ts`,
		endpointID, span, every, failing)
	require.NoError(t, err)
}

func TestReclassifyFromTheDeliveryLog(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	busy := b.endpoint(t, "acme")
	trickle := b.endpoint(t, "acme")
	fresh := b.endpoint(t, "acme")
	explicit, err := s.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com", Secret: testSecret, TrafficClass: "medium"})
	require.NoError(t, err)
	// Two hours of 25 requests/s with 1% errors; two days of one request an hour.
	b.seedHistory(t, busy.ID, 2*time.Hour, 40*time.Millisecond, 0.01)
	b.seedHistory(t, trickle.ID, 48*time.Hour, time.Hour, 0)

	classes, err := s.ListClasses(ctx)
	require.NoError(t, err)
	require.Len(t, classes, 4, "the built-ins are seeded by migration")

	require.Equal(t, trafficclass.DefaultClass, busy.EffectiveClass(), "a new endpoint starts in the default class")
	rc, err := s.Reclassify(ctx, busy.ID, classes)
	require.NoError(t, err)
	require.Equal(t, trafficclass.High, rc.NewClass, rc.Reason)
	require.True(t, rc.Changed)
	require.InDelta(t, 25, rc.Measurement.QuietRPS, 1)
	require.Less(t, rc.Measurement.HealthyErrorRate, 0.05)
	require.GreaterOrEqual(t, rc.Measurement.Minutes, 119)

	rc, err = s.Reclassify(ctx, trickle.ID, classes)
	require.NoError(t, err)
	require.Equal(t, trafficclass.Trickle, rc.NewClass, rc.Reason)
	require.False(t, rc.Changed, "trickle is already the default class")

	rc, err = s.Reclassify(ctx, fresh.ID, classes)
	require.NoError(t, err)
	require.Equal(t, trafficclass.DefaultClass, rc.NewClass)
	require.Contains(t, rc.Reason, "history")

	_, err = s.Reclassify(ctx, explicit.ID, classes)
	require.ErrorIs(t, err, store.ErrNotAuto)

	got, err := s.GetEndpoint(ctx, busy.ID)
	require.NoError(t, err)
	require.Equal(t, trafficclass.High, got.EffectiveClass())
	require.Equal(t, "auto", got.TrafficClass)
	changes, err := s.ListClassChanges(ctx, busy.ID, 10)
	require.NoError(t, err)
	require.Len(t, changes, 1)
	require.Equal(t, trafficclass.DefaultClass, changes[0].OldClass)
	require.Equal(t, trafficclass.High, changes[0].NewClass)
	require.InDelta(t, 25, changes[0].Measurement.QuietRPS, 1)

	// Reclassifying again with the same traffic changes nothing.
	rc, err = s.Reclassify(ctx, busy.ID, classes)
	require.NoError(t, err)
	require.False(t, rc.Changed)
	changes, err = s.ListClassChanges(ctx, busy.ID, 10)
	require.NoError(t, err)
	require.Len(t, changes, 1)
}

func TestHealthyErrorRateLeavesOutBreakerOpenPeriods(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	b.seedHistory(t, e.ID, 6*time.Hour, time.Second, 0.02)
	// A 30-minute incident, an hour ago, during which the breaker was open.
	_, err := b.db.Pool.Exec(ctx, `
		UPDATE delivery_attempts SET classification = 'failure', status_code = 503
		WHERE endpoint_id = $1 AND attempted_at BETWEEN now() - interval '90 minutes' AND now() - interval '60 minutes'`, e.ID)
	require.NoError(t, err)
	withIncident, err := s.MeasureTraffic(ctx, e.ID)
	require.NoError(t, err)
	require.Greater(t, withIncident.HealthyErrorRate, 0.5, "the incident dominates the p99 while it is counted")

	_, err = b.db.Pool.Exec(ctx, `
		INSERT INTO breaker_transitions (endpoint_id, from_state, to_state, generation, at, reason, failure_rate, observations, failures, actor)
		VALUES ($1, 'closed', 'open', 2, now() - interval '90 minutes', 'failure_rate', 1, 30, 30, 't'),
		       ($1, 'half_open', 'closed', 5, now() - interval '59 minutes', 'trials_succeeded', 0, 0, 0, 't')`, e.ID)
	require.NoError(t, err)
	m, err := s.MeasureTraffic(ctx, e.ID)
	require.NoError(t, err)
	require.Less(t, m.HealthyErrorRate, 0.1, "outside breaker-open periods only the 2%% background remains")
	require.InDelta(t, 1, m.QuietRPS, 0.05)
}

func TestClassChangeKeepsTheBreakerState(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	e := b.endpoint(t, "acme")
	brk := breaker.New(breaker.DefaultConfig())
	prev := brk.Generation
	brk.Window.Add(time.Now(), 0, 30)
	res := brk.Evaluate(breaker.DefaultConfig(), time.Now(), nil)
	require.NotNil(t, res.Transition)
	won, err := s.CommitTransition(ctx, e.ID, prev, brk, *res.Transition, store.TransitionMeta{Actor: "test"})
	require.NoError(t, err)
	require.True(t, won)

	high := trafficclass.High
	_, err = s.UpdateEndpoint(ctx, e.ID, store.EndpointPatch{TrafficClass: &high})
	require.NoError(t, err)
	hc, err := s.GetClass(ctx, high)
	require.NoError(t, err)
	st, err := s.GetBreakerStatus(ctx, e.ID, hc.Breaker)
	require.NoError(t, err)
	require.Equal(t, breaker.StateOpen, st.Breaker.State)
	require.WithinDuration(t, brk.OpenUntil, st.Breaker.OpenUntil, time.Microsecond, "an open breaker stays open until its open_until")

	missing := "nope"
	_, err = s.UpdateEndpoint(ctx, e.ID, store.EndpointPatch{TrafficClass: &missing})
	require.ErrorIs(t, err, store.ErrUnknownClass)
}

func TestClassLifecycle(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	c := trafficclass.Default("custom")
	c.Breaker.Window = 5 * time.Second
	_, err := s.CreateClass(ctx, c)
	require.NoError(t, err)
	_, err = s.CreateClass(ctx, c)
	require.ErrorIs(t, err, store.ErrClassExists)

	e, err := s.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com", Secret: testSecret, TrafficClass: "custom"})
	require.NoError(t, err)
	require.ErrorIs(t, s.DeleteClass(ctx, "custom"), store.ErrClassInUse)
	require.ErrorIs(t, s.DeleteClass(ctx, trafficclass.High), store.ErrBuiltinClass)

	tuned, _ := trafficclass.Builtin(trafficclass.High)
	tuned.Breaker.FailureRateThreshold = 0.6
	got, created, err := s.PutClass(ctx, tuned)
	require.NoError(t, err)
	require.False(t, created)
	require.True(t, got.Builtin)
	again, err := s.GetClass(ctx, trafficclass.High)
	require.NoError(t, err)
	require.Equal(t, 0.6, again.Breaker.FailureRateThreshold)
	// A tuned built-in survives the next migration's seeding.
	require.NoError(t, store.Migrate(ctx, b.db.Pool, nil))
	again, err = s.GetClass(ctx, trafficclass.High)
	require.NoError(t, err)
	require.Equal(t, 0.6, again.Breaker.FailureRateThreshold)

	require.NoError(t, s.DeleteEndpoint(ctx, e.ID))
	require.NoError(t, s.DeleteClass(ctx, "custom"))
	require.ErrorIs(t, s.DeleteClass(ctx, "custom"), store.ErrNotFound)
}
