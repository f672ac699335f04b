package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/riverqueue/river"

	"github.com/hookd/hookd/internal/store"
)

// An endpoint's rate limit binds the whole fleet through one ledger row in
// Postgres (store.BookRateSlot): every delivery to a rate-limited endpoint
// books the endpoint's next slot there, one interval (1/limit seconds)
// after the slot any process booked before it, so the slots of the whole
// fleet are spaced by the interval whatever its size and whoever starts,
// stops or dies. A delivery over the pace is snoozed, which uses no attempt
// and tells the breaker nothing.
//
// A slot is at most rateHorizon ahead: the job is snoozed until then with
// the slot in its metadata, so whichever process runs the job at that time
// sends it without booking again. A delivery that finds the endpoint booked
// beyond the horizon books nothing and comes back once the horizon has
// moved on. The horizon is below River's scheduler interval, so a job
// snoozed to its slot is available at that time rather than when the
// scheduler next runs.
const rateHorizon = 4 * time.Second

// slotGrace is how late a job may run and still use its slot; a later one
// books again. Sends within a window then have slots within it or at most
// slotGrace before it, so late jobs cannot bunch up above the limit (a busy
// process, a slow fetch).
const slotGrace = 500 * time.Millisecond

// metaRateSlot is the job metadata key holding a booked slot.
const metaRateSlot = "hookd_rate_slot"

// rateSlot is a slot booked for one run of a job: Attempt is the job's
// attempt number it was booked for (a retry books anew).
type rateSlot struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
}

// slotOf returns the slot the job's metadata holds for its current attempt.
func slotOf(r *run) (time.Time, bool) {
	if !bytes.Contains(r.metadata, []byte(metaRateSlot)) {
		return time.Time{}, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(r.metadata, &m) != nil {
		return time.Time{}, false
	}
	var s rateSlot
	if json.Unmarshal(m[metaRateSlot], &s) != nil || s.Attempt != r.jobAttempt || s.At.IsZero() {
		return time.Time{}, false
	}
	return s.At, true
}

// RateSlots books send slots of rate-limited endpoints for the fleet.
type RateSlots interface {
	BookRateSlot(ctx context.Context, endpointID string, interval, horizon time.Duration) (store.RateSlot, error)
}

var _ RateSlots = (*store.Store)(nil)

// bookedUntil remembers, per endpoint, the first free slot of the last
// booking this process was refused: until that slot is within the horizon
// every booking would be refused too (a ledger row's next slot only moves
// on), so a backlog's deliveries wait without a round trip each.
type bookedUntil struct {
	mu    sync.Mutex
	until map[string]time.Time // endpoint id -> first free slot
}

func newBookedUntil() *bookedUntil { return &bookedUntil{until: map[string]time.Time{}} }

// maxPacedIdle bounds the endpoints whose refusals are remembered.
const maxPacedIdle = 1024

// get returns the endpoint's remembered first free slot when it is still
// beyond the horizon from now.
func (b *bookedUntil) get(id string, now time.Time, horizon time.Duration) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	at, ok := b.until[id]
	if !ok || at.Sub(now) <= horizon {
		return time.Time{}, false
	}
	return at, true
}

func (b *bookedUntil) set(id string, at, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.until) >= maxPacedIdle {
		for k, v := range b.until {
			if v.Before(now) {
				delete(b.until, k)
			}
		}
	}
	if at.After(b.until[id]) {
		b.until[id] = at
	}
}

// rateWait returns how long the delivery must wait under its endpoint's
// rate limit (zero: send now), or the error of a booking that failed:
// nothing is sent without a slot.
func (w *Worker) rateWait(ctx context.Context, r *run, t *Target) (time.Duration, error) {
	now := w.deps.Now()
	if at, ok := slotOf(r); ok && now.Sub(at) <= slotGrace {
		// Booked by an earlier run, here or in another process.
		return max(at.Sub(now), 0), nil
	}
	if at, ok := w.booked.get(t.ID, now, rateHorizon); ok {
		return at.Sub(now) + w.jitter(), nil
	}
	interval := time.Duration(float64(time.Second) / float64(*t.RateLimit))
	slot, err := w.deps.RateSlots.BookRateSlot(ctx, t.ID, interval, rateHorizon)
	if err != nil {
		return 0, err
	}
	// Waits are measured on the database's clock, which stamped the slot.
	if !slot.Booked {
		// Booked up beyond the horizon: come back when it has moved on.
		w.booked.set(t.ID, slot.At, slot.Now)
		return slot.At.Sub(slot.Now) + w.jitter(), nil
	}
	wait := slot.At.Sub(slot.Now)
	if wait > 0 {
		_ = river.MetadataSet(ctx, metaRateSlot, rateSlot{Attempt: r.jobAttempt, At: slot.At}) // fails only outside River (unit tests)
	}
	return wait, nil
}

// rateLimited snoozes a delivery over its endpoint's rate limit, counting
// the wait and, for a wait long enough to see, showing it as the
// delivery's next_attempt_at.
func (w *Worker) rateLimited(r *run, t *Target, wait time.Duration) error {
	if w.deps.Metrics != nil {
		w.deps.Metrics.RateLimited.WithLabelValues(w.deps.Metrics.Labels.Label(t.ID)).Inc()
	}
	if wait >= visibleRateWait {
		next := w.deps.Now().Add(wait)
		w.deps.Ledger.RecordAsync(store.StatusUpdate{
			DeliveryID: r.args.DeliveryID, Series: r.args.Series, Status: store.DeliveryPending,
			NextAttemptAt: &next, JobID: r.jobID, Claim: r.claim(),
		})
	}
	return waitFor(wait)
}

// visibleRateWait is the shortest rate-limit wait written to the delivery's
// next_attempt_at: shorter ones would cost a write each for nothing a
// reader could see.
const visibleRateWait = time.Second
