package destination

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
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

	once   sync.Once
	client *redis.Client
	err    error
}

func newRedis(c RedisConfig, _ PoolConfig, d Deps) *redisPublisher {
	p := &redisPublisher{cfg: c, deps: d, maxLen: c.MaxLen}
	if p.maxLen == 0 {
		p.maxLen = DefaultRedisMaxLen
	}
	return p
}

// get builds the client once: go-redis pools its connections, dials on
// demand and redials a broken one.
func (p *redisPublisher) get() (*redis.Client, error) {
	p.once.Do(func() {
		opt, err := redis.ParseURL(p.cfg.URL)
		if err != nil {
			p.err = err
			return
		}
		opt.Username, opt.Password = p.cfg.Username, p.cfg.Password
		d := p.deps.dialer(0)
		opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		}
		// Every command ends at its caller's deadline, and fails rather
		// than retrying on another connection past it.
		opt.ContextTimeoutEnabled = true
		opt.MaxRetries = -1
		opt.DisableIdentity = true
		opt.PoolSize = 8
		p.client = redis.NewClient(opt)
	})
	return p.client, p.err
}

// Publish appends m to the stream.
func (p *redisPublisher) Publish(ctx context.Context, m Message) Result {
	cl, err := p.get()
	if err != nil {
		return failed(Refused, fmt.Errorf("publish to redis: %w", err))
	}
	h := m.Headers()
	values := make([]string, 0, 10)
	for _, k := range []string{HeaderID, HeaderTimestamp, HeaderSignature, HeaderEventType} {
		if v, ok := h[k]; ok {
			values = append(values, k, v)
		}
	}
	values = append(values, RedisBodyField, string(m.Body))
	id, err := cl.XAdd(ctx, &redis.XAddArgs{Stream: p.cfg.Stream, MaxLen: p.maxLen, Approx: true, Values: values}).Result()
	if err != nil {
		return p.classify(ctx, fmt.Errorf("publish to redis: %w", err))
	}
	return confirmed(id)
}

// classify maps Redis's error replies: WRONGPASS, NOAUTH and NOPERM are
// auth; any other reply refused.
func (p *redisPublisher) classify(ctx context.Context, err error) Result {
	for _, prefix := range []string{"WRONGPASS", "NOAUTH", "NOPERM"} {
		if redis.HasErrorPrefix(err, prefix) || strings.Contains(err.Error(), prefix) {
			return authRefused(err)
		}
	}
	var re redis.Error
	if errors.As(err, &re) {
		return failed(Refused, err)
	}
	return p.deps.failure(ctx, err)
}

// Close closes the client's connections.
func (p *redisPublisher) Close() {
	p.once.Do(func() { p.err = errClosed })
	if p.client != nil {
		_ = p.client.Close()
	}
}
