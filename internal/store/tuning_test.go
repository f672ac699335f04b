package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
	"github.com/hookd/hookd/internal/trafficclass"
)

// TestApplyTuningIsOneTransaction: a tuned change updates the class,
// records the history, stores the recommendation and emits
// traffic_class.tuned (naming the class, no endpoint) together; a change
// from a config the class no longer has writes nothing.
func TestApplyTuningIsOneTransaction(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	enq := &fakeEnqueuer{next: 1}
	s := store.New(db.Pool, nil, store.WithOperationalEvents(store.OperationalEventsConfig{Enqueuer: enq}))
	_, err := s.CreateOperationalEndpoint(ctx, store.NewOperationalEndpoint{URL: "https://ops.example/", Secret: testSecret, EventTypes: []string{"traffic_class.*"}})
	require.NoError(t, err)
	c := trafficclass.Default("payments")
	_, _, err = s.PutClass(ctx, c)
	require.NoError(t, err)
	next := c.Breaker
	next.FailureRateThreshold = 0.7
	tu := store.Tuning{Actor: "d1", OldConfig: json.RawMessage(`{}`), NewConfig: json.RawMessage(`{}`), Figures: json.RawMessage(`{"opens_quiet":0}`), Evidence: json.RawMessage(`{}`)}
	rec := store.Recommendation{Status: "applied", Body: json.RawMessage(`{}`)}

	stale := c.Breaker
	stale.Window = time.Minute
	_, err = s.ApplyTuning(ctx, "payments", stale, next, tu, rec, nil)
	require.ErrorIs(t, err, store.ErrClassChanged)
	history, err := s.ListTunings(ctx, "payments", 10)
	require.NoError(t, err)
	require.Empty(t, history)
	require.Empty(t, opsTypes(t, db))

	got, err := s.ApplyTuning(ctx, "payments", c.Breaker, next, tu, rec, map[string]any{"status": "applied"})
	require.NoError(t, err)
	require.Equal(t, next, got.Breaker)
	stored, err := s.GetClass(ctx, "payments")
	require.NoError(t, err)
	require.Equal(t, next, stored.Breaker)
	history, err = s.ListTunings(ctx, "payments", 10)
	require.NoError(t, err)
	require.Len(t, history, 1)
	require.Equal(t, "d1", history[0].Actor)
	r, err := s.GetRecommendation(ctx, "payments")
	require.NoError(t, err)
	require.Equal(t, "applied", r.Status)
	require.Equal(t, []string{store.OpTrafficClassTuned}, opsTypes(t, db))
	var payload []byte
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT p.payload FROM messages m JOIN message_payloads p ON p.message_id = m.id WHERE m.tenant_id = $1`, store.OperationalTenant).Scan(&payload))
	var ev struct {
		Type string         `json:"type"`
		Data map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal(payload, &ev))
	require.Equal(t, store.OpTrafficClassTuned, ev.Type)
	require.Equal(t, "payments", ev.Data["class"])
	require.NotContains(t, ev.Data, "endpoint_id")

	// A save expecting a status the recommendation no longer has fails.
	err = s.SaveRecommendation(ctx, store.Recommendation{Class: "payments", Status: "rejected", Body: json.RawMessage(`{}`), Expect: "shadowing"}, "", nil)
	require.ErrorIs(t, err, store.ErrRecommendationChanged)
	// Deleting the class deletes its recommendation.
	_, _, err = s.PutClass(ctx, trafficclass.Default("spare"))
	require.NoError(t, err)
	require.NoError(t, s.SaveRecommendation(ctx, store.Recommendation{Class: "spare", Status: "kept", Body: json.RawMessage(`{}`)}, "", nil))
	require.NoError(t, s.DeleteClass(ctx, "spare"))
	_, err = s.GetRecommendation(ctx, "spare")
	require.ErrorIs(t, err, store.ErrNotFound)
}

// TestClassEndpointIDsFollowTheEffectiveClass: a class's endpoints are
// those naming it and the auto ones measured into it (the default class
// for an auto endpoint never measured); deleted and operational ones are
// not.
func TestClassEndpointIDsFollowTheEffectiveClass(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	s := store.New(db.Pool, nil)
	_, _, err := s.PutClass(ctx, trafficclass.Default("bulk"))
	require.NoError(t, err)
	named, err := s.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/a", Secret: testSecret, TrafficClass: "bulk"})
	require.NoError(t, err)
	auto, err := s.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/b", Secret: testSecret})
	require.NoError(t, err)
	gone, err := s.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/c", Secret: testSecret, TrafficClass: "bulk"})
	require.NoError(t, err)
	require.NoError(t, s.DeleteEndpoint(ctx, gone.ID))
	ids, err := s.ClassEndpointIDs(ctx, "bulk")
	require.NoError(t, err)
	require.Equal(t, []string{named.ID}, ids)
	ids, err = s.ClassEndpointIDs(ctx, trafficclass.DefaultClass)
	require.NoError(t, err)
	require.Equal(t, []string{auto.ID}, ids)
	_, err = db.Pool.Exec(ctx, `UPDATE endpoints SET assigned_class = 'bulk' WHERE id = $1`, auto.ID)
	require.NoError(t, err)
	ids, err = s.ClassEndpointIDs(ctx, "bulk")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{named.ID, auto.ID}, ids)

	// Its breakers: busy while one of an endpoint taking traffic is not
	// closed.
	since := time.Now().Add(-time.Hour)
	busy, err := s.BusyBreaker(ctx, ids, since)
	require.NoError(t, err)
	require.Empty(t, busy)
	_, err = db.Pool.Exec(ctx, `UPDATE breaker_states SET state = 'half_open' WHERE endpoint_id = $1`, named.ID)
	require.NoError(t, err)
	busy, err = s.BusyBreaker(ctx, ids, since)
	require.NoError(t, err)
	require.Empty(t, busy, "no attempt since: no traffic")
	_, err = db.Pool.Exec(ctx, `
		INSERT INTO delivery_attempts (delivery_id, message_id, endpoint_id, attempt_number, attempted_at, duration_ms, classification)
		VALUES ('dlv_busy', 'msg_busy', $1, 1, now(), 1, 'failure')`, named.ID)
	require.NoError(t, err)
	busy, err = s.BusyBreaker(ctx, ids, since)
	require.NoError(t, err)
	require.Equal(t, named.ID, busy)
	_, err = db.Pool.Exec(ctx, `UPDATE endpoints SET status = 'disabled' WHERE id = $1`, named.ID)
	require.NoError(t, err)
	busy, err = s.BusyBreaker(ctx, ids, since)
	require.NoError(t, err)
	require.Empty(t, busy, "a disabled endpoint takes no traffic")
}

// TestUpgradeAddsClassTuning: a database at 0025 with a tuned built-in and
// a custom class migrates with both kept; the stored classes, which have no
// auto_tune members, read as recommend with the default bounds, and
// recommendations can be stored for them.
func TestUpgradeAddsClassTuning(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	resetTo(t, db, 25)
	_, err := db.Pool.Exec(ctx, `INSERT INTO traffic_classes (name, config, builtin) VALUES
		('medium', '{"name":"medium","trip":"rate","failure_rate_threshold":0.4,"window":"30s","min_throughput":20}', true),
		('payments', '{"name":"payments","trip":"consecutive","consecutive_failures":3}', false)`)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx, db.Pool, nil))
	s := store.New(db.Pool, nil)
	for _, name := range []string{"medium", "payments"} {
		c, err := s.GetClass(ctx, name)
		require.NoError(t, err)
		require.Equal(t, trafficclass.AutoTuneRecommend, c.AutoTune)
		require.Equal(t, 1, c.TuneMinThroughputFloor)
		require.NoError(t, s.SaveRecommendation(ctx, store.Recommendation{Class: name, Status: "kept", Body: json.RawMessage(`{}`)}, "", nil))
	}
	c, err := s.GetClass(ctx, "medium")
	require.NoError(t, err)
	require.Equal(t, 0.4, c.Breaker.FailureRateThreshold)
	p, err := s.GetClass(ctx, "payments")
	require.NoError(t, err)
	require.Equal(t, breaker.TripConsecutive, p.Breaker.Trip)
}
