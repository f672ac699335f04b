package store

import (
	"context"
	"fmt"
	"time"
)

// RateSlot is the answer of a rate slot booking.
type RateSlot struct {
	// Booked says At is this delivery's slot; otherwise the endpoint is
	// booked beyond the horizon and At is its first free slot.
	Booked bool
	At     time.Time
	// Now is the database's clock at the booking.
	Now time.Time
}

// bookRateSlotSQL books an endpoint's next slot ($2: the interval between
// slots, $3: the horizon) on the database's clock, or books nothing when
// the next free slot is beyond the horizon. The row is locked for the
// UPDATE alone (one statement, its own transaction), so bookings of every
// dispatcher queue on it and each gets a slot one interval after the last.
// The last column reads the row as it was before this statement: the first
// free slot when nothing was booked, NULL when the endpoint has no row yet.
const bookRateSlotSQL = `
	WITH u AS (
		UPDATE endpoint_rate_slots SET next_slot = greatest(next_slot, clock_timestamp()) + $2::interval
		WHERE endpoint_id = $1 AND next_slot <= clock_timestamp() + $3::interval
		RETURNING next_slot - $2::interval AS slot
	)
	SELECT (SELECT slot FROM u), clock_timestamp(), (SELECT next_slot FROM endpoint_rate_slots WHERE endpoint_id = $1)`

// BookRateSlot books the next slot of a rate-limited endpoint for the
// whole fleet: the earliest time, at most horizon ahead, one interval
// after the slot booked before it by any process. When the endpoint is
// booked beyond the horizon it books nothing and returns the first free
// slot.
func (s *Store) BookRateSlot(ctx context.Context, endpointID string, interval, horizon time.Duration) (RateSlot, error) {
	for range 2 {
		var (
			slot, next *time.Time
			now        time.Time
		)
		if err := s.pool.QueryRow(ctx, bookRateSlotSQL, endpointID, interval, horizon).Scan(&slot, &now, &next); err != nil {
			return RateSlot{}, fmt.Errorf("book rate slot: %w", err)
		}
		switch {
		case slot != nil:
			return RateSlot{Booked: true, At: slot.UTC(), Now: now.UTC()}, nil
		case next != nil && next.Sub(now) > horizon:
			return RateSlot{At: next.UTC(), Now: now.UTC()}, nil
		case next != nil:
			// Refused on a row version booked after this statement's
			// snapshot: read the one that refused it.
			if err := s.pool.QueryRow(ctx, `SELECT next_slot, clock_timestamp() FROM endpoint_rate_slots WHERE endpoint_id = $1`, endpointID).Scan(&next, &now); err != nil {
				return RateSlot{}, fmt.Errorf("book rate slot: %w", err)
			}
			return RateSlot{At: next.UTC(), Now: now.UTC()}, nil
		}
		// The endpoint's first booking: make its row, free from now.
		if _, err := s.pool.Exec(ctx, `INSERT INTO endpoint_rate_slots (endpoint_id, next_slot) VALUES ($1, 'epoch') ON CONFLICT DO NOTHING`, endpointID); err != nil {
			return RateSlot{}, fmt.Errorf("book rate slot: %w", err)
		}
	}
	return RateSlot{}, fmt.Errorf("book rate slot: no ledger row for endpoint %s", endpointID)
}
