package destination_test

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/destination"
)

const redisAddr = "127.0.0.1:6379"

func TestRedisPublishes(t *testing.T) {
	t.Parallel()
	requireRunning(t, "Redis", redisAddr)
	ns := unique(t)
	stream := ns + ":events"
	admin := redisAdmin(t, stream)
	s := newSigner(t)
	pool := newPool(t, destination.Deps{})
	cfg := &destination.RedisConfig{URL: "redis://" + redisAddr, Stream: stream, MaxLen: 1000}
	require.NoError(t, cfg.Validate())

	const n = 200
	msgs := publishAll(t, pool, cfg, s, ns, n)
	require.Equal(t, 1, pool.Len(), "one pooled publisher per destination")

	got := newConsumed(t, s, msgs)
	for _, h := range xrange(t, admin, stream) {
		require.NoError(t, got.add(h, []byte(h[destination.RedisBodyField])))
	}
	got.wait(nil)
}

func TestRedisBoundsTheStream(t *testing.T) {
	t.Parallel()
	requireRunning(t, "Redis", redisAddr)
	stream := unique(t) + ":bounded"
	admin := redisAdmin(t, stream)
	s := newSigner(t)
	pool := newPool(t, destination.Deps{})
	cfg := &destination.RedisConfig{URL: "redis://" + redisAddr, Stream: stream, MaxLen: 10}
	for i := range 500 {
		r := publish(pool, cfg, s.message("bound", i))
		require.Equal(t, destination.Confirmed, r.Outcome, "%v", r.Err)
	}
	n, err := redis.Int64(admin.Do("XLEN", stream))
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

// redisAdmin is a connection to the machine's Redis that deletes the
// test's stream at its end.
func redisAdmin(t *testing.T, stream string) redis.Conn {
	t.Helper()
	c, err := redis.Dial("tcp", redisAddr, redis.DialConnectTimeout(5*time.Second), redis.DialReadTimeout(10*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = c.Do("DEL", stream)
		_ = c.Close()
	})
	return c
}

// xrange is every entry of a stream, its fields by name.
func xrange(t *testing.T, c redis.Conn, stream string) []map[string]string {
	t.Helper()
	entries, err := redis.Values(c.Do("XRANGE", stream, "-", "+"))
	require.NoError(t, err)
	out := make([]map[string]string, 0, len(entries))
	for _, e := range entries {
		idFields, err := redis.Values(e, nil)
		require.NoError(t, err)
		require.Len(t, idFields, 2)
		fields, err := redis.StringMap(idFields[1], nil)
		require.NoError(t, err)
		out = append(out, fields)
	}
	return out
}
