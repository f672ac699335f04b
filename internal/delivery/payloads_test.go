package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type countingLoader struct {
	calls atomic.Int64
	ids   atomic.Int64
}

func (c *countingLoader) MessagePayloads(_ context.Context, ids []string) (map[string]json.RawMessage, error) {
	c.calls.Add(1)
	c.ids.Add(int64(len(ids)))
	out := map[string]json.RawMessage{}
	for _, id := range ids {
		if id != "missing" {
			out[id] = json.RawMessage(`{"id":"` + id + `"}`)
		}
	}
	return out, nil
}

func TestPayloadsBatchAndCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := &countingLoader{}
	p := newPayloads(l, 5*time.Millisecond, 1<<20)

	// 40 workers asking for 10 messages at once share one query.
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("msg_%d", i%10)
			got, err := p.get(ctx, id)
			if err != nil || string(got) != `{"id":"`+id+`"}` {
				t.Errorf("get %s: %s %v", id, got, err)
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, l.calls.Load(), int64(2), "concurrent requests share a query")
	calls := l.calls.Load()
	// A fanned-out message's other deliveries hit the cache.
	for i := range 10 {
		_, err := p.get(ctx, fmt.Sprintf("msg_%d", i))
		require.NoError(t, err)
	}
	require.Equal(t, calls, l.calls.Load())

	_, err := p.get(ctx, "missing")
	require.ErrorIs(t, err, errPayloadGone, "a payload the database does not have is gone for good")
}

func TestPayloadsCacheIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := &countingLoader{}
	p := newPayloads(l, 0, 200)
	for i := range 50 {
		_, err := p.get(ctx, fmt.Sprintf("m%02d", i))
		require.NoError(t, err)
	}
	require.LessOrEqual(t, p.bytes, 200)
	require.Equal(t, p.order.Len(), len(p.cache))
	before := l.calls.Load()
	_, err := p.get(ctx, "m49") // the newest is still cached
	require.NoError(t, err)
	require.Equal(t, before, l.calls.Load())
	_, err = p.get(ctx, "m00") // the oldest was evicted
	require.NoError(t, err)
	require.Equal(t, before+1, l.calls.Load())
}
