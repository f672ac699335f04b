package cli

import (
	"context"
	"errors"
	"iter"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	hookd "github.com/hookd/hookd/sdk/go"
	"github.com/hookd/hookd/sdk/go/api"
)

// fakeDeliveries answers tail's reads from a table of deliveries the test
// changes between polls, and records what was asked.
type fakeDeliveries struct {
	all   map[string]hookd.Delivery
	stale map[string]hookd.Delivery // what the lists answer instead, when set
	gets  []string
}

func (f *fakeDeliveries) All(_ context.Context, filter *hookd.DeliveryFilter) iter.Seq2[hookd.Delivery, error] {
	return func(yield func(hookd.Delivery, error) bool) {
		for _, id := range slices.Sorted(func(y func(string) bool) {
			for id := range f.all {
				if !y(id) {
					return
				}
			}
		}) {
			d := f.all[id]
			if s, ok := f.stale[id]; ok {
				d = s
			}
			if filter.Since != nil && d.CreatedAt.Before(*filter.Since) {
				continue
			}
			if filter.Status != nil && *filter.Status == openStatuses && isFinal(d.Status) {
				continue
			}
			if !yield(d, nil) {
				return
			}
		}
	}
}

func (f *fakeDeliveries) Get(_ context.Context, id string) (*hookd.Delivery, error) {
	f.gets = append(f.gets, id)
	d, ok := f.all[id]
	if !ok {
		return nil, errors.New("not found")
	}
	return &d, nil
}

type fakeMessages map[string]string

func (f fakeMessages) Get(_ context.Context, id string) (*hookd.Message, error) {
	return &hookd.Message{ID: id, EventType: f[id]}, nil
}

func TestFollower(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	dlv := func(id string, created time.Duration, st api.DeliveryStatus, attempts int, updated time.Duration) hookd.Delivery {
		return hookd.Delivery{ID: id, MessageID: "msg_" + id, CreatedAt: t0.Add(created), Status: st, AttemptCount: attempts, Series: 1, UpdatedAt: t0.Add(updated)}
	}
	type step struct {
		now     time.Duration
		set     []hookd.Delivery // the deliveries' states before this poll
		stale   []hookd.Delivery // what the lists answer instead (an older read)
		printed []string         // "id status attempts" printed by this poll
		gets    []string         // the deliveries read one by one
	}
	for _, tc := range []struct {
		name      string
		statuses  []api.DeliveryStatus
		eventType string
		steps     []step
	}{
		{
			name: "each change once, a final one gone from both lists read by id",
			steps: []step{
				{now: time.Second, set: []hookd.Delivery{dlv("a", 0, "pending", 0, 0)}, printed: []string{"a pending 0"}},
				{now: 2 * time.Second, set: []hookd.Delivery{dlv("a", 0, "pending", 1, 2*time.Second)}, printed: []string{"a pending 1"}},
				{now: 3 * time.Second, printed: nil},
				// Past the window: only the open list and the read by id see it.
				{now: 5 * time.Minute, set: []hookd.Delivery{dlv("a", 0, "delivered", 2, 4*time.Minute)}, printed: []string{"a delivered 2"}, gets: []string{"a"}},
				{now: 6 * time.Minute, printed: nil},
			},
		},
		{
			name: "an older read than the one printed is ignored",
			steps: []step{
				{now: time.Second, set: []hookd.Delivery{dlv("a", 0, "delivered", 1, time.Second)}, printed: []string{"a delivered 1"}},
				{now: 2 * time.Second, stale: []hookd.Delivery{dlv("a", 0, "pending", 0, 0)}, printed: nil},
			},
		},
		{
			name: "a delivery committed late, already final, is seen within the window",
			steps: []step{
				{now: time.Second, printed: nil},
				{now: 20 * time.Second, set: []hookd.Delivery{dlv("b", 500*time.Millisecond, "failed", 2, 19*time.Second)}, printed: []string{"b failed 2"}},
			},
		},
		{
			name:     "the status filter prints the matching states only",
			statuses: []api.DeliveryStatus{"failed"},
			steps: []step{
				{now: time.Second, set: []hookd.Delivery{dlv("a", 0, "pending", 0, 0), dlv("b", 0, "pending", 0, 0)}, printed: nil},
				{now: 2 * time.Second, set: []hookd.Delivery{dlv("a", 0, "failed", 2, 2*time.Second), dlv("b", 0, "delivered", 1, 2*time.Second)}, printed: []string{"a failed 2"}},
			},
		},
		{
			name:      "the event type filter prints the deliveries of its messages only",
			eventType: "invoice.paid",
			steps: []step{
				{now: time.Second, set: []hookd.Delivery{dlv("a", 0, "pending", 0, 0), dlv("b", 0, "pending", 0, 0)}, printed: []string{"a pending 0"}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src := &fakeDeliveries{all: map[string]hookd.Delivery{}}
			var now time.Time
			var printed []string
			statuses := map[api.DeliveryStatus]bool{}
			for _, s := range tc.statuses {
				statuses[s] = true
			}
			f := &follower{
				deliveries: src, messages: fakeMessages{"msg_a": "invoice.paid", "msg_b": "invoice.sent"},
				filter: hookd.DeliveryFilter{Since: &t0}, statuses: statuses, eventType: tc.eventType,
				window: time.Minute, now: func() time.Time { return now },
				emit: func(d hookd.Delivery) error {
					printed = append(printed, d.ID+" "+string(d.Status)+" "+itoa(d.AttemptCount))
					return nil
				},
			}
			f.init()
			for i, st := range tc.steps {
				now = t0.Add(st.now)
				for _, d := range st.set {
					src.all[d.ID] = d
				}
				src.stale = map[string]hookd.Delivery{}
				for _, d := range st.stale {
					src.stale[d.ID] = d
				}
				printed, src.gets = nil, nil
				require.NoError(t, f.poll(context.Background()))
				require.Equal(t, st.printed, printed, "poll %d printed", i)
				require.Equal(t, st.gets, src.gets, "poll %d read by id", i)
			}
		})
	}
}

func itoa(n int) string { return fmtInt(&n) }
