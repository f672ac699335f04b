package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// A search's time range is the time in its ids: a message's id carries
// when it was accepted, and its deliveries' ids the same time (childID).
// The range becomes an id range, [IDBound(Since), IDBound(Until)), which
// also selects the partitions to read; the cursor narrows its top.

// idSearchTop sorts after every id of any prefix: ids are Crockford
// base32, and the tables' id columns compare bytes (COLLATE "C").
const idSearchTop = "~"

// searchBounds returns the id range [lo, hi) of a search of ids with
// prefix: since and until when given, below after (the last id of the
// previous page) when given.
func searchBounds(prefix string, since, until *time.Time, after string) (lo, hi string) {
	lo, hi = prefix+"_", prefix+"_"+idSearchTop
	if since != nil {
		lo = IDBound(prefix, *since)
	}
	if until != nil {
		hi = IDBound(prefix, *until)
	}
	if after != "" && after < hi {
		hi = after
	}
	return lo, hi
}

// MessageSearch narrows a search of messages; every field but Tenants is
// optional. After is the id of the last message of the previous page
// (searches run newest first).
type MessageSearch struct {
	// Tenants is whose messages are searched.
	Tenants      Tenants
	EventType    string
	Since, Until *time.Time
	After        string
	Limit        int
	// WithPayload reads each message's payload too.
	WithPayload bool
}

// searchMessagesSQL lists messages newest first within an id range. It
// is planned for its parameters (customPlan): the id range then selects
// the partitions to read (of the payloads too, which share the messages'
// bounds), and an empty filter drops out of the plan.
const searchMessagesSQL = `
		SELECT m.id, m.tenant_id, m.event_type, m.idempotency_key, m.created_at,
			CASE WHEN $6 THEN (SELECT p.payload::text FROM message_payloads p
				WHERE p.message_id = m.id AND p.message_id >= $1 AND p.message_id < $2) END,
			$6 AND NOT EXISTS (SELECT FROM message_payloads p
				WHERE p.message_id = m.id AND p.message_id >= $1 AND p.message_id < $2)
		FROM messages m
		WHERE m.id >= $1 AND m.id < $2 AND ($7::boolean OR m.tenant_id = $3) AND ($4 = '' OR m.event_type = $4)
		ORDER BY m.id DESC LIMIT $5`

// SearchMessages returns messages newest first, without their
// deliveries; with WithPayload their payloads too (PayloadExpired once
// payload retention dropped one).
func (s *Store) SearchMessages(ctx context.Context, f MessageSearch) ([]Message, error) {
	lo, hi := searchBounds("msg", f.Since, f.Until, f.After)
	rows, err := s.pool.Query(ctx, searchMessagesSQL, customPlan, lo, hi, f.Tenants.id, f.EventType, f.Limit, f.WithPayload, f.Tenants.all)
	if err != nil {
		return nil, fmt.Errorf("search messages: %w", err)
	}
	defer rows.Close()
	out := []Message{}
	for rows.Next() {
		var m Message
		var key, payload *string
		if err := rows.Scan(&m.ID, &m.TenantID, &m.EventType, &key, &m.CreatedAt, &payload, &m.PayloadExpired); err != nil {
			return nil, fmt.Errorf("search messages: %w", err)
		}
		if key != nil {
			m.IdempotencyKey = *key
		}
		if payload != nil {
			m.Payload = json.RawMessage(*payload)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("search messages: %w", err)
	}
	return out, nil
}

// DeliverySearch narrows a search of deliveries; every field but Tenants
// is optional. Statuses are delivery statuses, DeliveryDelivering
// included. After is the id of the last delivery of the previous page.
type DeliverySearch struct {
	Statuses   []string
	EndpointID string
	// Tenants is whose deliveries are searched.
	Tenants      Tenants
	MessageID    string
	Since, Until *time.Time
	After        string
	Limit        int
}

// storedStatuses returns the stored statuses a search for statuses reads:
// delivering is a pending or waiting delivery whose job runs. Nil means
// every status.
func storedStatuses(statuses []string) []string {
	if len(statuses) == 0 {
		return nil
	}
	var out []string
	add := func(s string) {
		for _, o := range out {
			if o == s {
				return
			}
		}
		out = append(out, s)
	}
	for _, s := range statuses {
		if s == DeliveryDelivering {
			add(DeliveryPending)
			add(DeliveryWaiting)
			continue
		}
		add(s)
	}
	return out
}

// searchDeliveriesSQL lists deliveries newest first within an id range,
// planned for its parameters (customPlan) as searchMessagesSQL is. $6 is
// the stored statuses to read (an index or the primary key serves each),
// $7 the statuses as shown, delivering derived from the running job.
const searchDeliveriesSQL = `SELECT ` + deliveryColumns + deliveryFrom + `
		WHERE d.id >= $1 AND d.id < $2 AND ($9::boolean OR d.tenant_id = $3) AND ($4 = '' OR d.endpoint_id = $4)
			AND ($5 = '' OR d.message_id = $5)
			AND ($6::text[] IS NULL OR d.status = ANY($6))
			AND ($7::text[] IS NULL OR CASE WHEN d.status IN ('pending', 'waiting') AND j.state = 'running' THEN 'delivering' ELSE d.status END = ANY($7))
		ORDER BY d.id DESC LIMIT $8`

// SearchDeliveries returns deliveries newest first.
func (s *Store) SearchDeliveries(ctx context.Context, f DeliverySearch) ([]Delivery, error) {
	lo, hi := searchBounds("dlv", f.Since, f.Until, f.After)
	var shown []string
	if len(f.Statuses) > 0 {
		shown = f.Statuses
	}
	rows, err := s.pool.Query(ctx, searchDeliveriesSQL, customPlan,
		lo, hi, f.Tenants.id, f.EndpointID, f.MessageID, storedStatuses(f.Statuses), shown, f.Limit, f.Tenants.all)
	if err != nil {
		return nil, fmt.Errorf("search deliveries: %w", err)
	}
	defer rows.Close()
	out := []Delivery{}
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, fmt.Errorf("search deliveries: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("search deliveries: %w", err)
	}
	return out, nil
}
