package destination_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/destination"
)

const redisAddr = "127.0.0.1:6379"

func TestRedisPublishes(t *testing.T) {
	t.Parallel()
	requireRunning(t, "Redis", redisAddr)
	ns := unique(t)
	stream := ns + ":events"
	admin := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() {
		_ = admin.Del(context.Background(), stream).Err()
		_ = admin.Close()
	})
	s := newSigner(t)
	pool := newPool(t, destination.Deps{})
	cfg := &destination.RedisConfig{URL: "redis://" + redisAddr, Stream: stream, MaxLen: 1000}
	require.NoError(t, cfg.Validate())

	const n = 200
	msgs := publishAll(t, pool, cfg, s, ns, n)
	require.Equal(t, 1, pool.Len(), "one pooled publisher per destination")

	entries, err := admin.XRange(context.Background(), stream, "-", "+").Result()
	require.NoError(t, err)
	got := newConsumed(t, s, msgs)
	for _, e := range entries {
		h := map[string]string{}
		for k, v := range e.Values {
			h[k] = v.(string)
		}
		require.NoError(t, got.add(h, []byte(h[destination.RedisBodyField])))
	}
	got.wait(nil)
}

func TestRedisBoundsTheStream(t *testing.T) {
	t.Parallel()
	requireRunning(t, "Redis", redisAddr)
	stream := unique(t) + ":bounded"
	admin := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() {
		_ = admin.Del(context.Background(), stream).Err()
		_ = admin.Close()
	})
	s := newSigner(t)
	pool := newPool(t, destination.Deps{})
	cfg := &destination.RedisConfig{URL: "redis://" + redisAddr, Stream: stream, MaxLen: 10}
	for i := range 500 {
		r := publish(pool, cfg, s.message("bound", i))
		require.Equal(t, destination.Confirmed, r.Outcome, "%v", r.Err)
	}
	n, err := admin.XLen(context.Background(), stream).Result()
	require.NoError(t, err)
	// MAXLEN ~ trims whole macro nodes: about 10, never all 500.
	require.Less(t, n, int64(200))
}

func TestRedisClassifiesFailures(t *testing.T) {
	t.Parallel()
	requireRunning(t, "Redis", redisAddr)
	s := newSigner(t)
	pool := newPool(t, destination.Deps{})
	m := s.message("fail", 0)

	t.Run("wrong credentials", func(t *testing.T) {
		t.Parallel()
		// No such ACL user: Redis answers WRONGPASS, and changes nothing.
		cfg := &destination.RedisConfig{URL: "redis://" + redisAddr, Stream: unique(t), Username: unique(t), Password: "wrong"}
		r := publish(pool, cfg, m)
		require.Equal(t, destination.AuthRefused, r.Outcome, "%v", r.Err)
	})
	t.Run("nothing listening", func(t *testing.T) {
		t.Parallel()
		cfg := &destination.RedisConfig{URL: "redis://" + closedAddr(t), Stream: "s"}
		requireFailedWithin(t, publishWithin(pool, cfg, m), destination.Unreachable)
	})
	t.Run("server never answers", func(t *testing.T) {
		t.Parallel()
		cfg := &destination.RedisConfig{URL: "redis://" + silentAddr(t), Stream: "s"}
		start := time.Now()
		requireFailedWithin(t, publishWithin(pool, cfg, m), destination.Timeout)
		require.Less(t, time.Since(start), publishTimeout+slack)
	})
	t.Run("guard refuses the address", func(t *testing.T) {
		t.Parallel()
		errGuard := errors.New("target address is not allowed")
		guarded := newPool(t, destination.Deps{
			DialControl: func(network, address string, _ syscall.RawConn) error { return fmt.Errorf("%s: %w", address, errGuard) },
			ErrBlocked:  errGuard,
		})
		cfg := &destination.RedisConfig{URL: "redis://" + redisAddr, Stream: "s"}
		r := publish(guarded, cfg, m)
		require.Equal(t, destination.Failed, r.Outcome)
		require.Equal(t, destination.Blocked, r.Reason, "%v", r.Err)
	})
}
