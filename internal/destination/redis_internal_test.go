package destination

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/netcut"
)

// A pooled connection the server closed while it sat idle (a restart,
// the server's idle timeout) is replaced when taken, not handed to the
// next publish to fail.
func TestRedisReplacesAConnectionClosedWhileIdle(t *testing.T) {
	t.Parallel()
	c, err := net.DialTimeout("tcp", "127.0.0.1:6379", 5*time.Second)
	require.NoError(t, err, "Redis must run on 127.0.0.1:6379 (deploy/test-deps.sh starts it)")
	_ = c.Close()
	proxy, err := netcut.Start("127.0.0.1:6379")
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	stream := "hookdtest:" + t.Name()
	cfg := RedisConfig{URL: "redis://" + proxy.Addr(), Stream: stream, MaxLen: 10}
	p := newRedis(cfg, PoolConfig{DialTimeout: 5 * time.Second}, Deps{})
	t.Cleanup(p.Close)
	p.checkIdle = 0 // check every connection taken from the pool
	t.Cleanup(func() { delStream(t, stream) })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := Message{ID: "msg_1", Body: []byte(`{}`)}
	r := p.Publish(ctx, m)
	require.Equal(t, Confirmed, r.Outcome, "%v", r.Err)

	// The pooled connection is closed from the server's side; a new one
	// gets through.
	proxy.Cut()
	require.NoError(t, proxy.Restore(ctx))
	r = p.Publish(ctx, m)
	require.Equal(t, Confirmed, r.Outcome, "the closed connection was replaced: %v", r.Err)
}

// delStream deletes a test's stream.
func delStream(t *testing.T, stream string) {
	p := newRedis(RedisConfig{URL: "redis://127.0.0.1:6379", Stream: stream}, PoolConfig{}, Deps{})
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := p.pool.GetContext(ctx)
	if err == nil {
		defer conn.Close()
		_, err = conn.Do("DEL", stream)
	}
	if err != nil {
		t.Logf("delete %s: %v", stream, err)
	}
}
