package store_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
)

// TestDeliveryIDFollowsFromMessageAndEndpoint: a delivery's id carries its
// message's time (so they share a partition), is the same for the same
// pair and differs between endpoints and between messages.
func TestDeliveryIDFollowsFromMessageAndEndpoint(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 4, 5, 6, 7, 8_000_000, time.UTC)
	m1, m2 := store.NewID("msg", at), store.NewID("msg", at)
	id := store.DeliveryID(m1, "ep_a")
	require.Regexp(t, regexp.MustCompile(`^dlv_[0-9A-HJKMNP-TV-Z]{26}$`), id)
	got, ok := store.IDTime(id)
	require.True(t, ok)
	want, ok := store.IDTime(m1)
	require.True(t, ok)
	require.True(t, want.Equal(got))
	require.Equal(t, id, store.DeliveryID(m1, "ep_a"))
	require.NotEqual(t, id, store.DeliveryID(m1, "ep_b"))
	require.NotEqual(t, id, store.DeliveryID(m2, "ep_a"))
}

// TestDeliveryIDGolden pins DeliveryID's output: message jobs name their
// deliveries by message and endpoint only, so a dispatcher of another
// version must derive the same ids from a job queued by this one (a
// rolling upgrade, a rollback). Changing the function is a new job
// arguments version, never an edit of these.
func TestDeliveryIDGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ message, endpoint, want string }{
		{"msg_01JNQ8Z6B2W3X4Y5Z6A7B8C9D0", "ep_01JNQ8Z6B2W3X4Y5Z6A7B8C9D1", "dlv_01JNQ8Z6B2SVJK4GPBEH1P4Z1N"},
		{"msg_01JNQ8Z6B2W3X4Y5Z6A7B8C9D0", "ep_other", "dlv_01JNQ8Z6B2272507T11AB6D70A"},
		{"msg_01KA000000AAAAAAAAAAAAAAAA", "ep_01JNQ8Z6B2W3X4Y5Z6A7B8C9D1", "dlv_01KA000000MM2T668YDE3181W8"},
		{"msg_short", "ep_x", "dlv_short00000W8PBJZF8X5A4EDYE"},
	} {
		require.Equal(t, tc.want, store.DeliveryID(tc.message, tc.endpoint), "%s %s", tc.message, tc.endpoint)
	}
}
