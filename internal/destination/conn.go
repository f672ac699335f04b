package destination

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errClosed is returned by a publisher used after Close.
var errClosed = errors.New("publisher closed")

// lazyConn is a publisher's connection, made on first use and again
// after it broke. One dial at a time is shared by every caller waiting
// for it, and a caller waits only until its own context ends: a dial
// that outlives it goes on, bounded by its own timeout, for the next
// caller.
type lazyConn[T any] struct {
	dial    func(context.Context) (T, error)
	close   func(T)
	timeout time.Duration
	// sticky marks a dial error (refused credentials) that is answered
	// to every caller for timeout after it, without dialing again: a
	// broker that delays its refusal (RabbitMQ waits seconds) past the
	// caller's deadline still has its refusal seen by the next publish.
	sticky func(error) bool
	now    func() time.Time

	mu      sync.Mutex
	cur     T
	ok      bool
	closed  bool
	dialing chan struct{}
	dialErr error
	errAt   time.Time
	wg      sync.WaitGroup
}

func newLazyConn[T any](timeout time.Duration, dial func(context.Context) (T, error), closeFn func(T)) *lazyConn[T] {
	return &lazyConn[T]{dial: dial, close: closeFn, timeout: timeout, now: time.Now, sticky: func(error) bool { return false }}
}

// get returns the connection, dialing it if there is none.
func (c *lazyConn[T]) get(ctx context.Context) (T, error) {
	var zero T
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return zero, errClosed
	}
	if c.ok {
		v := c.cur
		c.mu.Unlock()
		return v, nil
	}
	if c.dialing == nil && c.dialErr != nil && c.sticky(c.dialErr) && c.now().Sub(c.errAt) < c.timeout {
		err := c.dialErr
		c.mu.Unlock()
		return zero, err
	}
	done := c.dialing
	if done == nil {
		done = make(chan struct{})
		c.dialing = done
		c.wg.Add(1)
		go c.run(done)
	}
	c.mu.Unlock()
	select {
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-done:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ok {
		return c.cur, nil
	}
	if c.closed {
		return zero, errClosed
	}
	return zero, c.dialErr
}

// run is one dial; its result is kept for the callers waiting on done.
func (c *lazyConn[T]) run(done chan struct{}) {
	defer c.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	v, err := c.dial(ctx)
	cancel()
	c.mu.Lock()
	c.dialing = nil
	switch {
	case err != nil:
		c.dialErr, c.errAt = err, c.now()
	case c.closed:
		c.mu.Unlock()
		close(done)
		c.close(v)
		return
	default:
		c.cur, c.ok, c.dialErr = v, true, nil
	}
	c.mu.Unlock()
	close(done)
}

// drop forgets v, if it is still the connection, and closes it: it
// broke, and the next get dials anew.
func (c *lazyConn[T]) drop(v T, same func(a, b T) bool) {
	if c.forget(v, same) {
		c.close(v)
	}
}

// forget forgets v, if it is still the connection, without closing it,
// and says whether it did: the caller closes it its own way.
func (c *lazyConn[T]) forget(v T, same func(a, b T) bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ok || !same(c.cur, v) {
		return false
	}
	var zero T
	c.cur, c.ok = zero, false
	return true
}

// Close closes the connection and waits for a dial under way.
func (c *lazyConn[T]) Close() {
	c.mu.Lock()
	c.closed = true
	v, ok := c.cur, c.ok
	var zero T
	c.cur, c.ok = zero, false
	c.mu.Unlock()
	if ok {
		c.close(v)
	}
	c.wg.Wait()
}
