package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/hookd/hookd/internal/store"
)

// maxRequestBytes caps request bodies other than messages.
const maxRequestBytes = 64 << 10

// messageEnvelopeBytes is the room a message request may use beyond its
// payload.
const messageEnvelopeBytes = 16 << 10

type createMessageRequest struct {
	TenantID       string          `json:"tenant_id"`
	EventType      string          `json:"event_type"`
	Payload        json.RawMessage `json:"payload"`
	IdempotencyKey string          `json:"idempotency_key"`
}

func (r createMessageRequest) validate() error {
	var fe fieldErrors
	validateTenantID(&fe, "tenant_id", r.TenantID)
	validateEventType(&fe, "event_type", r.EventType)
	if len(r.Payload) == 0 {
		fe.add("payload", "is required (any JSON value)")
	} else if !utf8.Valid(r.Payload) {
		// encoding/json keeps a RawMessage's bytes as sent; Postgres would
		// refuse them.
		fe.add("payload", "must be UTF-8")
	}
	if utf8.RuneCountInString(r.IdempotencyKey) > maxIdempotencyKey {
		fe.add("idempotency_key", fmt.Sprintf("must be at most %d characters", maxIdempotencyKey))
	} else if strings.IndexFunc(r.IdempotencyKey, unicode.IsControl) >= 0 {
		fe.add("idempotency_key", "must not contain control characters")
	}
	return fe.err()
}

// newMessage is the message to store: its payload compacted (these are
// the bytes signed and sent) and within limit.
func (r createMessageRequest) newMessage(limit int64) (store.NewMessage, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, r.Payload); err != nil {
		return store.NewMessage{}, invalid("payload", "is not valid JSON")
	}
	if int64(buf.Len()) > limit {
		return store.NewMessage{}, &tooLargeError{field: "payload", limit: limit}
	}
	return store.NewMessage{TenantID: r.TenantID, EventType: r.EventType, Payload: buf.Bytes(), IdempotencyKey: r.IdempotencyKey}, nil
}

type messageResponse struct {
	ID        string          `json:"id"`
	TenantID  string          `json:"tenant_id"`
	EventType string          `json:"event_type"`
	Payload   json.RawMessage `json:"payload,omitempty"`
	// PayloadExpired (GET only) is true once payload retention dropped
	// the payload, which then reads null.
	PayloadExpired *bool              `json:"payload_expired,omitempty"`
	IdempotencyKey *string            `json:"idempotency_key"`
	CreatedAt      time.Time          `json:"created_at"`
	Deliveries     []deliveryResponse `json:"deliveries"`
}

func toMessage(m store.Message, withPayload bool) messageResponse {
	out := messageResponse{
		ID: m.ID, TenantID: m.TenantID, EventType: m.EventType, CreatedAt: m.CreatedAt,
		Deliveries: make([]deliveryResponse, len(m.Deliveries)),
	}
	if withPayload {
		out.Payload = m.Payload
		if m.PayloadExpired {
			out.Payload = json.RawMessage("null")
		}
		out.PayloadExpired = &m.PayloadExpired
	}
	if m.IdempotencyKey != "" {
		out.IdempotencyKey = &m.IdempotencyKey
	}
	for i, d := range m.Deliveries {
		out.Deliveries[i] = toDelivery(d)
	}
	return out
}

func handleCreateMessage(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := decode[createMessageRequest](r, d.MaxPayloadBytes+messageEnvelopeBytes)
		if err == nil {
			err = allowTenant(r, "tenant_id", req.TenantID)
		}
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		in, err := req.newMessage(d.MaxPayloadBytes)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		if d.StrictEventTypes {
			if err := d.catalogue.check(r.Context(), in.EventType, in.Payload); err != nil {
				writeProblem(w, r, d.Logger, err)
				return
			}
		}
		ctx, span := startCommit(r.Context(), d, &in)
		m, created, err := d.Messages.CreateMessage(ctx, in)
		endCommit(span, m, created, err)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		if !created {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.Header().Set("Location", "/v1/messages/"+m.ID)
		encode(w, http.StatusAccepted, toMessage(m, false))
	})
}

func handleGetMessage(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m, err := d.Store.GetMessage(r.Context(), chi.URLParam(r, "id"))
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, toMessage(m, true))
	})
}
