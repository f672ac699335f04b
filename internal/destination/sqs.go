package destination

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// SQSConfig is an Amazon SQS queue: each message is sent with the
// headers as message attributes, delivered once SQS returns its message
// id. A FIFO queue (its URL ends in .fifo) gets the message group from
// the endpoint and the deduplication id from the delivery.
type SQSConfig struct {
	// QueueURL is the queue's URL; its scheme and host are the endpoint
	// the client calls.
	QueueURL string `json:"queue_url"`
	Region   string `json:"region"`
	// MessageGroupID is a FIFO queue's message group; empty is the
	// endpoint's id.
	MessageGroupID string `json:"message_group_id,omitempty"`
	// AccessKeyID and SecretAccessKey (both write-only) sign the
	// requests. hookd never sends with credentials of its own to a
	// customer's queue.
	AccessKeyID     string `json:"access_key_id,omitempty"`
	SecretAccessKey string `json:"secret_access_key,omitempty"`
}

var _ Config = (*SQSConfig)(nil)

var (
	awsRegion = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)
	// sqsGroup is the characters SQS allows in a group or dedup id.
	sqsGroup = regexp.MustCompile("^[a-zA-Z0-9!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~]{1,128}$")
)

// Type is SQS.
func (c *SQSConfig) Type() Type { return SQS }

// Fifo reports whether the queue is a FIFO queue.
func (c *SQSConfig) Fifo() bool { return strings.HasSuffix(c.QueueURL, ".fifo") }

// Validate checks the queue URL (account and queue in its path), the
// region, the group and the credentials.
func (c *SQSConfig) Validate() error {
	u, err := checkURL("queue_url", c.QueueURL, "https", "http")
	if err != nil {
		return err
	}
	if parts := strings.Split(strings.Trim(u.Path, "/"), "/"); len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		return fieldErr("queue_url", "path must be /<account>/<queue>")
	}
	if !awsRegion.MatchString(c.Region) {
		return fieldErr("region", "must be a region name (us-east-1)")
	}
	if c.MessageGroupID != "" {
		if !c.Fifo() {
			return fieldErr("message_group_id", "only for a FIFO queue (.fifo)")
		}
		if !sqsGroup.MatchString(c.MessageGroupID) {
			return fieldErr("message_group_id", "must be 1 to 128 printable ASCII characters")
		}
	}
	if c.AccessKeyID == "" {
		return fieldErr("access_key_id", "required")
	}
	if c.SecretAccessKey == "" {
		return fieldErr("secret_access_key", "required")
	}
	if err := checkCred("access_key_id", c.AccessKeyID); err != nil {
		return err
	}
	return checkCred("secret_access_key", c.SecretAccessKey)
}

// Targets is the queue URL's host.
func (c *SQSConfig) Targets() []Target {
	u, err := url.Parse(c.QueueURL)
	if err != nil {
		return nil
	}
	return []Target{{Field: "queue_url", Host: u.Hostname()}}
}

// Redacted drops the keys.
func (c *SQSConfig) Redacted() Config {
	r := *c
	r.AccessKeyID, r.SecretAccessKey = "", ""
	return &r
}

// Credentials are the keys.
func (c *SQSConfig) Credentials() map[string]string {
	return creds("access_key_id", c.AccessKeyID, "secret_access_key", c.SecretAccessKey)
}

// WithCredentials sets the keys.
func (c *SQSConfig) WithCredentials(m map[string]string) Config {
	r := *c
	r.AccessKeyID, r.SecretAccessKey = m["access_key_id"], m["secret_access_key"]
	return &r
}

type sqsPublisher struct {
	cfg  SQSConfig
	deps Deps

	once   sync.Once
	client *sqs.Client
	http   *awshttp.BuildableClient
}

func newSQS(c SQSConfig, _ PoolConfig, d Deps) *sqsPublisher { return &sqsPublisher{cfg: c, deps: d} }

// get builds the client once; its HTTP transport pools the connections.
func (p *sqsPublisher) get() *sqs.Client {
	p.once.Do(func() {
		u, _ := url.Parse(p.cfg.QueueURL)
		base := u.Scheme + "://" + u.Host
		p.http = awshttp.NewBuildableClient().WithDialerOptions(func(d *net.Dialer) { d.Control = p.deps.DialControl })
		p.client = sqs.New(sqs.Options{
			Region:       p.cfg.Region,
			Credentials:  credentials.NewStaticCredentialsProvider(p.cfg.AccessKeyID, p.cfg.SecretAccessKey, ""),
			BaseEndpoint: aws.String(base),
			HTTPClient:   p.http,
			// hookd's own schedule retries, and the breaker sees each
			// failure.
			RetryMaxAttempts: 1,
		})
	})
	return p.client
}

// Publish sends m and waits for its message id.
func (p *sqsPublisher) Publish(ctx context.Context, m Message) Result {
	attrs := map[string]types.MessageAttributeValue{}
	for k, v := range m.Headers() {
		attrs[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	in := &sqs.SendMessageInput{QueueUrl: aws.String(p.cfg.QueueURL), MessageBody: aws.String(string(m.Body)), MessageAttributes: attrs}
	if p.cfg.Fifo() {
		group := p.cfg.MessageGroupID
		if group == "" {
			group = m.EndpointID
		}
		in.MessageGroupId = aws.String(group)
		in.MessageDeduplicationId = aws.String(m.DeliveryID)
	}
	out, err := p.get().SendMessage(ctx, in)
	if err != nil {
		return p.classify(ctx, fmt.Errorf("publish to sqs: %w", err))
	}
	return confirmed(aws.ToString(out.MessageId))
}

// sqsAuthCodes are the error codes of refused credentials or rights.
var sqsAuthCodes = map[string]bool{
	"InvalidClientTokenId": true, "SignatureDoesNotMatch": true, "AccessDenied": true, "AccessDeniedException": true,
	"UnrecognizedClientException": true, "MissingAuthenticationToken": true, "InvalidSecurity": true, "ExpiredToken": true,
	"IncompleteSignature": true, "KMS.AccessDeniedException": true,
}

// classify maps the SDK's errors: the auth codes, or a 401 or 403, are
// auth; any other API error refused.
func (p *sqsPublisher) classify(ctx context.Context, err error) Result {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		if sqsAuthCodes[ae.ErrorCode()] {
			return authRefused(err)
		}
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) && (re.HTTPStatusCode() == 401 || re.HTTPStatusCode() == 403) {
		return authRefused(err)
	}
	if ae != nil {
		return failed(Refused, err)
	}
	return p.deps.failure(ctx, err)
}

// Close closes the idle connections of the client's transport.
func (p *sqsPublisher) Close() {
	p.once.Do(func() {})
	if p.http != nil {
		p.http.GetTransport().CloseIdleConnections()
	}
}
