package hookd

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"iter"

	"github.com/hookd/hookd/sdk/go/api"
)

// The message types.
type (
	// MessageAccepted is a stored message and its deliveries, as Send
	// answers it.
	MessageAccepted = api.MessageAccepted
	// Message is a message with its payload and deliveries.
	Message = api.Message
	// MessageSummary is a message as lists show it.
	MessageSummary = api.MessageSummary
	// MessageFilter narrows Messages.All; its After is set by the
	// iterator.
	MessageFilter = api.SearchMessagesParams
)

// NewMessage is a message to send.
type NewMessage struct {
	// TenantID is the tenant whose subscribed endpoints get the message.
	TenantID string
	// EventType names the event, such as invoice.paid.
	EventType string
	// Payload is marshaled with encoding/json; a json.RawMessage is sent
	// as it is.
	Payload any
	// IdempotencyKey makes a second send of the same message within 24
	// hours store nothing and answer the first. Empty: Send generates one,
	// so its own retries are safe; give one to make your own retries (of a
	// crashed process, say) safe too.
	IdempotencyKey string
}

// MessagesService sends and finds messages.
type MessagesService struct {
	c      *Client
	newKey func() (string, error)
}

// Send stores a message with one delivery per subscribed endpoint of its
// tenant. It always sends an idempotency key (msg's or a generated one)
// and retries with that key, so a send retried after a timeout or a 503
// stores one message.
func (s *MessagesService) Send(ctx context.Context, msg NewMessage) (*MessageAccepted, error) {
	payload, ok := msg.Payload.(json.RawMessage)
	if !ok {
		b, err := json.Marshal(msg.Payload)
		if err != nil {
			return nil, fmt.Errorf("hookd: marshal payload: %w", err)
		}
		payload = b
	}
	key := msg.IdempotencyKey
	if key == "" {
		k, err := s.newKey()
		if err != nil {
			return nil, fmt.Errorf("hookd: idempotency key: %w", err)
		}
		key = k
	}
	req := api.CreateMessageRequest{TenantID: msg.TenantID, EventType: msg.EventType, Payload: payload, IdempotencyKey: &key}
	r, err := s.c.raw.CreateMessageWithResponse(withIdempotent(ctx), req)
	if err != nil {
		return nil, err
	}
	return result(r.JSON202, r.HTTPResponse, r.Body)
}

// Get reads a message with its payload and deliveries.
func (s *MessagesService) Get(ctx context.Context, id string) (*Message, error) {
	r, err := s.c.raw.GetMessageWithResponse(ctx, id)
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// All iterates over the messages filter selects, newest first (filter may
// be nil).
func (s *MessagesService) All(ctx context.Context, filter *MessageFilter) iter.Seq2[MessageSummary, error] {
	params := copyOf(filter)
	return pages(ctx, func(ctx context.Context, after *string) (page[MessageSummary], error) {
		params.After = after
		r, err := s.c.raw.SearchMessagesWithResponse(ctx, &params)
		if err != nil {
			return page[MessageSummary]{}, err
		}
		list, err := result(r.JSON200, r.HTTPResponse, r.Body)
		if err != nil {
			return page[MessageSummary]{}, err
		}
		return page[MessageSummary]{items: list.Data, next: list.NextCursor}, nil
	})
}

// newIdempotencyKey returns a random (version 4) UUID.
func newIdempotencyKey() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}
