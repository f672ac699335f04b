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
