package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestTuneRequestsQueueOnePerClass: a request of a class is queued once at
// a time, claimed oldest first, finished done or failed, and a request
// left running is queued again for a new leader.
func TestTuneRequestsQueueOnePerClass(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	s := store.New(db.Pool, nil)
	ctx := context.Background()
	since := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	until := since.Add(24 * time.Hour)
	_, err := s.QueueTune(ctx, "nope", since, until)
	require.ErrorIs(t, err, store.ErrNotFound)
	medium, err := s.QueueTune(ctx, "medium", since, until)
	require.NoError(t, err)
	require.Equal(t, store.TuneQueued, medium.Status)
	_, err = s.QueueTune(ctx, "medium", since, until)
	require.ErrorIs(t, err, store.ErrTuneQueued)
	require.ErrorIs(t, err, store.ErrConflict)
	high, err := s.QueueTune(ctx, "high", since, until)
	require.NoError(t, err)

	got, ok, err := s.ClaimTune(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, medium.ID, got.ID, "oldest first")
	require.Equal(t, store.TuneRunning, got.Status)
	require.NotNil(t, got.StartedAt)
	require.NoError(t, s.FinishTune(ctx, got.ID, ""))
	latest, err := s.LatestTune(ctx, "medium")
	require.NoError(t, err)
	require.Equal(t, store.TuneDone, latest.Status)
	require.NotNil(t, latest.FinishedAt)
	require.True(t, latest.Since.Equal(since) && latest.Until.Equal(until))
	_, err = s.QueueTune(ctx, "medium", since, until)
	require.NoError(t, err, "a finished request frees the class")

	got, ok, err = s.ClaimTune(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, high.ID, got.ID)
	require.NoError(t, s.RequeueTunes(ctx))
	again, ok, err := s.ClaimTune(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, high.ID, again.ID, "left running, queued again")
	require.NoError(t, s.FinishTune(ctx, again.ID, "boom"))
	latest, err = s.LatestTune(ctx, "high")
	require.NoError(t, err)
	require.Equal(t, store.TuneFailed, latest.Status)
	require.Equal(t, "boom", latest.Error)
	_, err = s.LatestTune(ctx, "low")
	require.ErrorIs(t, err, store.ErrNotFound)
}

// TestUpgradeAddsTuneRequests: a populated database at 0040, with classes,
// a recommendation and a history row, migrates; both stay, and requests
// queue for its classes.
func TestUpgradeAddsTuneRequests(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	resetTo(t, db, 40)
	_, err := db.Pool.Exec(ctx, `INSERT INTO traffic_classes (name, config, builtin) VALUES
		('payments', '{"name":"payments","trip":"consecutive","consecutive_failures":3,"auto_tune":"apply"}', false)
		ON CONFLICT (name) DO NOTHING`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO class_recommendations (class, status, body) VALUES ('payments', 'kept', '{"class":"payments"}')`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO class_tunings (class, actor, old_config, new_config, figures, evidence) VALUES ('payments', 'admin', '{}', '{}', '{}', '{}')`)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx, db.Pool, nil))
	s := store.New(db.Pool, nil)
	rec, err := s.GetRecommendation(ctx, "payments")
	require.NoError(t, err)
	require.JSONEq(t, `{"class":"payments"}`, string(rec.Body))
	history, err := s.ListTunings(ctx, "payments", 10)
	require.NoError(t, err)
	require.Len(t, history, 1)
	require.Equal(t, json.RawMessage(`{}`), history[0].OldConfig)
	now := time.Now()
	r, err := s.QueueTune(ctx, "payments", now.Add(-time.Hour), now)
	require.NoError(t, err)
	require.Equal(t, store.TuneQueued, r.Status)
}
