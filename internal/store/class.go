package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/internal/trafficclass"
)

// ClassChannel is the NOTIFY channel naming every traffic class that was
// created, changed or deleted, so dispatchers reload it.
const ClassChannel = "hookd_class"

// ErrUnknownClass is returned when an endpoint names a traffic class that
// does not exist.
var ErrUnknownClass = errors.New("no traffic class has that name")

// ErrClassInUse is returned when deleting a class an endpoint uses.
var ErrClassInUse = fmt.Errorf("%w: the traffic class is in use", ErrConflict)

// ErrBuiltinClass is returned when deleting a built-in class.
var ErrBuiltinClass = fmt.Errorf("%w: built-in traffic classes can be tuned but not deleted", ErrConflict)

// ErrClassExists is returned when creating a class whose name is taken.
var ErrClassExists = fmt.Errorf("%w: a traffic class with that name exists", ErrConflict)

// EnsureBuiltinClasses inserts the built-in classes that are missing. An
// operator's tuning of a built-in is kept.
func (s *Store) EnsureBuiltinClasses(ctx context.Context, builtins []trafficclass.Class) error {
	for _, c := range builtins {
		c.Builtin = true
		body, err := c.MarshalJSON()
		if err != nil {
			return fmt.Errorf("encode class %s: %w", c.Name, err)
		}
		if _, err := s.pool.Exec(ctx, `INSERT INTO traffic_classes (name, config, builtin) VALUES ($1, $2, true) ON CONFLICT (name) DO NOTHING`, c.Name, body); err != nil {
			return fmt.Errorf("insert built-in class %s: %w", c.Name, err)
		}
	}
	return nil
}

func scanClass(row pgx.Row) (trafficclass.Class, error) {
	var (
		body    []byte
		builtin bool
	)
	if err := row.Scan(&body, &builtin); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return trafficclass.Class{}, ErrNotFound
		}
		return trafficclass.Class{}, err
	}
	c, err := trafficclass.Decode(body)
	if err != nil {
		return trafficclass.Class{}, fmt.Errorf("decode stored class: %w", err)
	}
	c.Builtin = builtin
	return c, nil
}

// ListClasses returns every traffic class by name.
func (s *Store) ListClasses(ctx context.Context) ([]trafficclass.Class, error) {
	rows, err := s.pool.Query(ctx, `SELECT config, builtin FROM traffic_classes ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list classes: %w", err)
	}
	defer rows.Close()
	out := []trafficclass.Class{}
	for rows.Next() {
		c, err := scanClass(rows)
		if err != nil {
			return nil, fmt.Errorf("list classes: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// ClassesCreated returns when each traffic class was created, by name.
func (s *Store) ClassesCreated(ctx context.Context) (map[string]time.Time, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, created_at FROM traffic_classes`)
	if err != nil {
		return nil, fmt.Errorf("list classes' creation: %w", err)
	}
	out := map[string]time.Time{}
	var (
		name string
		at   time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &at}, func() error {
		out[name] = at
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list classes' creation: %w", err)
	}
	return out, nil
}

// GetClass returns one traffic class.
func (s *Store) GetClass(ctx context.Context, name string) (trafficclass.Class, error) {
	c, err := scanClass(s.pool.QueryRow(ctx, `SELECT config, builtin FROM traffic_classes WHERE name = $1`, name))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return trafficclass.Class{}, fmt.Errorf("load class: %w", err)
	}
	return c, err
}

// CreateClass stores a new custom class.
func (s *Store) CreateClass(ctx context.Context, c trafficclass.Class) (trafficclass.Class, error) {
	c.Builtin = false
	body, err := c.MarshalJSON()
	if err != nil {
		return trafficclass.Class{}, fmt.Errorf("encode class: %w", err)
	}
	_, err = s.pool.Exec(ctx, `
		WITH i AS (INSERT INTO traffic_classes (name, config) VALUES ($1, $2) RETURNING name)
		SELECT pg_notify('`+ClassChannel+`', name) FROM i`, c.Name, body)
	if isUniqueViolation(err) {
		return trafficclass.Class{}, ErrClassExists
	}
	if err != nil {
		return trafficclass.Class{}, fmt.Errorf("create class: %w", err)
	}
	return c, nil
}

// PutClass replaces a class's config, creating a custom class when none
// has the name. A built-in stays built-in. It reports whether it created.
func (s *Store) PutClass(ctx context.Context, c trafficclass.Class) (trafficclass.Class, bool, error) {
	body, err := c.MarshalJSON()
	if err != nil {
		return trafficclass.Class{}, false, fmt.Errorf("encode class: %w", err)
	}
	var builtin, created bool
	err = s.pool.QueryRow(ctx, `
		WITH u AS (
			INSERT INTO traffic_classes (name, config) VALUES ($1, $2)
			ON CONFLICT (name) DO UPDATE SET config = EXCLUDED.config, updated_at = now()
			RETURNING name, builtin, (xmax = 0) AS created
		), n AS (SELECT pg_notify('`+ClassChannel+`', name) FROM u)
		SELECT builtin, created FROM u, (SELECT count(*) FROM n) AS notified`, c.Name, body).Scan(&builtin, &created)
	if err != nil {
		return trafficclass.Class{}, false, fmt.Errorf("put class: %w", err)
	}
	c.Builtin = builtin
	return c, created, nil
}

// DeleteClass deletes a custom class no endpoint uses.
func (s *Store) DeleteClass(ctx context.Context, name string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		var builtin bool
		err := tx.QueryRow(ctx, `SELECT builtin FROM traffic_classes WHERE name = $1 FOR UPDATE`, name).Scan(&builtin)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("lock class: %w", err)
		}
		if builtin {
			return ErrBuiltinClass
		}
		var inUse bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM endpoints WHERE deleted_at IS NULL AND (traffic_class = $1 OR assigned_class = $1))`, name).Scan(&inUse); err != nil {
			return fmt.Errorf("check class use: %w", err)
		}
		if inUse {
			return ErrClassInUse
		}
		_, err = tx.Exec(ctx, `DELETE FROM traffic_classes WHERE name = $1; `, name)
		if err != nil {
			return fmt.Errorf("delete class: %w", err)
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify('`+ClassChannel+`', $1)`, name)
		return err
	})
}

// lockClassForUse checks, inside tx, that an endpoint may name class: "auto"
// or an existing class, which is share-locked so it cannot be deleted
// before tx commits.
func lockClassForUse(ctx context.Context, tx pgx.Tx, class string) error {
	if class == "" || class == trafficclass.Auto {
		return nil
	}
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM traffic_classes WHERE name = $1 FOR SHARE`, class).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrUnknownClass
	}
	if err != nil {
		return fmt.Errorf("check class: %w", err)
	}
	return nil
}

// EffectiveClass returns the class an endpoint runs under: its own class,
// or for `auto` the class its traffic was last measured into, or the
// default class before any measurement.
func (e Endpoint) EffectiveClass() string {
	switch {
	case e.TrafficClass != "" && e.TrafficClass != trafficclass.Auto:
		return e.TrafficClass
	case e.AssignedClass != nil && *e.AssignedClass != "":
		return *e.AssignedClass
	}
	return trafficclass.DefaultClass
}

// ClassChange is one reassignment of an auto endpoint's class.
type ClassChange struct {
	EndpointID  string
	OldClass    string
	NewClass    string
	Measurement trafficclass.Measurement
	Reason      string
	At          time.Time
}
