package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Message is one event a tenant asked to send.
type Message struct {
	ID             string
	TenantID       string
	EventType      string
	Payload        json.RawMessage
	IdempotencyKey string
	CreatedAt      time.Time
	Deliveries     []Delivery
}

// NewMessage is what the API accepts.
type NewMessage struct {
	TenantID       string
	EventType      string
	Payload        json.RawMessage
	IdempotencyKey string
}

// Enqueuer inserts the River jobs of deliveries inside the transaction that
// creates them, so an accepted message always has its jobs. It returns the
// job ids in the order given.
type Enqueuer interface {
	EnqueueTx(ctx context.Context, tx pgx.Tx, deliveries []QueuedDelivery) ([]int64, error)
}

// QueuedDelivery is a delivery about to get its job, with what the job
// carries of its message.
type QueuedDelivery struct {
	Delivery
	EventType string
	Payload   json.RawMessage
}

func queueAll(msg Message, ds []Delivery) []QueuedDelivery {
	out := make([]QueuedDelivery, len(ds))
	for i, d := range ds {
		out[i] = QueuedDelivery{Delivery: d, EventType: msg.EventType, Payload: msg.Payload}
	}
	return out
}

// EventTypeFilters returns the endpoint filters that match eventType: the
// name itself, each dotted prefix followed by ".*", and "*".
func EventTypeFilters(eventType string) []string {
	out := []string{eventType}
	for i := len(eventType) - 1; i > 0; i-- {
		if eventType[i] == '.' {
			out = append(out, eventType[:i]+".*")
		}
	}
	return append(out, "*")
}

// CreateMessage stores a message and, in the same transaction, one delivery
// per live endpoint of its tenant subscribed to its event type: enabled
// endpoints get a River job, disabled ones a held delivery. With an
// idempotency key already used by the tenant in the last 24 hours it creates
// nothing and returns the first message with created=false.
func (s *Store) CreateMessage(ctx context.Context, in NewMessage, enq Enqueuer) (msg Message, created bool, err error) {
	now := time.Now()
	msg = Message{
		ID:             NewID("msg", now),
		TenantID:       in.TenantID,
		EventType:      in.EventType,
		Payload:        in.Payload,
		IdempotencyKey: in.IdempotencyKey,
	}
	var replayOf string
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		var (
			fresh     bool
			ids       []string
			statuses  []string
			createdAt *time.Time
		)
		// One statement claims the idempotency key, inserts the message when
		// the claim succeeded, and lists the subscribed endpoints.
		err := tx.QueryRow(ctx, `
			WITH k AS (
				INSERT INTO idempotency_keys (tenant_id, key, message_id)
				SELECT $1, $4, $5 WHERE $4 <> ''
				ON CONFLICT (tenant_id, key) DO UPDATE
					SET message_id = EXCLUDED.message_id, created_at = now()
					WHERE idempotency_keys.created_at < now() - interval '24 hours'
				RETURNING message_id
			), m AS (
				INSERT INTO messages (id, tenant_id, event_type, payload, idempotency_key)
				SELECT $5, $1, $2, $3::text::json, nullif($4, '')
				WHERE $4 = '' OR EXISTS (SELECT 1 FROM k)
				RETURNING created_at
			)
			SELECT EXISTS (SELECT 1 FROM m),
				(SELECT created_at FROM m),
				coalesce(array_agg(e.id ORDER BY e.id), '{}'),
				coalesce(array_agg(e.status ORDER BY e.id), '{}')
			FROM endpoints e
			WHERE EXISTS (SELECT 1 FROM m)
				AND e.tenant_id = $1 AND e.deleted_at IS NULL
				AND (cardinality(e.event_types) = 0 OR e.event_types && $6)`,
			in.TenantID, in.EventType, string(in.Payload), in.IdempotencyKey, msg.ID,
			EventTypeFilters(in.EventType),
		).Scan(&fresh, &createdAt, &ids, &statuses)
		if err != nil {
			return fmt.Errorf("insert message: %w", err)
		}
		if !fresh {
			if err := tx.QueryRow(ctx, `SELECT message_id FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`,
				in.TenantID, in.IdempotencyKey).Scan(&replayOf); err != nil {
				return fmt.Errorf("look up idempotency key: %w", err)
			}
			return nil
		}
		msg.CreatedAt = *createdAt
		created = true
		if len(ids) == 0 {
			return nil
		}
		deliveries := make([]Delivery, len(ids))
		var queued []Delivery
		for i, id := range ids {
			d := Delivery{
				ID:         NewID("dlv", now),
				MessageID:  msg.ID,
				EndpointID: id,
				TenantID:   in.TenantID,
				Status:     DeliveryPending,
				Series:     1,
				CreatedAt:  msg.CreatedAt,
				UpdatedAt:  msg.CreatedAt,
			}
			if statuses[i] != EndpointEnabled {
				d.Status = DeliveryHeld
			}
			deliveries[i] = d
			if d.Status == DeliveryPending {
				queued = append(queued, d)
			}
		}
		if len(queued) > 0 {
			jobIDs, err := enq.EnqueueTx(ctx, tx, queueAll(msg, queued))
			if err != nil {
				return fmt.Errorf("enqueue deliveries: %w", err)
			}
			byID := make(map[string]int64, len(queued))
			for i, d := range queued {
				byID[d.ID] = jobIDs[i]
			}
			for i := range deliveries {
				if j, ok := byID[deliveries[i].ID]; ok {
					deliveries[i].JobID = &j
				}
			}
		}
		if err := insertDeliveries(ctx, tx, deliveries); err != nil {
			return err
		}
		msg.Deliveries = deliveries
		return nil
	})
	if err != nil {
		return Message{}, false, err
	}
	if replayOf != "" {
		first, err := s.GetMessage(ctx, replayOf)
		if err != nil {
			return Message{}, false, fmt.Errorf("load idempotent message: %w", err)
		}
		return first, false, nil
	}
	return msg, created, nil
}

func insertDeliveries(ctx context.Context, tx pgx.Tx, ds []Delivery) error {
	ids := make([]string, len(ds))
	messageIDs := make([]string, len(ds))
	endpointIDs := make([]string, len(ds))
	tenantIDs := make([]string, len(ds))
	statuses := make([]string, len(ds))
	jobIDs := make([]*int64, len(ds))
	for i, d := range ds {
		ids[i], messageIDs[i], endpointIDs[i], tenantIDs[i], statuses[i], jobIDs[i] = d.ID, d.MessageID, d.EndpointID, d.TenantID, d.Status, d.JobID
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO deliveries (id, message_id, endpoint_id, tenant_id, status, job_id, created_at, updated_at)
		SELECT id, message_id, endpoint_id, tenant_id, status, job_id, now(), now()
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[])
			AS t(id, message_id, endpoint_id, tenant_id, status, job_id)`,
		ids, messageIDs, endpointIDs, tenantIDs, statuses, jobIDs)
	if err != nil {
		return fmt.Errorf("insert deliveries: %w", err)
	}
	return nil
}

// GetMessage returns a message with its deliveries.
func (s *Store) GetMessage(ctx context.Context, id string) (Message, error) {
	var m Message
	var payload string
	var key *string
	err := s.pool.QueryRow(ctx, `
		SELECT id, tenant_id, event_type, payload::text, idempotency_key, created_at
		FROM messages WHERE id = $1`, id).Scan(&m.ID, &m.TenantID, &m.EventType, &payload, &key, &m.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Message{}, ErrNotFound
	}
	if err != nil {
		return Message{}, fmt.Errorf("load message: %w", err)
	}
	m.Payload = json.RawMessage(payload)
	if key != nil {
		m.IdempotencyKey = *key
	}
	m.Deliveries, err = s.listDeliveries(ctx, `d.message_id = $1`, id)
	if err != nil {
		return Message{}, err
	}
	return m, nil
}

// MessagePayloads returns the payloads of messages by id, for deliveries whose
// job does not carry its payload inline.
func (s *Store) MessagePayloads(ctx context.Context, ids []string) (map[string]json.RawMessage, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, payload::text FROM messages WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("load payloads: %w", err)
	}
	defer rows.Close()
	out := make(map[string]json.RawMessage, len(ids))
	for rows.Next() {
		var id, p string
		if err := rows.Scan(&id, &p); err != nil {
			return nil, fmt.Errorf("load payloads: %w", err)
		}
		out[id] = json.RawMessage(strings.Clone(p))
	}
	return out, rows.Err()
}
