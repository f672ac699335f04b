package delivery_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestWarmCacheDeliversWithoutLoads: a warmed cache holds every live
// endpoint (none deleted, at most its limit), so a dispatcher that starts
// loads none while it delivers; an endpoint changed during the warm-up
// (its notification) is not cached from a read that may predate it.
func TestWarmCacheDeliversWithoutLoads(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	st := store.New(db.Pool, nil)
	ctx := context.Background()
	var ids []string
	for range 5 {
		ep, err := st.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/hook", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
		require.NoError(t, err)
		ids = append(ids, ep.ID)
	}
	deleted := ids[4]
	require.NoError(t, st.DeleteEndpoint(ctx, deleted))

	counter := &loadCounter{EndpointLoader: st}
	cache := delivery.NewEndpointCache(counter, time.Minute, time.Now)
	n, err := cache.Warm(ctx, st, 3)
	require.NoError(t, err)
	require.Equal(t, 3, n, "at most the limit")
	n, err = cache.Warm(ctx, st, 100)
	require.NoError(t, err)
	require.Equal(t, 4, n, "every live endpoint")
	for _, id := range ids[:4] {
		tg, err := cache.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, id, tg.ID)
	}
	require.Empty(t, counter.loads, "a warm cache loads nothing")
	_, err = cache.Get(ctx, deleted)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Len(t, counter.loads, 1, "a deleted endpoint is not warmed")

	// A notification that lands while a page is read drops the page.
	racing := delivery.NewEndpointCache(counter, time.Minute, time.Now)
	n, err = racing.Warm(ctx, invalidatingLister{st, racing, ids[0]}, 100)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Nil(t, racing.Cached(ids[1]))
}

// invalidatingLister invalidates an entry of cache while it lists, as a
// notification handled during the read would.
type invalidatingLister struct {
	*store.Store
	cache *delivery.EndpointCache
	id    string
}

func (l invalidatingLister) ListDeliveryEndpoints(ctx context.Context, after string, limit int) ([]store.Endpoint, error) {
	l.cache.Invalidate(l.id)
	return l.Store.ListDeliveryEndpoints(ctx, after, limit)
}
