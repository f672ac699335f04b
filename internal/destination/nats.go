package destination

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSConfig is a JetStream subject: each message is published to
// Subject and counts as delivered once the stream that captures it
// acknowledges it (a subject no stream captures is refused).
type NATSConfig struct {
	// URL is nats:// or tls://host[:port], without credentials.
	URL     string `json:"url"`
	Subject string `json:"subject"`
	// Username and Password, or Token, authenticate; both write-only
	// but Username.
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	Token    string `json:"token,omitempty"`
}

var _ Config = (*NATSConfig)(nil)

// Type is NATS.
func (c *NATSConfig) Type() Type { return NATS }

// Validate checks the URL, the subject (no wildcards) and the
// credentials.
func (c *NATSConfig) Validate() error {
	if _, err := checkURL("url", c.URL, "nats", "tls"); err != nil {
		return err
	}
	if err := checkName("subject", c.Subject, maxNameLen); err != nil {
		return err
	}
	if !natsSubject.MatchString(c.Subject) {
		return fieldErr("subject", "must be dot-separated tokens without wildcards (* >)")
	}
	if err := pairedCred(c.Username, c.Password); err != nil {
		return err
	}
	if err := checkCred("token", c.Token); err != nil {
		return err
	}
	if c.Token != "" && c.Username != "" {
		return fieldErr("token", "give a token or a username and password, not both")
	}
	return nil
}

// Targets is the URL's host.
func (c *NATSConfig) Targets() []Target {
	u, err := url.Parse(c.URL)
	if err != nil {
		return nil
	}
	return []Target{{Field: "url", Host: u.Hostname()}}
}

// Redacted drops the password and the token.
func (c *NATSConfig) Redacted() Config { r := *c; r.Password, r.Token = "", ""; return &r }

// Credentials are the password and the token.
func (c *NATSConfig) Credentials() map[string]string {
	return creds("password", c.Password, "token", c.Token)
}

// WithCredentials sets the password and the token.
func (c *NATSConfig) WithCredentials(m map[string]string) Config {
	r := *c
	r.Password, r.Token = m["password"], m["token"]
	return &r
}

type natsConn struct {
	nc *nats.Conn
	js jetstream.JetStream
}

type natsPublisher struct {
	cfg  NATSConfig
	deps Deps
	conn *lazyConn[*natsConn]
}

func newNATS(c NATSConfig, pc PoolConfig, d Deps) *natsPublisher {
	p := &natsPublisher{cfg: c, deps: d}
	p.conn = newLazyConn(pc.DialTimeout, p.dial, func(c *natsConn) { c.nc.Close() })
	return p
}

// ctxDialer dials within a context (nats.CustomDialer has none).
type ctxDialer struct {
	ctx context.Context
	d   *net.Dialer
}

func (c ctxDialer) Dial(network, address string) (net.Conn, error) {
	return c.d.DialContext(c.ctx, network, address)
}

func (p *natsPublisher) dial(ctx context.Context) (*natsConn, error) {
	deadline, _ := ctx.Deadline()
	timeout := time.Until(deadline)
	opts := []nats.Option{
		nats.Name("hookd"),
		nats.Timeout(timeout),
		nats.SetCustomDialer(ctxDialer{ctx: ctx, d: p.deps.dialer(timeout)}),
		// A broken connection is dialed anew by the next publish, which
		// then fails fast instead of waiting in a reconnect buffer.
		nats.NoReconnect(),
	}
	if p.cfg.Username != "" {
		opts = append(opts, nats.UserInfo(p.cfg.Username, p.cfg.Password))
	}
	if p.cfg.Token != "" {
		opts = append(opts, nats.Token(p.cfg.Token))
	}
	nc, err := nats.Connect(p.cfg.URL, opts...)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &natsConn{nc: nc, js: js}, nil
}

// Publish publishes m and waits for the stream's ack. The delivery id is
// the JetStream message id, so a retry after a lost ack is deduplicated
// within the stream's window.
func (p *natsPublisher) Publish(ctx context.Context, m Message) Result {
	c, err := p.conn.get(ctx)
	if err != nil {
		return p.classify(ctx, err)
	}
	msg := nats.NewMsg(p.cfg.Subject)
	for k, v := range m.Headers() {
		msg.Header.Set(k, v)
	}
	msg.Data = m.Body
	var opts []jetstream.PublishOpt
	if m.DeliveryID != "" {
		opts = append(opts, jetstream.WithMsgID(m.DeliveryID))
	}
	ack, err := c.js.PublishMsg(ctx, msg, opts...)
	if err != nil {
		if c.nc.IsClosed() {
			p.conn.drop(c, func(a, b *natsConn) bool { return a == b })
		}
		return p.classify(ctx, fmt.Errorf("publish to nats: %w", err))
	}
	return confirmed(fmt.Sprintf("%s/%d", ack.Stream, ack.Sequence))
}

// classify maps nats.go's errors: an authorization violation, expired or
// revoked credentials and a permission refused are auth; no stream
// capturing the subject is refused.
func (p *natsPublisher) classify(ctx context.Context, err error) Result {
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		errors.Is(err, nats.ErrAccountAuthExpired), errors.Is(err, nats.ErrPermissionViolation):
		return authRefused(err)
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return failed(Refused, err)
	case errors.Is(err, nats.ErrNoServers), errors.Is(err, nats.ErrConnectionClosed):
		if r := p.deps.failure(ctx, err); r.Reason == Blocked || r.Reason == Timeout {
			return r
		}
		return failed(Unreachable, err)
	}
	return p.deps.failure(ctx, err)
}

// Close closes the connection.
func (p *natsPublisher) Close() { p.conn.Close() }
