package destination

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"regexp"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// KafkaConfig is a Kafka topic: each message is a record, produced by
// an idempotent producer with acks from all in-sync replicas, delivered
// once they acknowledge it.
type KafkaConfig struct {
	// Brokers are the seed brokers, host:port.
	Brokers []string `json:"brokers"`
	Topic   string   `json:"topic"`
	// KeyPath is a dotted path into the payload ("customer.id") whose
	// value keys the record; without it, or where the payload has no
	// value there, the key is the endpoint's ordering key (FIFO) or the
	// message id.
	KeyPath string `json:"key_path,omitempty"`
	// TLS connects with TLS.
	TLS bool `json:"tls,omitempty"`
	// SASLMechanism is "plain", "scram-sha-256" or "scram-sha-512" with
	// Username and Password (write-only); empty for none.
	SASLMechanism string `json:"sasl_mechanism,omitempty"`
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
}

var _ Config = (*KafkaConfig)(nil)

// maxBrokers bounds the seed list.
const maxBrokers = 32

var kafkaTopic = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// Type is Kafka.
func (c *KafkaConfig) Type() Type { return Kafka }

// Validate checks the brokers, the topic (Kafka's legal names), the key
// path and the SASL settings.
func (c *KafkaConfig) Validate() error {
	if len(c.Brokers) == 0 {
		return fieldErr("brokers", "required")
	}
	if len(c.Brokers) > maxBrokers {
		return fieldErr("brokers", "at most %d", maxBrokers)
	}
	for i, b := range c.Brokers {
		field := fmt.Sprintf("brokers[%d]", i)
		if err := checkHostPort(field, b); err != nil {
			return err
		}
		if _, _, err := net.SplitHostPort(b); err != nil {
			return fieldErr(field, "must be host:port")
		}
	}
	if !kafkaTopic.MatchString(c.Topic) || c.Topic == "." || c.Topic == ".." {
		return fieldErr("topic", "must be 1 to 249 of a-z A-Z 0-9 . _ -")
	}
	if c.KeyPath != "" {
		if _, err := parseKeyPath(c.KeyPath); err != nil {
			return fieldErr("key_path", "%v", err)
		}
	}
	switch c.SASLMechanism {
	case "":
		if c.Username != "" || c.Password != "" {
			return fieldErr("sasl_mechanism", "required with username and password")
		}
		return nil
	case "plain", "scram-sha-256", "scram-sha-512":
	default:
		return fieldErr("sasl_mechanism", "must be plain, scram-sha-256 or scram-sha-512")
	}
	if c.Username == "" {
		return fieldErr("username", "required with sasl_mechanism")
	}
	return pairedCred(c.Username, c.Password)
}

// Targets are the seed brokers' hosts. The brokers the seeds name in
// their metadata are dialed through the same guard (Deps.DialControl).
func (c *KafkaConfig) Targets() []Target {
	h := make([]Target, 0, len(c.Brokers))
	for i, b := range c.Brokers {
		h = append(h, Target{Field: fmt.Sprintf("brokers[%d]", i), Host: hostOf(b)})
	}
	return h
}

// Redacted drops the password.
func (c *KafkaConfig) Redacted() Config { r := *c; r.Password = ""; return &r }

// Credentials is the password.
func (c *KafkaConfig) Credentials() map[string]string { return creds("password", c.Password) }

// WithCredentials sets the password.
func (c *KafkaConfig) WithCredentials(m map[string]string) Config {
	r := *c
	r.Password = m["password"]
	return &r
}

type kafkaPublisher struct {
	cfg     KafkaConfig
	deps    Deps
	keyPath []string
	conn    *lazyConn[*kgo.Client]
}

func newKafka(c KafkaConfig, pc PoolConfig, d Deps) *kafkaPublisher {
	p := &kafkaPublisher{cfg: c, deps: d}
	p.keyPath, _ = parseKeyPath(c.KeyPath)
	p.conn = newLazyConn(pc.DialTimeout, p.dial, func(cl *kgo.Client) { cl.Close() })
	p.conn.now = d.Now
	p.conn.sticky = func(err error) bool { return p.classify(context.Background(), err).Outcome == AuthRefused }
	return p
}

// dial builds the client and pings the brokers.
func (p *kafkaPublisher) dial(ctx context.Context) (*kgo.Client, error) {
	deadline, _ := ctx.Deadline()
	d := p.deps.dialer(time.Until(deadline))
	opts := []kgo.Opt{
		kgo.SeedBrokers(p.cfg.Brokers...),
		kgo.DefaultProduceTopic(p.cfg.Topic),
		kgo.ClientID("hookd"),
		// acks=all; the idempotent producer is franz-go's default and
		// stays on.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
			return d.DialContext(ctx, network, host)
		}),
	}
	if p.cfg.TLS {
		opts = append(opts, kgo.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12}))
	}
	if m := p.mechanism(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	// franz-go connects lazily and retries a refused login until a
	// record's deadline: a ping surfaces the refusal (or the broker's
	// absence) as the connection's error.
	if err := cl.Ping(ctx); err != nil {
		cl.Close()
		return nil, err
	}
	if err := produceRefused(ctx, cl); err != nil {
		cl.Close()
		return nil, err
	}
	return cl, nil
}

// produceRefused asks the cluster for a producer id, as the idempotent
// producer does before its first record, and returns the refusal when
// the user may not produce (neither IDEMPOTENT_WRITE on the cluster nor
// WRITE on a topic). franz-go fails the records it holds on that
// refusal, but a record that joins its buffers while the refusal is
// being handled can wait there until its deadline (seen about once in
// fifty publishes on a loaded machine): asked at the dial, the refusal
// is the connection's error and no record is ever handed to a client
// that may not produce. Any other answer is left to the producer, which
// asks again.
func produceRefused(ctx context.Context, cl *kgo.Client) error {
	resp, err := kmsg.NewPtrInitProducerIDRequest().RequestWith(ctx, cl)
	if err != nil {
		return nil
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); errors.Is(err, kerr.ClusterAuthorizationFailed) {
		return fmt.Errorf("ask for a producer id: %w", err)
	}
	return nil
}

func (p *kafkaPublisher) mechanism() sasl.Mechanism {
	switch p.cfg.SASLMechanism {
	case "plain":
		return plain.Auth{User: p.cfg.Username, Pass: p.cfg.Password}.AsMechanism()
	case "scram-sha-256":
		return scram.Auth{User: p.cfg.Username, Pass: p.cfg.Password}.AsSha256Mechanism()
	case "scram-sha-512":
		return scram.Auth{User: p.cfg.Username, Pass: p.cfg.Password}.AsSha512Mechanism()
	}
	return nil
}

// Publish produces m and waits for its acks, or for ctx: a record still
// in flight then may yet be written (at least once, as an HTTP request
// cut by its timeout).
func (p *kafkaPublisher) Publish(ctx context.Context, m Message) Result {
	cl, err := p.conn.get(ctx)
	if err != nil {
		return p.classify(ctx, err)
	}
	rec := &kgo.Record{Key: p.key(m), Value: m.Body}
	for k, v := range m.Headers() {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	done := make(chan error, 1)
	cl.Produce(ctx, rec, func(_ *kgo.Record, err error) { done <- err })
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		res := p.classify(ctx, fmt.Errorf("publish to kafka: %w", err))
		if res.Outcome == AuthRefused {
			// The client's producer id may be fenced for good: start anew.
			p.conn.drop(cl, func(a, b *kgo.Client) bool { return a == b })
		}
		return res
	}
	return confirmed(fmt.Sprintf("%d/%d", rec.Partition, rec.Offset))
}

// key is the record's key: the payload's value at the key path, else
// the ordering key, else the message id.
func (p *kafkaPublisher) key(m Message) []byte {
	if k, ok := keyAt(m.Body, p.keyPath); ok {
		return k
	}
	if m.OrderingKey != "" {
		return []byte(m.OrderingKey)
	}
	return []byte(m.ID)
}

// classify maps franz-go's errors: SASL refused and topic or cluster
// authorization failed are auth.
func (p *kafkaPublisher) classify(ctx context.Context, err error) Result {
	var ke *kerr.Error
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed), errors.Is(err, kerr.TopicAuthorizationFailed),
		errors.Is(err, kerr.ClusterAuthorizationFailed), errors.Is(err, kerr.UnsupportedSaslMechanism):
		return authRefused(err)
	case errors.As(err, &ke):
		return failed(Refused, err)
	}
	return p.deps.failure(ctx, err)
}

// Close closes the client.
func (p *kafkaPublisher) Close() { p.conn.Close() }
