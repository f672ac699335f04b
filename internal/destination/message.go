package destination

import (
	"strconv"
	"time"
)

// The Standard Webhooks names every publish carries, as headers or
// attributes where the system has them, as the HTTP path sends them.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
	// HeaderEventType is the message's event type.
	HeaderEventType = "webhook-event-type"
)

// Message is one delivery's publish.
type Message struct {
	// ID is the message id: the webhook-id a consumer verifies with.
	ID string
	// DeliveryID names this delivery of the message to this endpoint:
	// the deduplication id where the system has one, so a retry after a
	// lost confirmation is not stored twice.
	DeliveryID string
	// EndpointID is the endpoint delivered to (SQS FIFO's default message
	// group).
	EndpointID string
	EventType  string
	// Timestamp is the attempt's time, signed with the message.
	Timestamp time.Time
	// Signature is the webhook-signature value, computed by the delivery
	// package exactly as for an HTTP attempt.
	Signature string
	// Body is the payload, published as it is.
	Body []byte
	// OrderingKey is set for a FIFO endpoint: the key that keeps its
	// messages in order where the system has one (Kafka record key,
	// Pub/Sub ordering key, SQS message group).
	OrderingKey string
}

// Headers are the Standard Webhooks headers of m and its event type.
func (m Message) Headers() map[string]string {
	h := map[string]string{
		HeaderID:        m.ID,
		HeaderTimestamp: strconv.FormatInt(m.Timestamp.Unix(), 10),
		HeaderSignature: m.Signature,
	}
	if m.EventType != "" {
		h[HeaderEventType] = m.EventType
	}
	return h
}
