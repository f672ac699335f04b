package destination

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A pooled connection the server closed while it sat idle (a restart,
// the server's idle timeout) is replaced when taken, not handed to the
// next publish to fail.
func TestRedisReplacesAConnectionClosedWhileIdle(t *testing.T) {
	t.Parallel()
	c, err := net.DialTimeout("tcp", "127.0.0.1:6379", 5*time.Second)
	require.NoError(t, err, "Redis must run on 127.0.0.1:6379 (deploy/test-deps.sh starts it)")
	_ = c.Close()
	proxy := newCuttingProxy(t, "127.0.0.1:6379")
	stream := "hookdtest:" + t.Name()
	cfg := RedisConfig{URL: "redis://" + proxy.addr(), Stream: stream, MaxLen: 10}
	p := newRedis(cfg, PoolConfig{DialTimeout: 5 * time.Second}, Deps{})
	t.Cleanup(p.Close)
	p.checkIdle = 0 // check every connection taken from the pool
	t.Cleanup(func() { delStream(t, stream) })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := Message{ID: "msg_1", Body: []byte(`{}`)}
	r := p.Publish(ctx, m)
	require.Equal(t, Confirmed, r.Outcome, "%v", r.Err)
	require.Equal(t, 1, proxy.accepted())

	proxy.cut() // the server's end of the pooled connection closes
	r = p.Publish(ctx, m)
	require.Equal(t, Confirmed, r.Outcome, "%v", r.Err)
	require.Equal(t, 2, proxy.accepted(), "the closed connection was replaced")
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

// cuttingProxy forwards TCP connections to a server and can close every
// one of them at once.
type cuttingProxy struct {
	ln    net.Listener
	to    string
	mu    sync.Mutex
	conns []net.Conn
	n     int
	wg    sync.WaitGroup
}

func newCuttingProxy(t *testing.T, to string) *cuttingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cuttingProxy{ln: ln, to: to}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *cuttingProxy) addr() string { return p.ln.Addr().String() }

func (p *cuttingProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.to)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.n++
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

func (p *cuttingProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
}

// cut closes every connection made so far.
func (p *cuttingProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// accepted is how many connections were made.
func (p *cuttingProxy) accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}
