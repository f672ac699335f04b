package store

import (
	"context"
	"fmt"
	"time"
)

// FleetBeat is what a heartbeat learns of the fleet.
type FleetBeat struct {
	// Live is the live dispatchers, this one included: the fleet that
	// shares each endpoint's rate limit.
	Live int
	// Rank is this dispatcher's place among the live ones ordered by id,
	// from 0: with Live, the share of the fleet-wide work it takes.
	Rank int
	// Connections is the most connections the live dispatchers may open
	// together, as each registered them, this one's included.
	Connections int
	// MaxConnections is the server's connections for clients like hookd:
	// max_connections less superuser_reserved_connections.
	MaxConnections int
	// Gone names the dispatchers this heartbeat forgot (silent past
	// stale): theirs alone, so exactly one live dispatcher learns of each.
	Gone []string
	// Joined is true when this heartbeat inserted the dispatcher's row:
	// its first, or one after another dispatcher's heartbeat forgot it.
	Joined bool
}

// Heartbeat records that dispatcher id is alive, on the database's clock,
// with the most connections it may open, forgets dispatchers silent for
// longer than stale, and returns what it learns of the live fleet.
//
// Only a dispatcher that was itself alive and connected throughout (rescue)
// forgets others: after an outage of the database every dispatcher's row
// is silent, and the first back would otherwise take the jobs of the
// others, alive and about to write their runs' outcomes.
// Nor does one whose own row is as stale as theirs (its last heartbeat
// recorded more than stale ago, read in the statement's snapshot, before
// this one's): rescue is decided when the heartbeat is sent, and a
// heartbeat sent before the database froze or went away runs when it
// comes back, when every row is stale, those of dispatchers alive and
// sending included.
func (s *Store) Heartbeat(ctx context.Context, id string, connections int, stale time.Duration, rescue bool) (FleetBeat, error) {
	var b FleetBeat
	// A join (the row inserted: xmax is 0 on an inserted row) and each
	// dispatcher forgotten are notified on FleetChannel, read by the
	// select list so that the CTE runs.
	err := s.pool.QueryRow(ctx, `
		WITH me AS (
			INSERT INTO hookd_dispatchers (id, db_connections) VALUES ($1, $3)
			ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), db_connections = $3
			RETURNING xmax = 0 AS joined
		), gone AS (
			DELETE FROM hookd_dispatchers WHERE $4 AND id <> $1 AND heartbeat_at < now() - $2::interval
				AND EXISTS (SELECT 1 FROM hookd_dispatchers WHERE id = $1 AND heartbeat_at >= now() - $2::interval)
			RETURNING id
		), told AS (
			SELECT pg_notify('`+FleetChannel+`', $1) FROM me WHERE joined
			UNION ALL SELECT pg_notify('`+FleetChannel+`', id) FROM gone
		)
		SELECT 1 + count(*), count(*) FILTER (WHERE id < $1)::int, $3 + coalesce(sum(db_connections), 0)::int,
			current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int,
			coalesce((SELECT array_agg(id) FROM gone), '{}'), (SELECT count(*) FROM told), (SELECT joined FROM me)
		FROM hookd_dispatchers
		WHERE id <> $1 AND heartbeat_at >= now() - $2::interval`, id, stale, connections, rescue).Scan(&b.Live, &b.Rank, &b.Connections, &b.MaxConnections, &b.Gone, nil, &b.Joined)
	if err != nil {
		return FleetBeat{}, fmt.Errorf("dispatcher heartbeat: %w", err)
	}
	return b, nil
}

// FleetChannel is the NOTIFY channel on which the fleet changes: its
// payload is the ID of a dispatcher that joined, left or was forgotten.
// Each dispatcher heartbeats when it hears one, so the others take their
// new shares of the fetch turns and the unparker's endpoints at once,
// not at their next heartbeat.
const FleetChannel = "hookd_fleet"

// LeaveFleet deletes dispatcher id's heartbeat and notifies the fleet, so
// the others take its share at once instead of after it goes stale.
func (s *Store) LeaveFleet(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, `
		WITH gone AS (DELETE FROM hookd_dispatchers WHERE id = $1 RETURNING id)
		SELECT pg_notify('`+FleetChannel+`', id) FROM gone`, id); err != nil {
		return fmt.Errorf("leave dispatcher fleet: %w", err)
	}
	return nil
}

// rescueSet is the SET list of an update of running jobs (as j) that
// makes each available again at once, or discarded when out of
// attempts, with reason (an SQL text expression) added to its errors, as
// River's rescuer does.
func rescueSet(reason string) string {
	return `
		state = CASE WHEN j.attempt >= j.max_attempts THEN 'discarded' ELSE 'available' END::river_job_state,
		scheduled_at = now(),
		finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
		errors = array_append(j.errors, jsonb_build_object('at', now(), 'attempt', j.attempt, 'error', ` + reason + `, 'trace', ''))`
}

// runningOfGone selects the running jobs whose last run is one of the
// clients $1 that have no row in the fleet table (a client back in it is
// alive and running its jobs): those RescueJobsOf rescues, and counts.
const runningOfGone = `state = 'running' AND attempted_by[array_length(attempted_by, 1)] = ANY($1::text[])
	AND NOT EXISTS (SELECT 1 FROM hookd_dispatchers d WHERE d.id = attempted_by[array_length(attempted_by, 1)])`

// RescueJobsOf makes the running jobs of River clients that are gone (a
// dispatcher whose heartbeat went silent: killed, or cut off) available
// again at once, as River's own rescuer would after its much longer
// RescueStuckJobsAfter: the next run of each is a new attempt of the job,
// whose claims fence the lost run's writes (ClaimDeliveries), and a job
// out of attempts is discarded. Only jobs whose latest run is a gone
// client's and that are still running are touched. A job row another
// session holds locked is skipped, not waited for: the gone client's own
// transaction, cut off mid-flight, keeps its locks until the server ends
// it (idle_in_transaction_session_timeout, or TCP keepalive), and the
// rescue runs in the rescuer's heartbeat, which must not stall meanwhile.
// A client whose row is back (it heartbeated again after it was
// forgotten: alive, and running its jobs) is not rescued. It returns the
// jobs rescued and those left running (skipped), which a later call
// rescues.
func (s *Store) RescueJobsOf(ctx context.Context, clients []string) (rescued, left int, err error) {
	if len(clients) == 0 {
		return 0, 0, nil
	}
	// The count reads the snapshot before the update: every such job,
	// rescued now or skipped.
	err = s.pool.QueryRow(ctx, `
		WITH free AS (
			SELECT id FROM river_job WHERE `+runningOfGone+`
			FOR UPDATE SKIP LOCKED
		), rescued AS (
			UPDATE river_job j SET `+rescueSet(`'rescued: dispatcher ' || j.attempted_by[array_length(j.attempted_by, 1)] || ' stopped heartbeating'`)+`
			FROM free WHERE j.id = free.id
			RETURNING 1
		)
		SELECT (SELECT count(*) FROM rescued)::int,
			(SELECT count(*) FROM river_job WHERE `+runningOfGone+`)::int`,
		clients).Scan(&rescued, &left)
	if err != nil {
		return 0, 0, fmt.Errorf("rescue the jobs of gone dispatchers: %w", err)
	}
	return rescued, left - rescued, nil
}
