package delivery

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
)

// TestRatePacerBooksSlots: deliveries to one endpoint get slots
// 1/perSecond apart from now, none beyond the horizon; another endpoint
// has its own slots, and an idle endpoint starts again from now.
func TestRatePacerBooksSlots(t *testing.T) {
	t.Parallel()
	p := newRatePacer()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 5 {
		at, ok := p.book("ep_a", 2, now, 2*time.Second)
		require.True(t, ok, i)
		require.Equal(t, now.Add(time.Duration(i)*500*time.Millisecond), at, i)
	}
	at, ok := p.book("ep_a", 2, now, 2*time.Second)
	require.False(t, ok, "2.5s ahead is beyond the horizon")
	require.Equal(t, now.Add(2500*time.Millisecond), at)

	at, ok = p.book("ep_b", 2, now, 2*time.Second)
	require.True(t, ok)
	require.Equal(t, now, at)

	later := now.Add(time.Minute)
	at, ok = p.book("ep_a", 2, later, 2*time.Second)
	require.True(t, ok)
	require.Equal(t, later, at, "no credit is saved up while idle, and no debt kept")
}

// TestSlotOfReadsTheCurrentAttemptsSlot: a slot is honoured only for the
// attempt it was booked for.
func TestSlotOfReadsTheCurrentAttemptsSlot(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)
	meta, err := json.Marshal(map[string]any{metaRateSlot: rateSlot{Attempt: 1, At: at}, "snoozes": 3})
	require.NoError(t, err)
	job := &river.Job[DeliverArgs]{JobRow: &rivertype.JobRow{Attempt: 1, Metadata: meta}}
	got, ok := slotOf(job)
	require.True(t, ok)
	require.True(t, at.Equal(got))

	job.Attempt = 2
	_, ok = slotOf(job)
	require.False(t, ok, "a retry books anew")
	_, ok = slotOf(&river.Job[DeliverArgs]{JobRow: &rivertype.JobRow{Attempt: 1, Metadata: []byte(`{}`)}})
	require.False(t, ok)
}
