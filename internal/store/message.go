package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/internal/filter"
)

// Message is one event a tenant asked to send.
type Message struct {
	ID        string
	TenantID  string
	EventType string
	Payload   json.RawMessage
	// PayloadExpired reports that the payload was dropped by payload
	// retention (Payload is then nil); the metadata stays.
	PayloadExpired bool
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
	// Trace is the trace context of the request's commit span, in W3C
	// trace-context fields (traceparent, tracestate); the message's delivery
	// jobs carry it so their attempts join the request's trace. Nil when
	// tracing is off.
	Trace map[string]string
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
	// Trace is the message's trace context (NewMessage.Trace), if any.
	Trace map[string]string
	// NotBefore, when set, is when the job may make its attempt: a FIFO
	// head's retry, queued as a new job when the attempt before it
	// failed (StatusUpdate.Requeue).
	NotBefore *time.Time
	// Shared lets the delivery share one job with the other deliveries of
	// its message that may: a new message's deliveries to endpoints
	// without FIFO ordering.
	Shared bool
	// ScheduledAt, when set, is when the job becomes available (on the
	// queue's clock); nil: at once.
	ScheduledAt *time.Time
	// Unsettled makes the job check the ledger before it sends: an
	// attempt of the delivery may have been recorded unacknowledged.
	Unsettled bool
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
	res, err := s.CreateMessages(ctx, []NewMessage{in}, enq)
	if err != nil {
		return Message{}, false, err
	}
	return res[0].Message, res[0].Created, nil
}

// CreatedMessage is CreateMessages' answer for one message: the message
// stored, or, when its idempotency key was already used, the first message
// with Created false.
type CreatedMessage struct {
	Message Message
	Created bool
}

// CreateMessages stores messages as CreateMessage does, all of them in one
// transaction: one statement claims their idempotency keys, inserts them and
// lists their subscribed endpoints, one River insert queues every delivery
// and one statement stores the deliveries. Messages of one tenant with the
// same idempotency key are one message: the first creates it, the others
// replay it. Either every message is stored or none is.
func (s *Store) CreateMessages(ctx context.Context, ins []NewMessage, enq Enqueuer) ([]CreatedMessage, error) {
	var (
		out      []CreatedMessage
		replayOf map[int]string
		sameKey  []int
	)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, replayOf, sameKey, err = s.createMessagesTx(ctx, tx, ins, enq)
		return err
	})
	if err != nil {
		return nil, err
	}
	firsts := make(map[string]Message, len(replayOf))
	for i, id := range replayOf {
		first, ok := firsts[id]
		if !ok {
			var err error
			if first, err = s.GetMessage(ctx, id); err != nil {
				return nil, fmt.Errorf("load idempotent message: %w", err)
			}
			firsts[id] = first
		}
		out[i] = CreatedMessage{Message: first}
	}
	for i, j := range sameKey {
		if j >= 0 {
			out[i] = CreatedMessage{Message: out[j].Message}
		}
	}
	return out, nil
}

// createMessagesTx runs CreateMessages' statements in tx. It returns the
// messages, the first message id of each replayed idempotency key (by
// index in ins; the caller loads them after the commit) and, for each
// message, the index of an earlier one of the batch with its key, or -1.
func (s *Store) createMessagesTx(ctx context.Context, tx pgx.Tx, ins []NewMessage, enq Enqueuer) ([]CreatedMessage, map[int]string, []int, error) {
	now := time.Now()
	out := make([]CreatedMessage, len(ins))
	// sameKeyAs[i] is the index of an earlier message with i's tenant and
	// idempotency key, or -1.
	sameKeyAs := make([]int, len(ins))
	type tenantKey struct{ tenant, key string }
	firstOfKey := make(map[tenantKey]int)
	var (
		ids, tenants, eventTypes, payloads, keys []string
		filterOrds                               []int32
		filters                                  []string
		// batchIndex[j] is the index in ins of the j-th message sent.
		batchIndex []int
	)
	for i, in := range ins {
		sameKeyAs[i] = -1
		if in.IdempotencyKey != "" {
			k := tenantKey{in.TenantID, in.IdempotencyKey}
			if j, ok := firstOfKey[k]; ok {
				sameKeyAs[i] = j
				continue
			}
			firstOfKey[k] = i
		}
		out[i].Message = Message{
			ID:             NewID("msg", now),
			TenantID:       in.TenantID,
			EventType:      in.EventType,
			Payload:        in.Payload,
			IdempotencyKey: in.IdempotencyKey,
		}
		batchIndex = append(batchIndex, i)
		ord := int32(len(batchIndex))
		ids = append(ids, out[i].Message.ID)
		tenants = append(tenants, in.TenantID)
		eventTypes = append(eventTypes, in.EventType)
		payloads = append(payloads, string(in.Payload))
		keys = append(keys, in.IdempotencyKey)
		for _, f := range EventTypeFilters(in.EventType) {
			filterOrds = append(filterOrds, ord)
			filters = append(filters, f)
		}
	}
	// replayOf maps a message not created to the first message of its key.
	replayOf := make(map[int]string)
	err := func() error {
		// One statement claims the idempotency keys, inserts the messages
		// whose claim succeeded (or that have no key), and lists each new
		// message's subscribed endpoints, one row per endpoint.
		// It keeps pgx's cached statement (not customPlan): planning it
		// costs 0.3-1 ms, on every group, and the tables it reads by key
		// (endpoints by tenant, idempotency_keys) grow slowly enough for
		// autoanalyze to replan it.
		rows, err := tx.Query(ctx, `
			WITH input AS (
				SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
					WITH ORDINALITY AS t(id, tenant_id, event_type, payload, key, ord)
			), k AS (
				INSERT INTO idempotency_keys (tenant_id, key, message_id)
				SELECT tenant_id, key, id FROM input WHERE key <> ''
				ON CONFLICT (tenant_id, key) DO UPDATE
					SET message_id = EXCLUDED.message_id, created_at = now()
					WHERE idempotency_keys.created_at < now() - interval '24 hours'
				RETURNING message_id
			), m AS (
				INSERT INTO messages (id, tenant_id, event_type, idempotency_key)
				SELECT id, tenant_id, event_type, nullif(key, '') FROM input
				WHERE key = '' OR id IN (SELECT message_id FROM k)
				RETURNING id, created_at
			), p AS (
				INSERT INTO message_payloads (message_id, payload)
				SELECT i.id, i.payload::json FROM input i JOIN m ON m.id = i.id
			)
			SELECT i.ord, m.created_at, e.id, e.status, e.ordering, e.filter::text
			FROM input i
			LEFT JOIN m ON m.id = i.id
			LEFT JOIN LATERAL (
				SELECT e.id, e.status, e.ordering, e.filter FROM endpoints e
				WHERE m.id IS NOT NULL AND e.tenant_id = i.tenant_id AND e.deleted_at IS NULL
					AND (cardinality(e.event_types) = 0 OR e.event_types && ARRAY(
						SELECT f.filter FROM unnest($6::int[], $7::text[]) AS f(ord, filter) WHERE f.ord = i.ord))
			) e ON true
			ORDER BY i.ord, e.id`,
			ids, tenants, eventTypes, payloads, keys, filterOrds, filters)
		if err != nil {
			return fmt.Errorf("insert messages: %w", err)
		}
		var (
			deliveries  []Delivery
			deliveryMsg []int // index in ins of each delivery's message
			queued      []int // indexes in deliveries of those that get a job
			fifo        []int // indexes in deliveries of those to FIFO endpoints
			replays     []int
			payloads    = make(map[int]decodedPayload)
		)
		for rows.Next() {
			var (
				ord        int64
				createdAt  *time.Time
				endpointID *string
				status     *string
				ordering   *string
				filterSrc  *string
			)
			if err := rows.Scan(&ord, &createdAt, &endpointID, &status, &ordering, &filterSrc); err != nil {
				rows.Close()
				return fmt.Errorf("insert messages: %w", err)
			}
			i := batchIndex[ord-1]
			if createdAt == nil {
				replays = append(replays, i)
				continue
			}
			m := &out[i].Message
			m.CreatedAt = *createdAt
			out[i].Created = true
			if endpointID == nil {
				continue
			}
			if filterSrc != nil && !s.filterMatches(*endpointID, *filterSrc, ins[i], payloads, i) {
				continue
			}
			d := Delivery{
				ID:         DeliveryID(m.ID, *endpointID),
				MessageID:  m.ID,
				EndpointID: *endpointID,
				TenantID:   m.TenantID,
				Status:     DeliveryPending,
				Series:     1,
				CreatedAt:  m.CreatedAt,
				UpdatedAt:  m.CreatedAt,
			}
			if *status != EndpointEnabled {
				d.Status = DeliveryHeld
			}
			deliveries = append(deliveries, d)
			deliveryMsg = append(deliveryMsg, i)
			switch {
			case *ordering == OrderingFIFO:
				fifo = append(fifo, len(deliveries)-1)
			case d.Status == DeliveryPending:
				queued = append(queued, len(deliveries)-1)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("insert messages: %w", err)
		}
		var inLine []bool
		if len(fifo) > 0 {
			var err error
			if queued, inLine, err = queueFIFO(ctx, tx, deliveries, fifo, queued); err != nil {
				return err
			}
		}
		if len(replays) > 0 {
			// A new statement, so keys claimed by transactions that
			// committed while the insert waited on them are seen.
			var rt, rk []string
			for _, i := range replays {
				rt = append(rt, ins[i].TenantID)
				rk = append(rk, ins[i].IdempotencyKey)
			}
			rows, err := tx.Query(ctx, `
				SELECT ik.tenant_id, ik.key, ik.message_id
				FROM idempotency_keys ik, unnest($1::text[], $2::text[]) AS t(tenant_id, key)
				WHERE ik.tenant_id = t.tenant_id AND ik.key = t.key`, rt, rk)
			if err != nil {
				return fmt.Errorf("look up idempotency keys: %w", err)
			}
			first := make(map[tenantKey]string, len(replays))
			for rows.Next() {
				var tenant, key, id string
				if err := rows.Scan(&tenant, &key, &id); err != nil {
					rows.Close()
					return fmt.Errorf("look up idempotency keys: %w", err)
				}
				first[tenantKey{tenant, key}] = id
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return fmt.Errorf("look up idempotency keys: %w", err)
			}
			for _, i := range replays {
				id, ok := first[tenantKey{ins[i].TenantID, ins[i].IdempotencyKey}]
				if !ok {
					return fmt.Errorf("look up idempotency keys: no message for key %q of tenant %q", ins[i].IdempotencyKey, ins[i].TenantID)
				}
				replayOf[i] = id
			}
		}
		if len(queued) > 0 {
			inFIFO := make(map[int]bool, len(fifo))
			for _, di := range fifo {
				inFIFO[di] = true
			}
			qs := make([]QueuedDelivery, len(queued))
			for j, di := range queued {
				m := out[deliveryMsg[di]].Message
				qs[j] = QueuedDelivery{Delivery: deliveries[di], EventType: m.EventType, Payload: m.Payload, Trace: ins[deliveryMsg[di]].Trace,
					Shared: !inFIFO[di]}
			}
			jobIDs, err := enq.EnqueueTx(ctx, tx, qs)
			if err != nil {
				return fmt.Errorf("enqueue deliveries: %w", err)
			}
			for j, di := range queued {
				deliveries[di].JobID = &jobIDs[j]
			}
		}
		if len(deliveries) > 0 {
			if err := insertDeliveries(ctx, tx, deliveries, inLine); err != nil {
				return err
			}
		}
		for j, d := range deliveries {
			m := &out[deliveryMsg[j]].Message
			m.Deliveries = append(m.Deliveries, d)
		}
		return nil
	}()
	if err != nil {
		return nil, nil, nil, err
	}
	return out, replayOf, sameKeyAs, nil
}

// insertDeliveries inserts new deliveries, each created at its CreatedAt;
// those marked in inLine (nil: none) wait in their FIFO queue.
func insertDeliveries(ctx context.Context, tx pgx.Tx, ds []Delivery, inLine []bool) error {
	ids := make([]string, len(ds))
	messageIDs := make([]string, len(ds))
	endpointIDs := make([]string, len(ds))
	tenantIDs := make([]string, len(ds))
	statuses := make([]string, len(ds))
	jobIDs := make([]*int64, len(ds))
	parkReasons := make([]*string, len(ds))
	createdAt := make([]time.Time, len(ds))
	fifo := ParkFIFO
	for i, d := range ds {
		ids[i], messageIDs[i], endpointIDs[i], tenantIDs[i], statuses[i], jobIDs[i] = d.ID, d.MessageID, d.EndpointID, d.TenantID, d.Status, d.JobID
		createdAt[i] = d.CreatedAt
		if inLine != nil && inLine[i] {
			parkReasons[i] = &fifo
		}
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO deliveries (id, message_id, endpoint_id, tenant_id, status, job_id, park_reason, created_at, updated_at)
		SELECT id, message_id, endpoint_id, tenant_id, status, job_id, park_reason, created_at, now()
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[], $8::timestamptz[])
			AS t(id, message_id, endpoint_id, tenant_id, status, job_id, park_reason, created_at)`,
		ids, messageIDs, endpointIDs, tenantIDs, statuses, jobIDs, parkReasons, createdAt)
	if err != nil {
		return fmt.Errorf("insert deliveries: %w", err)
	}
	return nil
}

// decodedPayload is a message payload decoded for filters, once per
// message of a group.
type decodedPayload struct {
	v   any
	err error
}

// filterMatches says whether the message ins (index i of its group) passes
// an endpoint's filter. A filter that no longer parses (one stored under
// other bounds) and a payload that does not decode let the message
// through: a delivery too many is better than one silently lost.
func (s *Store) filterMatches(endpointID, src string, in NewMessage, payloads map[int]decodedPayload, i int) bool {
	f, err := s.filters.get(src)
	if err != nil {
		s.logger.Warn("endpoint_filter_unreadable", slog.String("endpoint", endpointID), slog.String("error", err.Error()))
		return true
	}
	p, ok := payloads[i]
	if !ok {
		p.v, p.err = filter.DecodePayload(in.Payload)
		payloads[i] = p
	}
	if p.err != nil {
		return true
	}
	return f.Match(in.EventType, p.v)
}

// queueFIFO places a group's deliveries to FIFO endpoints (fifo, indexes
// in ds in the group's order) in their queues: each is created at a stamp
// after every delivery already queued (the group's statements hold the
// queue locks from here to the commit, so created_at order is commit
// order); the first of an idle queue is its head and gets a job (or is
// held, for a disabled endpoint), the others wait in line. It returns
// queued with the heads added, and which deliveries wait in line. A FIFO
// endpoint without a queue row (none is ever missing) is delivered
// unordered.
func queueFIFO(ctx context.Context, tx pgx.Tx, ds []Delivery, fifo, queued []int) ([]int, []bool, error) {
	counts := make(map[string]int)
	for _, di := range fifo {
		counts[ds[di].EndpointID]++
	}
	eps := make([]string, 0, len(counts))
	for ep := range counts {
		eps = append(eps, ep)
	}
	if _, err := lockQueues(ctx, tx, eps); err != nil {
		return nil, nil, err
	}
	slots, err := stampQueues(ctx, tx, counts)
	if err != nil {
		return nil, nil, err
	}
	inLine := make([]bool, len(ds))
	placed := make(map[string]int, len(counts))
	for _, di := range fifo {
		d := &ds[di]
		slot, ok := slots[d.EndpointID]
		if !ok {
			if d.Status == DeliveryPending {
				queued = append(queued, di)
			}
			continue
		}
		k := placed[d.EndpointID]
		placed[d.EndpointID]++
		d.CreatedAt = slot.First.Add(time.Duration(k) * time.Microsecond)
		d.UpdatedAt = d.CreatedAt
		switch {
		case k == 0 && slot.Idle && d.Status == DeliveryPending:
			queued = append(queued, di)
		case k == 0 && slot.Idle:
			// A disabled endpoint's head is held.
		default:
			d.Status = DeliveryWaiting
			inLine[di] = true
		}
	}
	return queued, inLine, nil
}

// GetMessage returns a message with its deliveries.
func (s *Store) GetMessage(ctx context.Context, id string) (Message, error) {
	var m Message
	var payload, key *string
	err := s.pool.QueryRow(ctx, `
		SELECT m.id, m.tenant_id, m.event_type, p.payload::text, m.idempotency_key, m.created_at
		FROM messages m LEFT JOIN message_payloads p ON p.message_id = m.id
		WHERE m.id = $1`, id).Scan(&m.ID, &m.TenantID, &m.EventType, &payload, &key, &m.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Message{}, ErrNotFound
	}
	if err != nil {
		return Message{}, fmt.Errorf("load message: %w", err)
	}
	if payload != nil {
		m.Payload = json.RawMessage(*payload)
	} else {
		m.PayloadExpired = true
	}
	if key != nil {
		m.IdempotencyKey = *key
	}
	// A message's deliveries carry its id's time (childID; before
	// partitioning, ids minted a little later): the id range keeps the
	// lookup in the message's partition, or the next one.
	if lo, hi, ok := idRange("dlv", id, clockSkewMargin); ok {
		m.Deliveries, err = s.listDeliveries(ctx, `d.message_id = $1 AND d.id >= $2 AND d.id < $3`, id, lo, hi)
	} else {
		m.Deliveries, err = s.listDeliveries(ctx, `d.message_id = $1`, id)
	}
	if err != nil {
		return Message{}, err
	}
	return m, nil
}

// MessagePayloads returns the payloads of messages by id, for deliveries whose
// job does not carry its payload inline. A message whose payload retention
// dropped (or that is gone) is absent from the answer.
func (s *Store) MessagePayloads(ctx context.Context, ids []string) (map[string]json.RawMessage, error) {
	rows, err := s.pool.Query(ctx, `SELECT message_id, payload::text FROM message_payloads WHERE message_id = ANY($1)`, customPlan, ids)
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
