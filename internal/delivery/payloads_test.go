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

	"github.com/hookd/hookd/internal/store"
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

func TestPayloadRetired(t *testing.T) {
	t.Parallel()
	accepted := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	id := store.IDBound("msg", accepted) // the first id of that millisecond
	for _, tt := range []struct {
		name      string
		id        string
		age       time.Duration
		retention time.Duration
		want      bool
	}{
		{"young: a read that missed", id, time.Minute, time.Hour, false},
		{"a millisecond short of retention", id, time.Hour - time.Millisecond, time.Hour, false},
		{"exactly retention old", id, time.Hour, time.Hour, true},
		{"older than retention", id, 26 * time.Hour, 24 * time.Hour, true},
		{"database clock behind the id's time", id, -time.Minute, time.Hour, false},
		{"no retention configured", id, 100 * time.Hour, 0, false},
		{"an id naming no time", "msg_not-a-ulid", 100 * time.Hour, time.Hour, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, payloadRetired(tt.id, accepted.Add(tt.age), tt.retention))
		})
	}
}
