package destination

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitMQConfig is an AMQP 0-9-1 exchange: each message is published
// to Exchange with RoutingKey, persistent, and counts as delivered once
// the broker's publisher confirm acks it.
type RabbitMQConfig struct {
	// URL is amqp:// or amqps://host[:port][/vhost], without credentials.
	URL string `json:"url"`
	// Exchange is the exchange published to; empty is the default
	// exchange, which routes by queue name.
	Exchange   string `json:"exchange"`
	RoutingKey string `json:"routing_key"`
	Username   string `json:"username,omitempty"`
	// Password is write-only.
	Password string `json:"password,omitempty"`
}

var _ Config = (*RabbitMQConfig)(nil)

// Type is RabbitMQ.
func (c *RabbitMQConfig) Type() Type { return RabbitMQ }

// Validate checks the URL, the names (AMQP short strings) and the
// credentials.
func (c *RabbitMQConfig) Validate() error {
	if _, err := checkURL("url", c.URL, "amqp", "amqps"); err != nil {
		return err
	}
	if len(c.Exchange) > maxNameLen {
		return fieldErr("exchange", "longer than %d characters", maxNameLen)
	}
	if c.Exchange != "" {
		if err := checkName("exchange", c.Exchange, maxNameLen); err != nil {
			return err
		}
	}
	if len(c.RoutingKey) > maxNameLen {
		return fieldErr("routing_key", "longer than %d characters", maxNameLen)
	}
	if c.Exchange == "" && c.RoutingKey == "" {
		return fieldErr("routing_key", "required with the default exchange (it names the queue)")
	}
	return pairedCred(c.Username, c.Password)
}

// Targets is the URL's host.
func (c *RabbitMQConfig) Targets() []Target {
	u, err := url.Parse(c.URL)
	if err != nil {
		return nil
	}
	return []Target{{Field: "url", Host: u.Hostname()}}
}

// Redacted drops the password.
func (c *RabbitMQConfig) Redacted() Config { r := *c; r.Password = ""; return &r }

// Credentials is the password.
func (c *RabbitMQConfig) Credentials() map[string]string { return creds("password", c.Password) }

// WithCredentials sets the password.
func (c *RabbitMQConfig) WithCredentials(m map[string]string) Config {
	r := *c
	r.Password = m["password"]
	return &r
}

// rabbitConn is a connection and its one channel in confirm mode, on
// which every publish of the destination goes (amqp091's channel is safe
// for concurrent publishes; confirms are matched by sequence number).
type rabbitConn struct {
	conn *amqp.Connection
	ch   *amqp.Channel
	// socket is the connection's own: closing it ends a publish stuck in
	// its write, where amqp091's Close would wait behind that write.
	socket net.Conn
	// closed gets the channel's close reason, when the broker closes it
	// (a missing exchange, a permission refused).
	closed chan *amqp.Error
}

type rabbitPublisher struct {
	cfg  RabbitMQConfig
	deps Deps
	conn *lazyConn[*rabbitConn]
	// handing counts the publishes being written (handOver), which Close
	// waits for.
	handing sync.WaitGroup
}

func newRabbitMQ(c RabbitMQConfig, pc PoolConfig, d Deps) *rabbitPublisher {
	p := &rabbitPublisher{cfg: c, deps: d}
	p.conn = newLazyConn(pc.DialTimeout, p.dial, func(rc *rabbitConn) { _ = rc.conn.Close() })
	p.conn.now = d.Now
	p.conn.sticky = func(err error) bool { return p.classify(context.Background(), err).Outcome == AuthRefused }
	return p
}

func (p *rabbitPublisher) dial(ctx context.Context) (*rabbitConn, error) {
	u, err := url.Parse(p.cfg.URL)
	if err != nil {
		return nil, err
	}
	if p.cfg.Username != "" {
		u.User = url.UserPassword(p.cfg.Username, p.cfg.Password)
	}
	deadline, _ := ctx.Deadline()
	d := p.deps.dialer(time.Until(deadline))
	var socket net.Conn
	conn, err := amqp.DialConfig(u.String(), amqp.Config{
		// The handshake is bounded by the dial's deadline too.
		Dial: func(network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			socket = c
			return c, c.SetDeadline(deadline)
		},
		Properties: amqp.Table{"connection_name": "hookd"},
	})
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	rc := &rabbitConn{conn: conn, ch: ch, socket: socket, closed: make(chan *amqp.Error, 1)}
	ch.NotifyClose(rc.closed)
	return rc, nil
}

// Publish publishes m and waits for its confirm.
func (p *rabbitPublisher) Publish(ctx context.Context, m Message) Result {
	rc, err := p.conn.get(ctx)
	if err != nil {
		return p.classify(ctx, err)
	}
	headers := amqp.Table{}
	for k, v := range m.Headers() {
		headers[k] = v
	}
	dc, err := p.handOver(ctx, rc, amqp.Publishing{
		Headers:      headers,
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    m.ID,
		Timestamp:    m.Timestamp,
		Type:         m.EventType,
		Body:         m.Body,
	})
	if errors.Is(err, errNotWritten) {
		// The write did not end within the attempt's deadline: the broker
		// reads nothing (a resource alarm blocks its publishers). The
		// socket is closed at once, which ends the write, and the next
		// publish dials anew.
		if p.conn.forget(rc, sameRabbit) {
			_ = rc.socket.Close()
		}
		return failed(Timeout, fmt.Errorf("publish to rabbitmq: %w", err))
	}
	if err != nil {
		p.drop(rc)
		return p.classify(ctx, fmt.Errorf("publish to rabbitmq: %w", err))
	}
	acked, err := dc.WaitContext(ctx)
	switch {
	case err != nil:
		return p.classify(ctx, fmt.Errorf("publish to rabbitmq: confirm: %w", err))
	case acked:
		return confirmed("")
	}
	// A nack, or the channel closed under the publish: its reason says
	// which (a 404 for a missing exchange, a 403 for a refused right).
	if rc.ch.IsClosed() {
		p.drop(rc)
		select {
		case reason := <-rc.closed:
			if reason != nil {
				return p.classify(ctx, fmt.Errorf("publish to rabbitmq: channel closed: %w", reason))
			}
		default:
		}
		return failed(Unreachable, errors.New("publish to rabbitmq: channel closed before the confirm"))
	}
	return failed(Refused, errors.New("publish to rabbitmq: the broker nacked the message"))
}

func (p *rabbitPublisher) drop(rc *rabbitConn) {
	p.conn.drop(rc, sameRabbit)
}

func sameRabbit(a, b *rabbitConn) bool { return a == b }

// handOver publishes msg on rc's channel and returns its deferred
// confirm, or ctx's error when ctx ends first. amqp091 checks the context
// only before its write, which has no deadline, so the write runs beside
// the wait for ctx; a write left behind ends when its socket is closed,
// and Close waits for it.
func (p *rabbitPublisher) handOver(ctx context.Context, rc *rabbitConn, msg amqp.Publishing) (*amqp.DeferredConfirmation, error) {
	type written struct {
		dc  *amqp.DeferredConfirmation
		err error
	}
	done := make(chan written, 1)
	p.handing.Go(func() {
		defer func() {
			if r := recover(); r != nil {
				done <- written{err: fmt.Errorf("amqp091 panicked: %v", r)}
			}
		}()
		dc, err := rc.ch.PublishWithDeferredConfirmWithContext(ctx, p.cfg.Exchange, p.cfg.RoutingKey, false, false, msg)
		done <- written{dc, err}
	})
	select {
	case w := <-done:
		return w.dc, w.err
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", errNotWritten, ctx.Err())
	}
}

// errNotWritten is handOver's error when the attempt's deadline came
// before the write ended.
var errNotWritten = errors.New("not written")

// classify maps amqp091's errors: 403 ACCESS_REFUSED (bad credentials,
// a right refused) and a vhost refused to the user are auth; other
// broker errors refused.
func (p *rabbitPublisher) classify(ctx context.Context, err error) Result {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		if ae.Code == amqp.AccessRefused || (ae.Code == amqp.NotAllowed && strings.Contains(ae.Reason, "access to vhost")) {
			return authRefused(err)
		}
		if !ae.Server {
			return failed(Unreachable, err)
		}
		return failed(Refused, err)
	}
	if errors.Is(err, amqp.ErrClosed) {
		return failed(Unreachable, err)
	}
	return p.deps.failure(ctx, err)
}

// Close closes the connection, and waits for the publishes still being
// written (each ends when its socket is closed).
func (p *rabbitPublisher) Close() {
	p.conn.Close()
	p.handing.Wait()
}
