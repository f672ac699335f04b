package store

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// DBClock is the database's clock as seen from this process: the local
// monotonic clock plus the offset to Postgres's clock_timestamp() measured
// at the midpoint of a round trip. Shared breaker time and attempt
// timestamps come from it, so every process agrees on "now" however their
// own clocks drift.
type DBClock struct {
	pool   *pgxpool.Pool
	offset atomic.Int64 // nanoseconds to add to the local clock
	local  func() time.Time
}

// NewDBClock returns a clock synced against pool; call Sync before use.
func NewDBClock(pool *pgxpool.Pool) *DBClock {
	return &DBClock{pool: pool, local: time.Now}
}

// Now returns the database-synced time.
func (c *DBClock) Now() time.Time {
	return c.local().Add(time.Duration(c.offset.Load()))
}

// Offset returns the current offset of the database clock from the local one.
func (c *DBClock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

// Observe records a database timestamp read between sent and received.
func (c *DBClock) Observe(db, sent, received time.Time) {
	mid := sent.Add(received.Sub(sent) / 2)
	c.offset.Store(int64(db.Sub(mid)))
}

// Sync measures the offset once.
func (c *DBClock) Sync(ctx context.Context) error {
	sent := c.local()
	var db time.Time
	if err := c.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&db); err != nil {
		return fmt.Errorf("read database clock: %w", err)
	}
	c.Observe(db, sent, c.local())
	return nil
}

// Run re-syncs every interval until ctx ends.
func (c *DBClock) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = c.Sync(ctx)
		}
	}
}
