package store_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestBookRateSlotSpacesTheFleetsSlots: three processes (pools of their
// own) book one endpoint's slots at once; every slot booked by any of them
// is at least one interval after the one before it and within the horizon
// of its booking, a refused booking names a first free slot ahead, and
// another endpoint's first slot is free at once.
func TestBookRateSlotSpacesTheFleetsSlots(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	e, err := store.New(db.Pool, nil).CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/hook", Secret: testSecret})
	require.NoError(t, err)
	const (
		interval = 50 * time.Millisecond
		horizon  = 300 * time.Millisecond
	)
	var (
		mu      sync.Mutex
		slots   []time.Time
		refused int
	)
	var g errgroup.Group
	for range 3 {
		pool, err := store.OpenPool(ctx, store.PoolConfig{URL: db.URL, MaxConns: 4})
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		s := store.New(pool, nil)
		for range 4 {
			g.Go(func() error {
				for range 25 {
					slot, err := s.BookRateSlot(ctx, e.ID, interval, horizon)
					if err != nil {
						return err
					}
					mu.Lock()
					if slot.Booked {
						slots = append(slots, slot.At)
						if slot.At.Sub(slot.Now) > horizon {
							t.Errorf("slot %s is beyond the horizon of its booking at %s", slot.At, slot.Now)
						}
					} else {
						refused++
						if !slot.At.After(slot.Now) {
							t.Errorf("refused with a free slot %s not after %s", slot.At, slot.Now)
						}
					}
					mu.Unlock()
				}
				return nil
			})
		}
	}
	require.NoError(t, g.Wait())
	require.Positive(t, refused, "300 bookings at once run past a 300 ms horizon of 50 ms slots")
	slices.SortFunc(slots, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(slots); i++ {
		require.GreaterOrEqual(t, slots[i].Sub(slots[i-1]), interval, "slots %d and %d", i-1, i)
	}

	other, err := store.New(db.Pool, nil).BookRateSlot(ctx, "ep_other", time.Second, horizon)
	require.NoError(t, err)
	require.True(t, other.Booked)
	require.WithinDuration(t, other.Now, other.At, 50*time.Millisecond, "an endpoint's first slot is now")
}

// BenchmarkBookRateSlot is one booking of a rate-limited endpoint's slot:
// a round trip and a one-row UPDATE, the cost a delivery to such an
// endpoint adds (none is booked when the endpoint has no rate_limit).
// "round trip" is a SELECT 1 on the same pool, the baseline to compare
// with; "parallel" books one endpoint from every goroutine, so it measures
// the row's queue too. wal-B/op is the WAL each booking writes.
func BenchmarkBookRateSlot(b *testing.B) {
	db := storetest.New(b)
	ctx := context.Background()
	s := store.New(db.Pool, nil)
	wal := func() (lsn int64) {
		require.NoError(b, db.Pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - '0/0'`).Scan(&lsn))
		return lsn
	}
	b.Run("round trip", func(b *testing.B) {
		for b.Loop() {
			if _, err := db.Pool.Exec(ctx, `SELECT 1`); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("serial", func(b *testing.B) {
		from := wal()
		for b.Loop() {
			if _, err := s.BookRateSlot(ctx, "ep_bench_serial", time.Microsecond, time.Hour); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(wal()-from)/float64(b.N), "wal-B/op")
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.BookRateSlot(ctx, "ep_bench_parallel", time.Microsecond, time.Hour); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// TestUpgradeBooksRateSlotsOfExistingEndpoints: a database of the schema
// before the slot ledger, with a rate-limited endpoint, migrates; the
// endpoint's first booking makes its row and the next is one interval on.
func TestUpgradeBooksRateSlotsOfExistingEndpoints(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	resetTo(t, db, 25)
	_, err := db.Pool.Exec(ctx, `
		INSERT INTO endpoints (id, tenant_id, url, secret, rate_limit) VALUES ('ep_limited', 'acme', 'https://example.com/h', 'whsec_x', 5);
		INSERT INTO breaker_states (endpoint_id) VALUES ('ep_limited')`)
	require.NoError(t, err)

	require.NoError(t, store.Migrate(ctx, db.Pool, nil))
	s := store.New(db.Pool, nil)
	first, err := s.BookRateSlot(ctx, "ep_limited", 10*time.Second, time.Minute)
	require.NoError(t, err)
	require.True(t, first.Booked)
	second, err := s.BookRateSlot(ctx, "ep_limited", 10*time.Second, time.Minute)
	require.NoError(t, err)
	require.True(t, second.Booked)
	require.Equal(t, 10*time.Second, second.At.Sub(first.At), "the next slot is one interval after the first")
}
