package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestRateLimitMigrationKeepsEndpoints applies the rate limit migration to
// a database of the previous version holding an endpoint: it reads back
// unlimited, and a limit can then be set and removed.
func TestRateLimitMigrationKeepsEndpoints(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	resetTo(t, db, 10)
	_, err := db.Pool.Exec(ctx, `INSERT INTO endpoints (id, tenant_id, url, secret) VALUES ('ep_old', 'acme', 'https://acme.example/h', $1)`, testSecret)
	require.NoError(t, err)

	require.NoError(t, store.Migrate(ctx, db.Pool, nil))
	s := store.New(db.Pool, nil)
	e, err := s.GetEndpoint(ctx, "ep_old")
	require.NoError(t, err)
	require.Nil(t, e.RateLimit)
	require.Equal(t, "https://acme.example/h", e.URL)

	twenty := 20
	e, err = s.UpdateEndpoint(ctx, "ep_old", store.EndpointPatch{RateLimit: &twenty})
	require.NoError(t, err)
	require.Equal(t, 20, *e.RateLimit)
	desc := "kept"
	e, err = s.UpdateEndpoint(ctx, "ep_old", store.EndpointPatch{Description: &desc})
	require.NoError(t, err)
	require.Equal(t, 20, *e.RateLimit, "a patch without it keeps it")
	zero := 0
	e, err = s.UpdateEndpoint(ctx, "ep_old", store.EndpointPatch{RateLimit: &zero})
	require.NoError(t, err)
	require.Nil(t, e.RateLimit, "0 removes it")
}

// TestHeartbeatCountsLiveDispatchers: each heartbeat counts the
// dispatchers heard from within the stale window, itself included; one
// that left or went stale no longer counts.
func TestHeartbeatCountsLiveDispatchers(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	s := store.New(db.Pool, nil)
	const stale = time.Minute

	beat := func(id string, conns int) store.FleetBeat {
		t.Helper()
		return mustBeat(t, s, id, conns, stale)
	}
	b := beat("a", 13)
	require.Equal(t, 1, b.Live)
	require.Equal(t, 13, b.Connections)
	var usable int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int`).Scan(&usable))
	require.Equal(t, usable, b.MaxConnections)
	require.Zero(t, b.Rank)
	b = beat("b", 20)
	require.Equal(t, 2, b.Live)
	require.Equal(t, 33, b.Connections)
	require.Equal(t, 1, b.Rank, "its place among the live ones by id")
	require.Zero(t, beat("a", 13).Rank)
	b = beat("a", 15)
	require.Equal(t, 2, b.Live, "a second beat is the same dispatcher")
	require.Equal(t, 35, b.Connections, "with what it registers now")

	require.NoError(t, s.LeaveFleet(ctx, "b"))
	b = beat("a", 15)
	require.Equal(t, 1, b.Live)
	require.Equal(t, 15, b.Connections)

	// c went silent two minutes ago: stale, and forgotten.
	_, err := db.Pool.Exec(ctx, `INSERT INTO hookd_dispatchers (id, heartbeat_at, db_connections) VALUES ('c', now() - interval '2 minutes', 50)`)
	require.NoError(t, err)
	b = beat("a", 15)
	require.Equal(t, 1, b.Live)
	require.Equal(t, 15, b.Connections)
	require.Equal(t, []string{"c"}, b.Gone, "the beat that forgot c says so")
	_, err = db.Pool.Exec(ctx, `INSERT INTO hookd_dispatchers (id, heartbeat_at, db_connections) VALUES ('d', now() - interval '2 minutes', 50)`)
	require.NoError(t, err)
	quiet, err := s.Heartbeat(ctx, "a", 15, stale, false)
	require.NoError(t, err)
	require.Empty(t, quiet.Gone, "a dispatcher whose own lease lapsed forgets nobody")
	require.Equal(t, []string{"d"}, beat("a", 15).Gone)
	require.Empty(t, beat("a", 15).Gone, "once")
	var left int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM hookd_dispatchers WHERE id = 'c'`).Scan(&left))
	require.Zero(t, left)
}

// TestRescueJobsOfGoneDispatchers: the running jobs whose latest run is a
// gone dispatcher's are made available at once (discarded when out of
// attempts); a job it ran before another took it, and jobs in other
// states, are not touched.
func TestRescueJobsOfGoneDispatchers(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	s := store.New(db.Pool, nil)
	insert := func(state string, attempt, maxAttempts int, by []string) int64 {
		t.Helper()
		var id int64
		require.NoError(t, db.Pool.QueryRow(ctx, `
			INSERT INTO river_job (args, kind, max_attempts, queue, state, attempt, attempted_by, attempted_at, finalized_at)
			VALUES ('{}', 'deliver', $1, 'deliver', $2::river_job_state, $3, $4, now(),
				CASE WHEN $2 = 'completed' THEN now() END) RETURNING id`,
			maxAttempts, state, attempt, by).Scan(&id))
		return id
	}
	rescued := insert("running", 1, 25, []string{"gone"})
	outOfAttempts := insert("running", 3, 3, []string{"x", "gone"})
	tookOver := insert("running", 2, 25, []string{"gone", "alive"})
	other := insert("running", 1, 25, []string{"alive"})
	done := insert("completed", 1, 25, []string{"gone"})

	n, left, err := s.RescueJobsOf(ctx, []string{"gone"})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Zero(t, left)
	state := func(id int64) string {
		var st string
		var errs int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT state, coalesce(array_length(errors, 1), 0) FROM river_job WHERE id = $1`, id).Scan(&st, &errs))
		if st == "available" || st == "discarded" {
			require.Equal(t, 1, errs, "the rescue is in the job's errors")
		}
		return st
	}
	require.Equal(t, "available", state(rescued))
	require.Equal(t, "discarded", state(outOfAttempts))
	require.Equal(t, "running", state(tookOver))
	require.Equal(t, "running", state(other))
	require.Equal(t, "completed", state(done))
	n, _, err = s.RescueJobsOf(ctx, nil)
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestRescueSkipsJobsLockedElsewhere: a gone dispatcher's job row that
// another session holds locked (the gone one's own transaction, cut off
// mid-flight, lives on until the server ends it) is skipped, not waited
// for: the rescue runs inside the rescuer's heartbeat, which must not
// stall for as long as the lock lives, or the rescuer goes silent in
// turn and its own jobs are rescued while it runs them.
func TestRescueSkipsJobsLockedElsewhere(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	s := store.New(db.Pool, nil)
	var free, locked int64
	for _, id := range []*int64{&free, &locked} {
		require.NoError(t, db.Pool.QueryRow(ctx, `
			INSERT INTO river_job (args, kind, max_attempts, queue, state, attempt, attempted_by, attempted_at)
			VALUES ('{}', 'deliver', 25, 'deliver', 'running', 1, '{gone}', now()) RETURNING id`).Scan(id))
	}
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SET LOCAL idle_in_transaction_session_timeout = 0`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM river_job WHERE id = $1 FOR UPDATE`, locked)
	require.NoError(t, err)

	// Bounded only so that a rescue that waits fails instead of hanging.
	bounded, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	n, left, err := s.RescueJobsOf(bounded, []string{"gone"})
	require.NoError(t, err, "the locked row is skipped, not waited for")
	require.Equal(t, 1, n)
	require.Equal(t, 1, left, "the locked job is left for a later heartbeat")

	require.NoError(t, tx.Rollback(ctx))
	n, left, err = s.RescueJobsOf(ctx, []string{"gone"})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Zero(t, left)
	var states []string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(state::text ORDER BY id) FROM river_job WHERE id IN ($1, $2)`, free, locked).Scan(&states))
	require.Equal(t, []string{"available", "available"}, states)
}

// TestFleetChangesAreNotified: a heartbeat that joins the fleet, one that
// forgets gone dispatchers and a leave each notify the fleet's channel
// with the ID that came or went, in the same transaction, so the others
// take their new shares at once rather than at their next heartbeat; a
// heartbeat that changes nothing notifies nothing.
func TestFleetChangesAreNotified(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := t.Context()
	s := store.New(db.Pool, nil)
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "LISTEN "+store.FleetChannel)
	require.NoError(t, err)
	next := func() string {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		n, err := conn.Conn().WaitForNotification(wctx)
		require.NoError(t, err)
		return n.Payload
	}
	beat := func(id string) store.FleetBeat {
		t.Helper()
		return mustBeat(t, s, id, 10, time.Minute)
	}

	beat("a")
	require.Equal(t, "a", next(), "a joined")
	beat("a") // nothing changed: nothing notified
	beat("b")
	require.Equal(t, "b", next(), "the next notification is b's join, not a's second beat")
	require.NoError(t, s.LeaveFleet(ctx, "b"))
	require.Equal(t, "b", next(), "b left")
	_, err = db.Pool.Exec(ctx, `INSERT INTO hookd_dispatchers (id, heartbeat_at, db_connections) VALUES ('c', now() - interval '2 minutes', 5)`)
	require.NoError(t, err)
	require.Equal(t, []string{"c"}, beat("a").Gone)
	require.Equal(t, "c", next(), "c forgotten")
}

// TestHeartbeatAfterAnOutageForgetsNobody: a heartbeat sent before the
// database froze (or went away) runs when it is back, when every row is
// stale, the sender's own included: it forgets nobody, since those
// dispatchers are as alive as it is and their heartbeats are on their
// way. Once its own row is fresh again, its next heartbeat forgets a
// dispatcher still silent.
func TestHeartbeatAfterAnOutageForgetsNobody(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	s := store.New(db.Pool, nil)
	const stale = time.Minute
	beat := func(id string) store.FleetBeat {
		t.Helper()
		return mustBeat(t, s, id, 10, stale)
	}
	beat("a")
	beat("b")
	// The outage: neither has been heard from for two minutes.
	_, err := db.Pool.Exec(ctx, `UPDATE hookd_dispatchers SET heartbeat_at = now() - interval '2 minutes'`)
	require.NoError(t, err)
	b := beat("a")
	require.Empty(t, b.Gone, "a's own row was as stale as b's")
	require.Equal(t, 1, b.Live, "b is not counted live until it beats")
	require.Equal(t, []string{"b"}, beat("a").Gone, "a heard from again, b still silent")
}

// TestRescueSkipsADispatcherBackInTheFleet: a dispatcher forgotten by
// another's heartbeat whose own heartbeat put its row back before the
// rescue ran is alive and running its jobs: rescuing them would have
// them sent again. They are neither rescued nor left for a later rescue.
func TestRescueSkipsADispatcherBackInTheFleet(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	s := store.New(db.Pool, nil)
	var back, gone int64
	for id, by := range map[*int64]string{&back: "back", &gone: "gone"} {
		require.NoError(t, db.Pool.QueryRow(ctx, `
			INSERT INTO river_job (args, kind, max_attempts, queue, state, attempt, attempted_by, attempted_at)
			VALUES ('{}', 'deliver', 25, 'deliver', 'running', 1, ARRAY[$1], now()) RETURNING id`, by).Scan(id))
	}
	_, err := s.Heartbeat(ctx, "back", 10, time.Minute, false)
	require.NoError(t, err)
	n, left, err := s.RescueJobsOf(ctx, []string{"back", "gone"})
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the dispatcher still gone")
	require.Zero(t, left)
	var states []string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(state::text ORDER BY id) FROM river_job WHERE id IN ($1, $2)`, back, gone).Scan(&states))
	want := []string{"running", "available"}
	if gone < back {
		want = []string{"available", "running"}
	}
	require.Equal(t, want, states)
}

// mustBeat is one heartbeat of dispatcher id that may rescue, registering
// conns connections, with dispatchers silent past stale gone.
func mustBeat(t *testing.T, s *store.Store, id string, conns int, stale time.Duration) store.FleetBeat {
	t.Helper()
	b, err := s.Heartbeat(context.Background(), id, conns, stale, true)
	require.NoError(t, err)
	return b
}
