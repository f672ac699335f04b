package delivery

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
)

// TestLedgerWakesRunOnlyForARecordThatCanEndItsWait: Run waits for a
// first record, then for its batch to fill, its spacing to pass, or a
// FIFO endpoint's record (whose cap is shorter). A record that can end
// none of those waits joins the batch without waking Run, which would
// only wait again: in a fleet, whose spacing keeps Run waiting most of
// the time, that was a goroutine switch per delivery.
func TestLedgerWakesRunOnlyForARecordThatCanEndItsWait(t *testing.T) {
	t.Parallel()
	l := NewLedger(nil, slog.New(slog.DiscardHandler), LedgerConfig{MaxBatch: 10})
	woken := func() bool {
		select {
		case <-l.wake:
			return true
		default:
			return false
		}
	}
	update := func(i int) store.StatusUpdate {
		return store.StatusUpdate{DeliveryID: fmt.Sprintf("dlv_%d", i), Series: 1, Status: store.DeliveryDelivered}
	}
	tests := []struct {
		name    string
		ordered bool
		want    bool
	}{
		{"the first record: Run waits for one", false, true},
		{"the second", false, false},
		{"the third", false, false},
		{"a FIFO endpoint's: its cap may have passed", true, true},
		{"the fifth", false, false},
		{"the sixth", false, false},
		{"the seventh", false, false},
		{"the eighth", false, false},
		{"the ninth", false, false},
		{"the tenth fills the batch", false, true},
		{"past the batch", false, true},
	}
	for i, tt := range tests {
		u := update(i)
		u.Ordered = tt.ordered
		require.True(t, l.enqueue(ledgerEntry{update: u}), tt.name)
		require.Equal(t, tt.want, woken(), tt.name)
	}
}
