package netcut_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hookd/hookd/internal/netcut"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo serves an echo server on loopback until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn) error {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	buf := make([]byte, 4)
	_, err := io.ReadFull(c, buf)
	return err
}

// setup starts a proxy to an echo server and a connection through it
// that has made a round trip; both are closed when the test ends.
func setup(t *testing.T) (*netcut.Proxy, net.Conn) {
	t.Helper()
	p, err := netcut.Start(echo(t))
	require.NoError(t, err)
	t.Cleanup(p.Close)
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, roundTrip(t, c))
	return p, c
}

// TestCutAndRestore: through the proxy a connection reaches the server;
// a cut closes it and refuses new ones; a restore serves the same
// address again.
func TestCutAndRestore(t *testing.T) {
	t.Parallel()
	p, c := setup(t)

	p.Cut()
	require.Error(t, roundTrip(t, c), "the connection through the proxy is closed")
	_, err := net.Dial("tcp", p.Addr())
	require.Error(t, err, "the port refuses")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, p.Restore(ctx))
	c2, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c2.Close()
	require.NoError(t, roundTrip(t, c2))
}

// TestStallAndResume: a stalled proxy keeps its connections open and
// carries nothing, so a writer's writes stop once the buffers are full;
// resumed, it carries what was held back.
func TestStallAndResume(t *testing.T) {
	t.Parallel()
	p, c := setup(t)

	p.Stall()
	// 64 MB is more than loopback's buffers hold: the write stops at
	// its deadline, having written part of it.
	require.NoError(t, c.SetWriteDeadline(time.Now().Add(500*time.Millisecond)))
	n, err := c.Write(make([]byte, 64<<20))
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "%v", err)
	require.Less(t, n, 64<<20)

	// Resumed, the echo carries back every byte written.
	p.Resume()
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
	got, err := io.ReadFull(c, make([]byte, n))
	require.NoError(t, err)
	require.Equal(t, n, got)
}
