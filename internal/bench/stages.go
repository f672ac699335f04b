package main

import (
	"context"
	"fmt"
	"time"
)

// stageTimes are percentiles of where a delivery's time went between the
// api's accept and the ledger's record, from the rows themselves: the
// delivery's creation (the api's transaction), its message job's fetch
// (River's attempted_at), its first attempt's start and duration, and the
// ledger's write of its status (the delivery's updated_at).
type stageTimes struct {
	Deliveries int64 `json:"deliveries"`
	// Each stage's p50, p99 and max, in milliseconds.
	AcceptedToFetched  percentiles `json:"accepted_to_fetched_ms"`
	FetchedToSent      percentiles `json:"fetched_to_sent_ms"`
	SentToAnswered     percentiles `json:"sent_to_answered_ms"`
	AnsweredToRecorded percentiles `json:"answered_to_recorded_ms"`
	AcceptedToAnswered percentiles `json:"accepted_to_answered_ms"`
	// AcceptedToFetchedSlow counts the deliveries whose wait for their
	// job's fetch was 50 ms or more, per 50 ms band from 50 ("50-100") to
	// 500 ("500+"): a tail made by a periodic cause (a poll, a flush)
	// piles up in one band, one made by load spreads.
	AcceptedToFetchedSlow map[string]int64 `json:"accepted_to_fetched_slow"`
}

type percentiles struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// stageTimes reads the stage times of the first attempts of deliveries
// created within [from, to) (the stage clock's offsets) that were
// delivered by the first run of their job (a message job, or a
// delivery job of their own).
func (s *stage) stageTimes(ctx context.Context, from, to time.Duration) (stageTimes, error) {
	var st stageTimes
	start := s.clock.wall(from)
	end := s.clock.wall(to)
	row := s.pool.QueryRow(ctx, `
		WITH t AS (
			SELECT extract(epoch FROM j.attempted_at - d.created_at) * 1000 AS accepted_fetched,
				extract(epoch FROM a.attempted_at - j.attempted_at) * 1000 AS fetched_sent,
				a.duration_ms AS sent_answered,
				extract(epoch FROM d.updated_at - a.attempted_at) * 1000 - a.duration_ms AS answered_recorded,
				extract(epoch FROM a.attempted_at - d.created_at) * 1000 + a.duration_ms AS accepted_answered
			FROM deliveries d
			JOIN river_job j ON j.id = d.job_id AND j.attempt = 1
			JOIN delivery_attempts a ON a.delivery_id = d.id AND a.attempt_number = 1
				AND a.attempted_at >= $1 AND a.attempted_at < $2::timestamptz + interval '1 minute'
			WHERE d.created_at >= $1 AND d.created_at < $2 AND d.status = 'delivered' AND d.attempt_count = 1
		)
		SELECT count(*),
			coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY accepted_fetched), 0), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY accepted_fetched), 0), coalesce(max(accepted_fetched), 0),
			coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY fetched_sent), 0), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY fetched_sent), 0), coalesce(max(fetched_sent), 0),
			coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY sent_answered), 0), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY sent_answered), 0), coalesce(max(sent_answered), 0),
			coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY answered_recorded), 0), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY answered_recorded), 0), coalesce(max(answered_recorded), 0),
			coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY accepted_answered), 0), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY accepted_answered), 0), coalesce(max(accepted_answered), 0)
		FROM t`, start, end)
	err := row.Scan(&st.Deliveries,
		&st.AcceptedToFetched.P50, &st.AcceptedToFetched.P99, &st.AcceptedToFetched.Max,
		&st.FetchedToSent.P50, &st.FetchedToSent.P99, &st.FetchedToSent.Max,
		&st.SentToAnswered.P50, &st.SentToAnswered.P99, &st.SentToAnswered.Max,
		&st.AnsweredToRecorded.P50, &st.AnsweredToRecorded.P99, &st.AnsweredToRecorded.Max,
		&st.AcceptedToAnswered.P50, &st.AcceptedToAnswered.P99, &st.AcceptedToAnswered.Max)
	if err != nil {
		return stageTimes{}, fmt.Errorf("read the deliveries' stage times: %w", err)
	}
	rows, err := s.pool.Query(ctx, `
		SELECT least(floor(extract(epoch FROM j.attempted_at - d.created_at) * 20), 10)::int AS band, count(*)
		FROM deliveries d
		JOIN river_job j ON j.id = d.job_id AND j.attempt = 1
		WHERE d.created_at >= $1 AND d.created_at < $2 AND d.status = 'delivered' AND d.attempt_count = 1
			AND j.attempted_at - d.created_at >= interval '50 milliseconds'
		GROUP BY 1`, start, end)
	if err != nil {
		return stageTimes{}, fmt.Errorf("read the fetch waits: %w", err)
	}
	defer rows.Close()
	st.AcceptedToFetchedSlow = map[string]int64{}
	for rows.Next() {
		var band int
		var n int64
		if err := rows.Scan(&band, &n); err != nil {
			return stageTimes{}, fmt.Errorf("read the fetch waits: %w", err)
		}
		name := fmt.Sprintf("%d-%d", band*50, band*50+50)
		if band >= 10 {
			name = "500+"
		}
		st.AcceptedToFetchedSlow[name] = n
	}
	if err := rows.Err(); err != nil {
		return stageTimes{}, fmt.Errorf("read the fetch waits: %w", err)
	}
	for _, p := range []*percentiles{&st.AcceptedToFetched, &st.FetchedToSent, &st.SentToAnswered, &st.AnsweredToRecorded, &st.AcceptedToAnswered} {
		p.P50, p.P99, p.Max = round1(p.P50), round1(p.P99), round1(p.Max)
	}
	return st, nil
}
