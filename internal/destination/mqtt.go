package destination

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
)

// MQTTConfig is an MQTT topic: each message is published with QoS 1 and
// delivered once the broker's PUBACK arrives. MQTT 3.1.1 (the protocol
// of the maintainers' paho.mqtt.golang) has no message properties, so
// the headers travel in a JSON envelope with the payload (MQTTEnvelope).
type MQTTConfig struct {
	// URL is tcp://, ssl://, mqtt:// or mqtts://host[:port], without
	// credentials.
	URL   string `json:"url"`
	Topic string `json:"topic"`
	// Username and Password (write-only) authenticate.
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
}

var _ Config = (*MQTTConfig)(nil)

// Type is MQTT.
func (c *MQTTConfig) Type() Type { return MQTT }

// Validate checks the URL, the topic (no wildcards, no leading $) and
// the credentials.
func (c *MQTTConfig) Validate() error {
	if _, err := checkURL("url", c.URL, "tcp", "ssl", "mqtt", "mqtts"); err != nil {
		return err
	}
	switch {
	case c.Topic == "":
		return fieldErr("topic", "required")
	case len(c.Topic) > 65535:
		return fieldErr("topic", "longer than 65535 bytes")
	case strings.ContainsAny(c.Topic, "+#\x00"):
		return fieldErr("topic", "must not contain wildcards (+ #) or NUL")
	case strings.HasPrefix(c.Topic, "$"):
		return fieldErr("topic", "must not start with $ (broker topics)")
	}
	if err := checkCred("username", c.Username); err != nil {
		return err
	}
	if err := checkCred("password", c.Password); err != nil {
		return err
	}
	if c.Password != "" && c.Username == "" {
		return fieldErr("username", "required with password")
	}
	return nil
}

// Targets is the URL's host.
func (c *MQTTConfig) Targets() []Target {
	u, err := url.Parse(c.URL)
	if err != nil {
		return nil
	}
	return []Target{{Field: "url", Host: u.Hostname()}}
}

// Redacted drops the password.
func (c *MQTTConfig) Redacted() Config { r := *c; r.Password = ""; return &r }

// Credentials is the password.
func (c *MQTTConfig) Credentials() map[string]string { return creds("password", c.Password) }

// WithCredentials sets the password.
func (c *MQTTConfig) WithCredentials(m map[string]string) Config {
	r := *c
	r.Password = m["password"]
	return &r
}

// MQTTEnvelope is an MQTT message's payload: the Standard Webhooks
// headers, the event type, and the payload as a JSON string, its bytes
// exactly as signed.
type MQTTEnvelope struct {
	ID        string `json:"webhook-id"`
	Timestamp string `json:"webhook-timestamp"`
	Signature string `json:"webhook-signature"`
	EventType string `json:"webhook-event-type,omitempty"`
	Body      string `json:"body"`
}

type mqttPublisher struct {
	cfg  MQTTConfig
	deps Deps
	conn *lazyConn[mqtt.Client]
	// handing counts the publishes being handed to paho (handOver),
	// which Close waits for.
	handing sync.WaitGroup
}

func newMQTT(c MQTTConfig, pc PoolConfig, d Deps) *mqttPublisher {
	p := &mqttPublisher{cfg: c, deps: d}
	p.conn = newLazyConn(pc.DialTimeout, p.dial, func(cl mqtt.Client) { cl.Disconnect(250) })
	return p
}

func (p *mqttPublisher) dial(ctx context.Context) (mqtt.Client, error) {
	deadline, _ := ctx.Deadline()
	timeout := time.Until(deadline)
	broker := strings.Replace(strings.Replace(p.cfg.URL, "mqtts://", "ssl://", 1), "mqtt://", "tcp://", 1)
	var id [8]byte
	_, _ = rand.Read(id[:])
	opts := mqtt.NewClientOptions().
		AddBroker(broker).
		SetClientID("hookd-" + hex.EncodeToString(id[:])).
		SetCleanSession(true).
		SetConnectTimeout(timeout).
		SetWriteTimeout(timeout).
		// A broken connection is dialed anew by the next publish.
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetOrderMatters(false).
		SetDialer(p.deps.dialer(timeout))
	if p.cfg.Username != "" {
		opts.SetUsername(p.cfg.Username).SetPassword(p.cfg.Password)
	}
	cl := mqtt.NewClient(opts)
	tok := cl.Connect()
	select {
	case <-tok.Done():
	case <-ctx.Done():
		cl.Disconnect(0)
		return nil, ctx.Err()
	}
	if err := tok.Error(); err != nil {
		return nil, err
	}
	return cl, nil
}

// Publish publishes m's envelope with QoS 1 and waits for the PUBACK.
func (p *mqttPublisher) Publish(ctx context.Context, m Message) Result {
	cl, err := p.conn.get(ctx)
	if err != nil {
		return p.classify(ctx, err)
	}
	h := m.Headers()
	payload, err := json.Marshal(MQTTEnvelope{ID: h[HeaderID], Timestamp: h[HeaderTimestamp], Signature: h[HeaderSignature],
		EventType: m.EventType, Body: string(m.Body)})
	if err != nil {
		return failed(Refused, fmt.Errorf("publish to mqtt: %w", err))
	}
	tok, err := p.handOver(ctx, cl, payload)
	if err != nil {
		// The client's writer took nothing within the attempt's deadline:
		// the connection is stuck (a broker that stopped reading, or a
		// loss paho has yet to see). The next publish dials anew; nothing
		// is waiting to be flushed, so the client is closed at once.
		if p.conn.forget(cl, sameMQTT) {
			cl.Disconnect(0)
		}
		return failed(Timeout, fmt.Errorf("publish to mqtt: not sent: %w", err))
	}
	select {
	case <-tok.Done():
	case <-ctx.Done():
		if !cl.IsConnectionOpen() {
			p.conn.drop(cl, sameMQTT)
		}
		return failed(Timeout, fmt.Errorf("publish to mqtt: no PUBACK: %w", ctx.Err()))
	}
	if err := tok.Error(); err != nil {
		if !cl.IsConnectionOpen() {
			// paho fails a publish cut by a lost connection with an
			// error of no type of its own.
			p.conn.drop(cl, sameMQTT)
			return failed(Unreachable, fmt.Errorf("publish to mqtt: %w", err))
		}
		return p.classify(ctx, fmt.Errorf("publish to mqtt: %w", err))
	}
	return confirmed("")
}

func sameMQTT(a, b mqtt.Client) bool { return a == b }

// handOver hands the payload to paho and returns its token, or ctx's
// error when ctx ends first. paho's Publish blocks until the client's
// writer takes the packet, for up to the write timeout set at the dial
// (the dial's deadline, not this attempt's), so it runs beside the wait
// for ctx; a Publish left behind ends within that timeout, and Close
// waits for it.
func (p *mqttPublisher) handOver(ctx context.Context, cl mqtt.Client, payload []byte) (mqtt.Token, error) {
	handed := make(chan mqtt.Token, 1)
	p.handing.Go(func() {
		defer func() {
			// A panic in paho costs this publish only: its token never
			// comes, and the attempt ends at its deadline.
			_ = recover()
		}()
		handed <- cl.Publish(p.cfg.Topic, 1, false, payload)
	})
	select {
	case tok := <-handed:
		return tok, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// classify maps the CONNACK refusals: bad user name or password and not
// authorised are auth.
func (p *mqttPublisher) classify(ctx context.Context, err error) Result {
	switch {
	case errors.Is(err, packets.ErrorRefusedBadUsernameOrPassword), errors.Is(err, packets.ErrorRefusedNotAuthorised):
		return authRefused(err)
	case errors.Is(err, mqtt.ErrNotConnected):
		return failed(Unreachable, err)
	}
	return p.deps.failure(ctx, err)
}

// Close disconnects, and waits for the publishes still being handed to
// paho (each ends within its write timeout).
func (p *mqttPublisher) Close() {
	p.conn.Close()
	p.handing.Wait()
}
