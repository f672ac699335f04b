package destination

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// PubSubConfig is a Google Cloud Pub/Sub topic: each message is
// published with the headers as attributes, delivered once Pub/Sub
// returns its message id. A FIFO endpoint's messages carry an ordering
// key.
type PubSubConfig struct {
	Project string `json:"project"`
	Topic   string `json:"topic"`
	// CredentialsJSON is a service account key (write-only). hookd never
	// publishes with credentials of its own to a customer's project.
	CredentialsJSON string `json:"credentials_json,omitempty"`
}

var _ Config = (*PubSubConfig)(nil)

var (
	gcpProject  = regexp.MustCompile(`^[a-z][a-z0-9-]{4,28}[a-z0-9]$|^[a-z][a-z0-9.-]*:[a-z][a-z0-9-]{4,28}[a-z0-9]$`)
	pubsubTopic = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}$`)
)

// Type is PubSub.
func (c *PubSubConfig) Type() Type { return PubSub }

// Validate checks the project id, the topic id (Pub/Sub's resource
// names) and that the credentials are a service account key.
func (c *PubSubConfig) Validate() error {
	if !gcpProject.MatchString(c.Project) {
		return fieldErr("project", "must be a project id: 6 to 30 lowercase letters, digits and hyphens")
	}
	if !pubsubTopic.MatchString(c.Topic) || len(c.Topic) >= 4 && c.Topic[:4] == "goog" {
		return fieldErr("topic", "must be a topic id: 3 to 255 characters, starting with a letter, not goog")
	}
	if c.CredentialsJSON == "" {
		return fieldErr("credentials_json", "required: a service account key")
	}
	if err := checkCred("credentials_json", c.CredentialsJSON); err != nil {
		return err
	}
	var key struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal([]byte(c.CredentialsJSON), &key); err != nil || key.Type != "service_account" {
		return fieldErr("credentials_json", `must be a service account key (JSON with "type": "service_account")`)
	}
	return nil
}

// Targets is none: Pub/Sub's endpoint is Google's, not the customer's.
func (c *PubSubConfig) Targets() []Target { return nil }

// Redacted drops the credentials.
func (c *PubSubConfig) Redacted() Config { r := *c; r.CredentialsJSON = ""; return &r }

// Credentials is the service account key.
func (c *PubSubConfig) Credentials() map[string]string {
	return creds("credentials_json", c.CredentialsJSON)
}

// WithCredentials sets the service account key.
func (c *PubSubConfig) WithCredentials(m map[string]string) Config {
	r := *c
	r.CredentialsJSON = m["credentials_json"]
	return &r
}

type pubsubConn struct {
	client *pubsub.Client
	pub    *pubsub.Publisher
}

type pubsubPublisher struct {
	cfg     PubSubConfig
	timeout time.Duration
	deps    Deps
	conn    *lazyConn[*pubsubConn]
}

func newPubSub(c PubSubConfig, pc PoolConfig, d Deps) *pubsubPublisher {
	p := &pubsubPublisher{cfg: c, deps: d, timeout: pc.DialTimeout}
	p.conn = newLazyConn(pc.DialTimeout, p.dial, func(c *pubsubConn) {
		// The connection first: Stop waits for every pending publish,
		// which a gone server would hold for the client's own timeout.
		_ = c.client.Close()
		c.pub.Stop()
	})
	return p
}

func (p *pubsubPublisher) dial(ctx context.Context) (*pubsubConn, error) {
	opts := p.deps.PubSubOptions
	if opts == nil {
		opts = []option.ClientOption{option.WithAuthCredentialsJSON(option.ServiceAccount, []byte(p.cfg.CredentialsJSON))}
	}
	cl, err := pubsub.NewClient(ctx, p.cfg.Project, opts...)
	if err != nil {
		return nil, err
	}
	pub := cl.Publisher(p.cfg.Topic)
	pub.EnableMessageOrdering = true
	// The client retries a publish on its own until this timeout (60 s by
	// default), past any endpoint's deadline, and Close waits for it.
	pub.PublishSettings.Timeout = p.timeout
	return &pubsubConn{client: cl, pub: pub}, nil
}

// Publish publishes m and waits for its message id.
func (p *pubsubPublisher) Publish(ctx context.Context, m Message) Result {
	c, err := p.conn.get(ctx)
	if err != nil {
		return p.classify(ctx, err)
	}
	res := c.pub.Publish(ctx, &pubsub.Message{Data: m.Body, Attributes: m.Headers(), OrderingKey: m.OrderingKey})
	id, err := res.Get(ctx)
	if err != nil {
		if m.OrderingKey != "" {
			// The client pauses a key after a failure; the delivery's
			// retry (its FIFO head) is what keeps the order.
			c.pub.ResumePublish(m.OrderingKey)
		}
		return p.classify(ctx, fmt.Errorf("publish to pubsub: %w", err))
	}
	return confirmed(id)
}

// classify maps gRPC statuses: unauthenticated and permission denied are
// auth; unavailable unreachable; a deadline a timeout; others refused.
func (p *pubsubPublisher) classify(ctx context.Context, err error) Result {
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return failed(Timeout, err)
	}
	if s, ok := status.FromError(unwrapStatus(err)); ok && s.Code() != codes.Unknown {
		switch s.Code() {
		case codes.Unauthenticated, codes.PermissionDenied:
			return authRefused(err)
		case codes.Unavailable:
			return failed(Unreachable, err)
		case codes.DeadlineExceeded:
			return failed(Timeout, err)
		}
		return failed(Refused, err)
	}
	return p.deps.failure(ctx, err)
}

// unwrapStatus finds the error carrying a gRPC status in err's chain.
func unwrapStatus(err error) error {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if _, ok := e.(interface{ GRPCStatus() *status.Status }); ok {
			return e
		}
	}
	return err
}

// Close stops the publisher and closes the client.
func (p *pubsubPublisher) Close() { p.conn.Close() }
