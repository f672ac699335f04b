package destination

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"google.golang.org/api/option"
)

// Publisher publishes to one destination over its pooled connection.
type Publisher interface {
	// Publish sends m and waits for the system's confirmation, never
	// past ctx's deadline.
	Publish(ctx context.Context, m Message) Result
	// Close closes the connection and waits for anything it started.
	Close()
}

// PoolConfig configures a Pool.
type PoolConfig struct {
	// IdleTimeout closes a destination's connection unused this long.
	IdleTimeout time.Duration
	// DialTimeout bounds one connection attempt, shared by the publishes
	// waiting for it (each waits only until its own deadline).
	DialTimeout time.Duration
}

// Deps are what a Pool's publishers use.
type Deps struct {
	Logger *slog.Logger
	// Now is the clock idleness is measured on.
	Now func() time.Time
	// DialControl, when set, vets every address a publisher dials (the
	// SSRF guard, as for HTTP).
	DialControl func(network, address string, c syscall.RawConn) error
	// ErrBlocked is what DialControl's refusals wrap: a publish they
	// stopped is Failed with reason Blocked.
	ErrBlocked error
	// PubSubOptions replace the Pub/Sub client's connection and
	// credentials (a test server); nil in production.
	PubSubOptions []option.ClientOption
}

// dialer is the dialer every publisher's TCP connection is made with.
func (d Deps) dialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Control: d.DialControl}
}

// failure classifies err (failure), with the guard's refusals.
func (d Deps) failure(ctx context.Context, err error) Result { return failure(ctx, err, d.ErrBlocked) }

// newPublisher builds c's publisher; it connects on first publish.
func newPublisher(c Config, cfg PoolConfig, d Deps) Publisher {
	switch c := c.(type) {
	case *RabbitMQConfig:
		return newRabbitMQ(*c, cfg, d)
	case *NATSConfig:
		return newNATS(*c, cfg, d)
	case *KafkaConfig:
		return newKafka(*c, cfg, d)
	case *SQSConfig:
		return newSQS(*c, cfg, d)
	case *PubSubConfig:
		return newPubSub(*c, cfg, d)
	case *RedisConfig:
		return newRedis(*c, cfg, d)
	case *MQTTConfig:
		return newMQTT(*c, cfg, d)
	}
	panic("destination: no publisher for " + string(c.Type()))
}

// Pool keeps one publisher, and so one connection, per destination:
// keyed by its whole config, credentials included, so a changed config
// or rotated credentials get a connection of their own and the old one
// goes idle. Run closes idle ones.
type Pool struct {
	cfg  PoolConfig
	deps Deps

	mu      sync.Mutex
	entries map[string]*entry
	closed  bool
}

type entry struct {
	pub      Publisher
	inUse    int
	lastUsed time.Time
}

// NewPool returns an empty pool.
func NewPool(cfg PoolConfig, deps Deps) *Pool {
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 5 * time.Minute
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	return &Pool{cfg: cfg, deps: deps, entries: map[string]*entry{}}
}

// key identifies c's publisher: a digest of its type and whole config.
func key(c Config) string {
	b, err := json.Marshal(struct {
		T Type
		C Config
		K map[string]string
	}{c.Type(), c, c.Credentials()})
	if err != nil {
		panic("destination: config does not marshal: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Publish publishes m to c over c's pooled publisher, never past ctx's
// deadline. Duration is set on the result.
func (p *Pool) Publish(ctx context.Context, c Config, m Message) Result {
	start := p.deps.Now()
	k := key(c)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return Result{Outcome: Failed, Reason: Unreachable, Err: errClosed}
	}
	e := p.entries[k]
	if e == nil {
		e = &entry{pub: newPublisher(c, p.cfg, p.deps)}
		p.entries[k] = e
	}
	e.inUse++
	p.mu.Unlock()

	res := e.pub.Publish(ctx, m)

	p.mu.Lock()
	e.inUse--
	e.lastUsed = p.deps.Now()
	p.mu.Unlock()
	res.Duration = p.deps.Now().Sub(start)
	return res
}

// Len is how many destinations have a publisher.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.entries)
}

// CloseIdle closes the publishers unused for the idle timeout.
func (p *Pool) CloseIdle() {
	now := p.deps.Now()
	var idle []Publisher
	p.mu.Lock()
	for k, e := range p.entries {
		if e.inUse == 0 && now.Sub(e.lastUsed) >= p.cfg.IdleTimeout {
			idle = append(idle, e.pub)
			delete(p.entries, k)
		}
	}
	p.mu.Unlock()
	for _, pub := range idle {
		pub.Close()
	}
}

// Run closes idle publishers until ctx ends, then closes them all.
func (p *Pool) Run(ctx context.Context) error {
	t := time.NewTicker(max(p.cfg.IdleTimeout/2, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			p.Close()
			return nil
		case <-t.C:
			p.CloseIdle()
		}
	}
}

// Close closes every publisher; a publish after it fails.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	all := p.entries
	p.entries = map[string]*entry{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, e := range all {
		wg.Go(e.pub.Close)
	}
	wg.Wait()
}
