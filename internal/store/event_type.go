package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// EventType is an entry of the event type catalogue.
type EventType struct {
	Name        string
	Description string
	// Schema is the JSON Schema of the type's payloads; nil means none.
	Schema    json.RawMessage
	Archived  bool
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ErrEventTypeExists is returned when creating an event type whose name is
// registered.
var ErrEventTypeExists = fmt.Errorf("%w: an event type with that name exists", ErrConflict)

const eventTypeColumns = `name, description, schema, archived, created_at, updated_at`

func scanEventType(row pgx.Row) (EventType, error) {
	var e EventType
	var schema []byte
	err := row.Scan(&e.Name, &e.Description, &schema, &e.Archived, &e.CreatedAt, &e.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return EventType{}, ErrNotFound
	}
	if schema != nil {
		e.Schema = schema
	}
	return e, err
}

// nullableJSON maps an absent schema to SQL NULL.
func nullableJSON(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}

// CreateEventType registers e and returns the stored row.
func (s *Store) CreateEventType(ctx context.Context, e EventType) (EventType, error) {
	out, err := scanEventType(s.pool.QueryRow(ctx, `
		INSERT INTO event_types (name, description, schema, archived) VALUES ($1, $2, $3::jsonb, $4)
		RETURNING `+eventTypeColumns, e.Name, e.Description, nullableJSON(e.Schema), e.Archived))
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return EventType{}, ErrEventTypeExists
	}
	if err != nil {
		return EventType{}, fmt.Errorf("create event type: %w", err)
	}
	return out, nil
}

// GetEventType returns one event type.
func (s *Store) GetEventType(ctx context.Context, name string) (EventType, error) {
	e, err := scanEventType(s.pool.QueryRow(ctx, `SELECT `+eventTypeColumns+` FROM event_types WHERE name = $1`, name))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return EventType{}, fmt.Errorf("load event type: %w", err)
	}
	return e, err
}

// ListEventTypes returns event types in name order, a page at a time.
// Limit 0 lists them all (the api's catalogue cache).
func (s *Store) ListEventTypes(ctx context.Context, p Page) ([]EventType, error) {
	limit := any(p.Limit)
	if p.Limit <= 0 {
		limit = nil
	}
	rows, err := s.pool.Query(ctx, `SELECT `+eventTypeColumns+` FROM event_types WHERE name > $1 ORDER BY name LIMIT $2`, p.After, limit)
	if err != nil {
		return nil, fmt.Errorf("list event types: %w", err)
	}
	defer rows.Close()
	var out []EventType
	for rows.Next() {
		e, err := scanEventType(rows)
		if err != nil {
			return nil, fmt.Errorf("list event types: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// EventTypePatch holds the fields of a partial update; nil leaves a field
// as it is. ClearSchema removes the schema.
type EventTypePatch struct {
	Description *string
	Schema      json.RawMessage
	ClearSchema bool
	Archived    *bool
}

// UpdateEventType applies patch.
func (s *Store) UpdateEventType(ctx context.Context, name string, p EventTypePatch) (EventType, error) {
	e, err := scanEventType(s.pool.QueryRow(ctx, `
		UPDATE event_types SET
			description = coalesce($2, description),
			schema = CASE WHEN $3 THEN NULL ELSE coalesce($4::jsonb, schema) END,
			archived = coalesce($5, archived),
			updated_at = now()
		WHERE name = $1
		RETURNING `+eventTypeColumns, name, p.Description, p.ClearSchema, nullableJSON(p.Schema), p.Archived))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return EventType{}, fmt.Errorf("update event type: %w", err)
	}
	return e, err
}

// DeleteEventType deletes an event type no message names, or archives one
// that messages name (their history keeps its meaning); archived reports
// which, with the archived row.
func (s *Store) DeleteEventType(ctx context.Context, name string) (out EventType, archived bool, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		var used bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM messages WHERE event_type = $1)`, name).Scan(&used); err != nil {
			return fmt.Errorf("find messages of event type: %w", err)
		}
		if used {
			archived = true
			var err error
			out, err = scanEventType(tx.QueryRow(ctx, `
				UPDATE event_types SET archived = true, updated_at = now() WHERE name = $1
				RETURNING `+eventTypeColumns, name))
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM event_types WHERE name = $1`, name)
		if err != nil {
			return fmt.Errorf("delete event type: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return nil
	})
	return out, archived, err
}
