package destination

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Type names what an endpoint delivers to.
type Type string

// The destination types. HTTP is the default and has no Config here: its
// URL stays the endpoint's own field.
const (
	HTTP     Type = "http"
	RabbitMQ Type = "rabbitmq"
	NATS     Type = "nats"
	Kafka    Type = "kafka"
	SQS      Type = "sqs"
	PubSub   Type = "pubsub"
	Redis    Type = "redis"
	MQTT     Type = "mqtt"
)

// Types lists every type, HTTP first.
var Types = []Type{HTTP, RabbitMQ, NATS, Kafka, SQS, PubSub, Redis, MQTT}

// Valid reports whether t is a known type.
func (t Type) Valid() bool { return slices.Contains(Types, t) }

// Config is one non-HTTP destination's settings. Its JSON form is the
// endpoint's `destination` object; credentials are in it when written
// and absent when Redacted.
type Config interface {
	// Type is the destination's type.
	Type() Type
	// Validate checks every field; a *FieldError names the first bad one
	// ("destination.exchange").
	Validate() error
	// Targets are the network hosts a publish connects to, each with the
	// field naming it, for target validation as for URLs (CheckTargets).
	Targets() []Target
	// Redacted is the config without its credentials: what a read shows.
	Redacted() Config
	// Credentials are the config's write-only fields, by JSON name, with
	// their values (empty ones left out).
	Credentials() map[string]string
	// WithCredentials is the config with its write-only fields set from
	// c (by JSON name): a read config made whole again from the sealed
	// credentials.
	WithCredentials(c map[string]string) Config
}

// FieldError is a validation error naming the field at fault by its
// path in the request ("destination.routing_key").
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// fieldErr is a FieldError for a field of the destination object.
func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: "destination." + field, Reason: fmt.Sprintf(format, args...)}
}

// ErrUnknownType is returned (wrapped) by Parse for a type it does not
// know.
var ErrUnknownType = errors.New("unknown destination type")

// Parse decodes and validates the destination object of type t. Unknown
// fields are refused, as everywhere in the API. HTTP has no destination
// object: Parse refuses one.
func Parse(t Type, raw []byte) (Config, error) {
	var c Config
	switch t {
	case RabbitMQ:
		c = &RabbitMQConfig{}
	case NATS:
		c = &NATSConfig{}
	case Kafka:
		c = &KafkaConfig{}
	case SQS:
		c = &SQSConfig{}
	case PubSub:
		c = &PubSubConfig{}
	case Redis:
		c = &RedisConfig{}
	case MQTT:
		c = &MQTTConfig{}
	case HTTP:
		return nil, &FieldError{Field: "destination", Reason: "an http endpoint has no destination object: its target is url"}
	default:
		return nil, &FieldError{Field: "type", Reason: fmt.Sprintf("%v: %q (want one of %s)", ErrUnknownType, t, typeList())}
	}
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, &FieldError{Field: "destination", Reason: fmt.Sprintf("required for type %s", t)}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		return nil, decodeFieldError(err)
	}
	if dec.More() {
		return nil, &FieldError{Field: "destination", Reason: "trailing data after the object"}
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// decodeFieldError names the field a decode error is about.
func decodeFieldError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fieldErr(te.Field, "must be %s", te.Type.String())
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fieldErr(strings.Trim(name, `"`), "unknown field")
	}
	return &FieldError{Field: "destination", Reason: "must be a JSON object: " + err.Error()}
}

func typeList() string {
	s := make([]string, len(Types))
	for i, t := range Types {
		s[i] = string(t)
	}
	return strings.Join(s, ", ")
}

// Target is a host a destination connects to and the field that names
// it.
type Target struct {
	// Field is the field's name in the destination object ("url",
	// "brokers[1]").
	Field string
	// Host is a host name or an address, without port or brackets.
	Host string
}

// CheckTargets applies check (the SSRF guard's registration check,
// delivery.CheckHost) to every host of c, and names the field of the
// first refused one.
func CheckTargets(ctx context.Context, c Config, check func(ctx context.Context, host string) error) error {
	for _, t := range c.Targets() {
		if err := check(ctx, t.Host); err != nil {
			return fieldErr(t.Field, "%v", err)
		}
	}
	return nil
}
