package store

import (
	"context"
	"fmt"
)

// Claim names the run of a job that makes a write: the job's id and
// River's attempt number of the run. A write with a claim applies to a
// delivery only while no later run of the same job has claimed it
// (ClaimDeliveries): a run that lost its job, because River rescued the
// job while the run was frozen and another process runs it now, writes
// nothing. The zero Claim fences nothing.
type Claim struct {
	JobID   int64
	Attempt int
}

// claimFence is the condition a claimed write puts on delivery d: $job
// and $attempt are the writing run's (NULL: no claim).
func claimFence(d, job, attempt string) string {
	return `(` + job + ` IS NULL OR ` + d + `.claim_job IS DISTINCT FROM ` + job + ` OR ` + d + `.claim_attempt <= ` + attempt + `)`
}

// ClaimDeliveries claims, for the run c, the deliveries among ids that
// job c.JobID still owns (its job_id) and no later run of it has claimed,
// and returns each one's progress; a delivery it does not return is not
// the run's to send. A job run again (a retry, a rescue) calls it before
// it sends, so that the run it replaced, if it is still alive somewhere,
// can no longer write (Claim). The rows are locked in id order, as every
// writer of several deliveries locks them, before the update's first row
// (a one-time filter on locked's count, as in ledgerWriteSQL).
func (s *Store) ClaimDeliveries(ctx context.Context, c Claim, ids []string) (map[string]Progress, error) {
	rows, err := s.pool.Query(ctx, `
		WITH locked AS MATERIALIZED (
			SELECT id FROM deliveries WHERE id = ANY($1) ORDER BY id FOR UPDATE
		)
		UPDATE deliveries d SET claim_job = $2, claim_attempt = $3
		WHERE d.id = ANY($1) AND (SELECT count(*) FROM locked) >= 0 AND d.job_id = $2
			AND `+claimFence("d", "$2::bigint", "$3::int")+`
		RETURNING d.id, d.status, d.series, d.job_id, d.attempt_count, d.series_base`, customPlan, ids, c.JobID, c.Attempt)
	if err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", err)
	}
	defer rows.Close()
	out := make(map[string]Progress, len(ids))
	for rows.Next() {
		var (
			id string
			p  Progress
		)
		if err := rows.Scan(&id, &p.Status, &p.Series, &p.JobID, &p.AttemptCount, &p.SeriesBase); err != nil {
			return nil, fmt.Errorf("claim deliveries: %w", err)
		}
		out[id] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", err)
	}
	return out, nil
}
