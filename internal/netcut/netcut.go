// Package netcut owns a loopback TCP proxy that can be cut and restored:
// the server behind it becomes unreachable (its connections closed, its
// port refusing) without the server itself being touched. It can also be
// stalled: its connections stay open and carry nothing, as to a server
// that stopped reading. The bench's broker outages and the destination
// tests use it.
package netcut

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// Proxy forwards connections on its loopback address to a target.
type Proxy struct {
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener // nil while cut
	conns map[net.Conn]bool
	// flowing is closed while the proxy forwards; Stall replaces it with
	// an open channel, on which every pipe waits before its next read.
	flowing chan struct{}
	wg      sync.WaitGroup
}

// Start listens on a free loopback port and forwards every connection to
// target (host:port).
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	p := &Proxy{target: target, addr: ln.Addr().String(), conns: map[net.Conn]bool{}, flowing: make(chan struct{})}
	close(p.flowing)
	p.serve(ln)
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			if p.ln != ln {
				// Cut while this connection was dialled: it never opens.
				p.mu.Unlock()
				_, _ = c.Close(), up.Close()
				return
			}
			p.conns[c], p.conns[up] = true, true
			p.mu.Unlock()
			p.wg.Go(func() { p.pipe(up, c) })
			p.wg.Go(func() { p.pipe(c, up) })
		}
	})
}

// pipe copies src to dst until either ends, then closes both and forgets
// them, so a long run's connections are not held until Cut.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		p.mu.Lock()
		flowing := p.flowing
		p.mu.Unlock()
		<-flowing
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_, _ = dst.Close(), src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// Stall stops forwarding without closing anything: each connection's
// bytes stay where they are (in the kernel's buffers, then in the
// writer's) until Resume or Cut.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.flowing:
		p.flowing = make(chan struct{})
	default:
	}
}

// Resume forwards again after Stall.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resumeLocked()
}

func (p *Proxy) resumeLocked() {
	select {
	case <-p.flowing:
	default:
		close(p.flowing)
	}
}

// Cut stops listening and closes every connection through the proxy (a
// stalled proxy forwards again, to connections that are gone); a cut
// proxy's Cut does nothing.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resumeLocked()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

// Restore listens on the proxy's address again, retrying while the port
// is not yet free, until ctx ends.
func (p *Proxy) Restore(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		ln, err := net.Listen("tcp", p.addr)
		if err == nil {
			p.serve(ln)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("listen on %s again: %w", p.addr, err)
		case <-t.C:
		}
	}
}

// Close cuts the proxy and waits for its goroutines.
func (p *Proxy) Close() {
	p.Cut()
	p.wg.Wait()
}
