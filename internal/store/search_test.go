package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
)

func TestSearchBounds(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Hour)
	// NewID never goes back in time: a cursor of the past is made by hand.
	mid := store.IDBound("msg", t0.Add(time.Minute))[:14] + "ABCDEFGHJKMNPQRS"
	cases := []struct {
		name         string
		since, until *time.Time
		after        string
		lo, hi       string
	}{
		{"everything", nil, nil, "", "msg_", "msg_~"},
		{"since", &t0, nil, "", store.IDBound("msg", t0), "msg_~"},
		{"until", nil, &t1, "", "msg_", store.IDBound("msg", t1)},
		{"range", &t0, &t1, "", store.IDBound("msg", t0), store.IDBound("msg", t1)},
		{"a cursor inside the range", &t0, &t1, mid, store.IDBound("msg", t0), mid},
		{"a cursor past the range", &t0, &t0, mid, store.IDBound("msg", t0), store.IDBound("msg", t0)},
		{"a cursor alone", nil, nil, mid, "msg_", mid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			lo, hi := store.SearchBounds("msg", c.since, c.until, c.after)
			require.Equal(t, c.lo, lo)
			require.Equal(t, c.hi, hi)
		})
	}
	// Every id sorts inside the unbounded range.
	lo, hi := store.SearchBounds("dlv", nil, nil, "")
	id := store.NewID("dlv", time.Now())
	require.True(t, lo < id && id < hi)
}

func TestStoredStatuses(t *testing.T) {
	t.Parallel()
	require.Nil(t, store.StoredStatuses(nil))
	require.Equal(t, []string{"failed"}, store.StoredStatuses([]string{"failed"}))
	require.Equal(t, []string{"pending", "waiting", "failed"}, store.StoredStatuses([]string{"delivering", "pending", "failed"}))
}

// TestSearchesPruneToTheirTimeRange: a search of messages (with their
// payloads) or deliveries with a time range reads only the partitions of
// that range (and the default partitions, which no range can exclude and
// which the maintainer keeps empty). The test fails when a plan names a
// partition outside the range.
func TestSearchesPruneToTheirTimeRange(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	b.db.DropPartitions(t, true)
	now := time.Now()
	for _, at := range []time.Time{now.Add(-4 * time.Hour), now.Add(-2 * time.Hour), now} {
		_, err := s.EnsurePartitions(ctx, at, time.Minute, 2)
		require.NoError(t, err)
	}
	parts, err := s.Partitions(ctx)
	require.NoError(t, err)
	byName := map[string]store.Partition{}
	for _, p := range parts {
		byName[p.Name] = p
	}

	// check fails if the plan reads a partition of parent outside
	// [from, to), or none of those inside.
	check := func(name, parent string, from, to time.Time, rels []string) {
		t.Helper()
		read := 0
		for _, r := range rels {
			if !strings.HasPrefix(r, parent+"_") || r == parent+"_default" {
				continue
			}
			p, ok := byName[r]
			require.True(t, ok, "%s reads %s", name, r)
			require.Equal(t, parent, p.Parent)
			require.True(t, p.To.After(from) && p.From.Before(to), "%s reads %s [%v, %v), outside [%v, %v)", name, r, p.From, p.To, from, to)
			read++
		}
		require.NotZero(t, read, "%s reads no %s partition of its range: %v", name, parent, rels)
	}
	from, to := now.Add(-2*time.Hour-30*time.Second), now.Add(-2*time.Hour+30*time.Second)
	cursor := store.IDBound("dlv", now.Add(-2*time.Hour))

	lo, hi := store.SearchBounds("msg", &from, &to, "")
	for _, c := range []struct {
		name              string
		tenant, eventType string
	}{{"messages", "", ""}, {"a tenant's messages", "acme", ""}, {"messages of an event type", "", "invoice.paid"}} {
		rels := planRelations(t, b, store.SearchMessagesSQL, lo, hi, c.tenant, c.eventType, 50, true, c.tenant == "")
		check(c.name, "messages", from, to, rels)
		check(c.name+" (payloads)", "message_payloads", from, to, rels)
	}
	msgLo, msgHi := store.SearchBounds("msg", &from, nil, store.IDBound("msg", now.Add(-2*time.Hour)))
	check("messages since a time, below a cursor", "messages", from, now.Add(-2*time.Hour+time.Millisecond),
		planRelations(t, b, store.SearchMessagesSQL, msgLo, msgHi, "", "", 50, false, true))

	lo, hi = store.SearchBounds("dlv", &from, &to, "")
	for _, c := range []struct {
		name                      string
		tenant, endpoint, message string
		stored, shown             []string
	}{
		{"deliveries", "", "", "", nil, nil},
		{"failed deliveries", "", "", "", []string{"failed"}, []string{"failed"}},
		{"an endpoint's failed deliveries", "", "ep_x", "", []string{"failed"}, []string{"failed"}},
		{"a tenant's delivering deliveries", "acme", "", "", []string{"pending", "waiting"}, []string{"delivering"}},
		{"a message's deliveries", "", "", "msg_x", nil, nil},
	} {
		check(c.name, "deliveries", from, to,
			planRelations(t, b, store.SearchDeliveriesSQL, lo, hi, c.tenant, c.endpoint, c.message, c.stored, c.shown, 50, c.tenant == ""))
	}
	lo, hi = store.SearchBounds("dlv", &from, nil, cursor)
	check("deliveries since a time, below a cursor", "deliveries", from, now.Add(-2*time.Hour+time.Millisecond),
		planRelations(t, b, store.SearchDeliveriesSQL, lo, hi, "", "", "", nil, nil, 50, true))
}
