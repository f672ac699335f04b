package delivery

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBookedUntilSkipsOnlyRefusedBookings: a remembered first free slot
// answers only while it is beyond the horizon, per endpoint, and never
// moves back.
func TestBookedUntilSkipsOnlyRefusedBookings(t *testing.T) {
	t.Parallel()
	b := newBookedUntil()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	_, ok := b.get("ep_a", now, 2*time.Second)
	require.False(t, ok, "nothing remembered: book")
	b.set("ep_a", now.Add(5*time.Second), now)
	at, ok := b.get("ep_a", now, 2*time.Second)
	require.True(t, ok)
	require.Equal(t, now.Add(5*time.Second), at)
	_, ok = b.get("ep_b", now, 2*time.Second)
	require.False(t, ok, "another endpoint books")
	b.set("ep_a", now.Add(4*time.Second), now)
	at, _ = b.get("ep_a", now, 2*time.Second)
	require.Equal(t, now.Add(5*time.Second), at, "an older answer never moves it back")
	_, ok = b.get("ep_a", now.Add(3*time.Second), 2*time.Second)
	require.False(t, ok, "within the horizon: book again")
}

// TestSlotOfReadsTheCurrentAttemptsSlot: a slot is honoured only for the
// attempt it was booked for.
func TestSlotOfReadsTheCurrentAttemptsSlot(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)
	meta, err := json.Marshal(map[string]any{metaRateSlot: rateSlot{Attempt: 1, At: at}, "snoozes": 3})
	require.NoError(t, err)
	r := &run{jobAttempt: 1, metadata: meta}
	got, ok := slotOf(r)
	require.True(t, ok)
	require.True(t, at.Equal(got))

	r.jobAttempt = 2
	_, ok = slotOf(r)
	require.False(t, ok, "a retry books anew")
	_, ok = slotOf(&run{jobAttempt: 1, metadata: []byte(`{}`)})
	require.False(t, ok)
}
