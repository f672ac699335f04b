package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// AuthRule is a class's 401/403 auto-disable rule.
type AuthRule struct {
	// After is the number of consecutive auth failures that disables.
	After int
	// MinDuration is how long the streak must span at least.
	MinDuration time.Duration
}

// AutoDisable is an endpoint the ledger disabled for a wall of auth
// failures.
type AutoDisable struct {
	EndpointID string
	TenantID   string
	URL        string
	EventID    int64
	Failures   int
	FirstAt    time.Time
	LastAt     time.Time
}

// DefaultAuthRule is the auto-disable rule of an endpoint whose class
// could not be read.
var DefaultAuthRule = AuthRule{After: 10, MinDuration: 5 * time.Minute}

// authSummary is one endpoint's auth outcomes within a batch, in order.
type authSummary struct {
	reset   bool // a non-auth outcome happened: the streak restarts after it
	count   int  // auth failures after the last reset (or all, without one)
	firstAt time.Time
	lastAt  time.Time
}

// authSummaries sums up each endpoint's auth outcomes among attempts, in
// the order the endpoints first appear.
func authSummaries(attempts []Attempt) ([]string, map[string]*authSummary) {
	sums := map[string]*authSummary{}
	var order []string
	for _, a := range attempts {
		if a.Classification == "blocked" {
			continue
		}
		sm := sums[a.EndpointID]
		if sm == nil {
			sm = &authSummary{}
			sums[a.EndpointID] = sm
			order = append(order, a.EndpointID)
		}
		if a.Classification != "auth_failure" {
			sm.reset, sm.count, sm.firstAt, sm.lastAt = true, 0, time.Time{}, time.Time{}
			continue
		}
		if sm.count == 0 {
			sm.firstAt = a.AttemptedAt
		}
		sm.count++
		sm.lastAt = a.AttemptedAt
	}
	return order, sums
}

// streakResets are the (endpoint, delivery) pairs of the attempts that
// reset their endpoint's auth-failure streak in a batch with no auth
// failure of that endpoint after them: the ledger's statement resets an
// endpoint if one of its pairs' attempts is logged (its run did not lose
// its delivery), so that a batch of healthy endpoints needs no statement
// of its own for the streaks.
func streakResets(attempts []Attempt) (endpoints, deliveries []string) {
	_, sums := authSummaries(attempts)
	for _, a := range attempts {
		if a.Classification == "blocked" || a.Classification == "auth_failure" || sums[a.EndpointID].count > 0 {
			continue
		}
		endpoints, deliveries = append(endpoints, a.EndpointID), append(deliveries, a.DeliveryID)
	}
	return endpoints, deliveries
}

// applyAuthStreaks folds the batch's attempts into the endpoints' auth
// streaks and disables the endpoints whose streak reached their rule. A
// blocked attempt (refused by the SSRF guard) says nothing of credentials
// and leaves the streak alone; any other non-auth outcome resets it.
func applyAuthStreaks(ctx context.Context, tx pgx.Tx, attempts []Attempt, rules map[string]AuthRule) ([]AutoDisable, error) {
	order, sums := authSummaries(attempts)
	var (
		resetIDs      []string
		ids           []string
		resets        []bool
		counts        []int32
		firsts, lasts []time.Time
	)
	for _, id := range order {
		sm := sums[id]
		if sm.count == 0 {
			resetIDs = append(resetIDs, id)
			continue
		}
		ids, resets, counts = append(ids, id), append(resets, sm.reset), append(counts, int32(sm.count))
		firsts, lasts = append(firsts, sm.firstAt), append(lasts, sm.lastAt)
	}
	if len(resetIDs) > 0 {
		// Touches only endpoints with a streak running: healthy ones cost
		// an index probe, no write.
		if _, err := tx.Exec(ctx, `UPDATE auth_streaks SET failures = 0, first_at = NULL WHERE endpoint_id = ANY($1) AND failures > 0`, customPlan, resetIDs); err != nil {
			return nil, fmt.Errorf("reset auth streaks: %w", err)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	// One statement per kind of summary: a batch that saw a reset replaces
	// the streak, one that did not extends it.
	var due []AutoDisable
	for _, restart := range []bool{true, false} {
		var sIDs []string
		var sCounts []int32
		var sFirsts, sLasts []time.Time
		for i := range ids {
			if resets[i] == restart {
				sIDs, sCounts, sFirsts, sLasts = append(sIDs, ids[i]), append(sCounts, counts[i]), append(sFirsts, firsts[i]), append(sLasts, lasts[i])
			}
		}
		if len(sIDs) == 0 {
			continue
		}
		onConflict := `failures = a.failures + EXCLUDED.failures,
			first_at = CASE WHEN a.failures = 0 THEN EXCLUDED.first_at ELSE a.first_at END`
		if restart {
			onConflict = `failures = EXCLUDED.failures, first_at = EXCLUDED.first_at`
		}
		rows, err := tx.Query(ctx, `
			INSERT INTO auth_streaks AS a (endpoint_id, failures, first_at, last_at)
			SELECT * FROM unnest($1::text[], $2::int[], $3::timestamptz[], $4::timestamptz[]) ORDER BY 1
			ON CONFLICT (endpoint_id) DO UPDATE SET `+onConflict+`, last_at = EXCLUDED.last_at
			RETURNING endpoint_id, failures, first_at, last_at`,
			sIDs, sCounts, sFirsts, sLasts)
		if err != nil {
			return nil, fmt.Errorf("count auth failures: %w", err)
		}
		for rows.Next() {
			var d AutoDisable
			if err := rows.Scan(&d.EndpointID, &d.Failures, &d.FirstAt, &d.LastAt); err != nil {
				rows.Close()
				return nil, fmt.Errorf("count auth failures: %w", err)
			}
			rule, ok := rules[d.EndpointID]
			if ok && rule.After > 0 && d.Failures >= rule.After && d.LastAt.Sub(d.FirstAt) >= rule.MinDuration {
				due = append(due, d)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("count auth failures: %w", err)
		}
	}
	var disabled []AutoDisable
	for _, d := range due {
		details, _ := json.Marshal(map[string]any{"failures": d.Failures, "first_at": d.FirstAt, "last_at": d.LastAt})
		err := tx.QueryRow(ctx, `
			WITH u AS (
				UPDATE endpoints SET status = 'disabled', disabled_reason = 'auth_failures', updated_at = now()
				WHERE id = $1 AND status = 'enabled' AND deleted_at IS NULL
				RETURNING id, tenant_id, url
			), ev AS (
				INSERT INTO endpoint_events (endpoint_id, kind, reason, details, actor)
				SELECT id, 'disabled', 'auth_failures', $2, 'dispatcher' FROM u
				RETURNING id
			), n AS (SELECT pg_notify('`+EndpointChannel+`', id) FROM u)
			SELECT u.tenant_id, u.url, (SELECT id FROM ev), (SELECT count(*) FROM n) FROM u`,
			d.EndpointID, details).Scan(&d.TenantID, &d.URL, &d.EventID, new(int))
		if errors.Is(err, pgx.ErrNoRows) {
			continue // already disabled
		}
		if err != nil {
			return nil, fmt.Errorf("disable endpoint: %w", err)
		}
		disabled = append(disabled, d)
	}
	return disabled, nil
}
