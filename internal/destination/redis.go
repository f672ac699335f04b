package destination

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Redis stream bounds: MaxLen's default and ceiling.
const (
	DefaultRedisMaxLen = 10_000
	MaxRedisMaxLen     = 10_000_000
)

// RedisConfig is a Redis stream: each message is an entry appended with
// XADD, trimmed to about MaxLen entries, delivered once Redis returns
// the entry's id.
type RedisConfig struct {
	// URL is redis:// or rediss://host[:port][/db], without credentials.
	URL    string `json:"url"`
	Stream string `json:"stream"`
	// MaxLen bounds the stream (MAXLEN ~); 0 is DefaultRedisMaxLen.
	MaxLen   int64  `json:"max_len,omitempty"`
	Username string `json:"username,omitempty"`
	// Password is write-only; it may be given without a username (the
	// default user).
	Password string `json:"password,omitempty"`
}

var _ Config = (*RedisConfig)(nil)

// Type is Redis.
func (c *RedisConfig) Type() Type { return Redis }

// Validate checks the URL (and its database number), the stream key,
// the bound and the credentials.
func (c *RedisConfig) Validate() error {
	u, err := checkURL("url", c.URL, "redis", "rediss")
	if err != nil {
		return err
	}
	if db := strings.Trim(u.Path, "/"); db != "" {
		if n, err := strconv.Atoi(db); err != nil || n < 0 || n > 15 {
			return fieldErr("url", "database %q must be 0 to 15", db)
		}
	}
	if u.RawQuery != "" {
		return fieldErr("url", "must have no query")
	}
	if c.Stream == "" {
		return fieldErr("stream", "required")
	}
	if len(c.Stream) > 1024 {
		return fieldErr("stream", "longer than 1024 characters")
	}
	if c.MaxLen < 0 || c.MaxLen > MaxRedisMaxLen {
		return fieldErr("max_len", "must be 1 to %d (0 for %d)", MaxRedisMaxLen, DefaultRedisMaxLen)
	}
	if err := checkCred("username", c.Username); err != nil {
		return err
	}
	if err := checkCred("password", c.Password); err != nil {
		return err
	}
	if c.Username != "" && c.Password == "" {
		return fieldErr("password", "required with username")
	}
	return nil
}

// Targets is the URL's host.
func (c *RedisConfig) Targets() []Target {
	u, err := url.Parse(c.URL)
	if err != nil {
		return nil
	}
	return []Target{{Field: "url", Host: u.Hostname()}}
}

// Redacted drops the password.
func (c *RedisConfig) Redacted() Config { r := *c; r.Password = ""; return &r }

// Credentials is the password.
func (c *RedisConfig) Credentials() map[string]string { return creds("password", c.Password) }

// WithCredentials sets the password.
func (c *RedisConfig) WithCredentials(m map[string]string) Config {
	r := *c
	r.Password = m["password"]
	return &r
}

// The stream entry's field holding the payload; the others are the
// Standard Webhooks headers and the event type (Message.Headers).
const RedisBodyField = "body"

type redisPublisher struct {
	cfg    RedisConfig
	deps   Deps
	maxLen int64
	pool   *redis.Pool
	closed atomic.Bool
	// checkIdle is redisCheckIdle; a test checks every borrow.
	checkIdle time.Duration
}

// redisPoolSize is how many connections a Redis destination opens at
// most; a publish beyond them waits for one, within its deadline.
const redisPoolSize = 8

// redisCheckIdle is how long a pooled connection may sit unused before
// it is checked with a PING when taken again: a connection the server
// closed meanwhile (a restart, its idle timeout) is then replaced, not
// the publish that takes it failed.
const redisCheckIdle = 5 * time.Second

func newRedis(c RedisConfig, pc PoolConfig, d Deps) *redisPublisher {
	p := &redisPublisher{cfg: c, deps: d, maxLen: c.MaxLen, checkIdle: redisCheckIdle}
	if p.maxLen == 0 {
		p.maxLen = DefaultRedisMaxLen
	}
	dialer := d.dialer(0)
	opts := []redis.DialOption{
		redis.DialContextFunc(dialer.DialContext),
		redis.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12}),
	}
	if pc.DialTimeout > 0 {
		opts = append(opts, redis.DialTLSHandshakeTimeout(pc.DialTimeout))
	}
	if c.Password != "" {
		opts = append(opts, redis.DialUsername(c.Username), redis.DialPassword(c.Password))
	}
	p.pool = &redis.Pool{
		MaxIdle:   redisPoolSize,
		MaxActive: redisPoolSize,
		Wait:      true,
		// The URL's host, port, database and scheme (rediss is TLS).
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			// Clipped: DialURLContext appends to the options it is given,
			// and dials run at once.
			return redis.DialURLContext(ctx, c.URL, slices.Clip(opts)...)
		},
		TestOnBorrowContext: func(ctx context.Context, conn redis.Conn, lastUsed time.Time) error {
			if time.Since(lastUsed) < p.checkIdle {
				return nil
			}
			_, err := redis.DoContext(conn, ctx, "PING")
			return err
		},
	}
	return p
}

// Publish appends m to the stream with XADD, trimmed to about MaxLen
// entries; the entry's id is its confirmation. A command ends at ctx's
// deadline and is never retried on another connection past it.
func (p *redisPublisher) Publish(ctx context.Context, m Message) Result {
	if p.closed.Load() {
		return failed(Refused, fmt.Errorf("publish to redis: %w", errClosed))
	}
	conn, err := p.pool.GetContext(ctx)
	if err != nil {
		return p.classify(ctx, fmt.Errorf("publish to redis: %w", err))
	}
	defer conn.Close()
	h := m.Headers()
	args := make([]any, 0, 16)
	args = append(args, p.cfg.Stream, "MAXLEN", "~", p.maxLen, "*")
	for _, k := range []string{HeaderID, HeaderTimestamp, HeaderSignature, HeaderEventType} {
		if v, ok := h[k]; ok {
			args = append(args, k, v)
		}
	}
	args = append(args, RedisBodyField, m.Body)
	id, err := redis.String(redis.DoContext(conn, ctx, "XADD", args...))
	if err != nil {
		return p.classify(ctx, fmt.Errorf("publish to redis: %w", err))
	}
	return confirmed(id)
}

// classify maps Redis's error replies: WRONGPASS, NOAUTH and NOPERM are
// auth; any other reply refused.
func (p *redisPublisher) classify(ctx context.Context, err error) Result {
	var re redis.Error
	if errors.As(err, &re) {
		for _, prefix := range []string{"WRONGPASS", "NOAUTH", "NOPERM"} {
			if strings.HasPrefix(string(re), prefix) {
				return authRefused(err)
			}
		}
		return failed(Refused, err)
	}
	return p.deps.failure(ctx, err)
}

// Close closes the pool's connections; a publish after it fails.
func (p *redisPublisher) Close() {
	p.closed.Store(true)
	_ = p.pool.Close()
}
