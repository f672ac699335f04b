package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// OperationalTenant owns the operational endpoints and the messages of
// operational events. A tenant id starts with a letter or a digit, so no
// tenant (and no tenant token) can ever be this one.
const OperationalTenant = "_operational"

// Operational event types: what happened to a customer endpoint, its
// breaker or one of its deliveries.
const (
	OpEndpointCreated   = "endpoint.created"
	OpEndpointUpdated   = "endpoint.updated"
	OpEndpointDeleted   = "endpoint.deleted"
	OpEndpointDisabled  = "endpoint.disabled"
	OpEndpointEnabled   = "endpoint.enabled"
	OpBreakerOpened     = "breaker.opened"
	OpBreakerClosed     = "breaker.closed"
	OpDeliveryFailed    = "delivery.failed"
	OpDeliveryRecovered = "delivery.recovered"
)

// OperationalEventTypes lists every operational event type.
var OperationalEventTypes = []string{
	OpEndpointCreated, OpEndpointUpdated, OpEndpointDeleted, OpEndpointDisabled, OpEndpointEnabled,
	OpBreakerOpened, OpBreakerClosed, OpDeliveryFailed, OpDeliveryRecovered,
	OpTrafficClassRecommended, OpTrafficClassTuned,
}

// ValidOperationalFilter reports whether f may be in an operational
// endpoint's event_types: an operational event type, a dotted prefix of
// some followed by ".*" (endpoint.*, breaker.*, delivery.*), or "*".
func ValidOperationalFilter(f string) bool {
	for _, t := range OperationalEventTypes {
		if slices.Contains(EventTypeFilters(t), f) {
			return true
		}
	}
	return false
}

// OperationalEvent is one change to report to the operational endpoints.
type OperationalEvent struct {
	Type string
	At   time.Time
	// EndpointID is the customer endpoint the event is about; empty for
	// an event about the service as a whole (traffic_class.*), which
	// names no endpoint or tenant.
	EndpointID string
	// TenantID is the endpoint's tenant; empty has the emitter look it up
	// (breaker transitions know only the endpoint).
	TenantID string
	// Data is the event's data object; the emitter adds endpoint_id and
	// tenant_id.
	Data map[string]any
}

// OperationalEventsConfig has a Store emit operational events.
type OperationalEventsConfig struct {
	// Enqueuer queues the deliveries of the events' messages.
	Enqueuer Enqueuer
	// CacheTTL is how long the list of operational endpoints' subscriptions
	// is kept between reads; InvalidateOperational drops it sooner. Zero
	// reads it inside every transaction that has an event to emit (for a
	// process that hears no endpoint notifications).
	CacheTTL time.Duration
	// Now is the clock of the cache's age.
	Now func() time.Time
}

// WithOperationalEvents has the store emit operational events in the
// transactions of the changes they report.
func WithOperationalEvents(c OperationalEventsConfig) Option {
	return func(s *Store) {
		if c.Now == nil {
			c.Now = time.Now
		}
		s.ops = &opsCache{cfg: c}
	}
}

// opsCache holds the event_types of every live operational endpoint, so a
// ledger flush or breaker transition costs no statement while no
// operational endpoint exists.
type opsCache struct {
	cfg OperationalEventsConfig

	mu     sync.Mutex
	gen    uint64
	valid  bool
	loaded time.Time
	subs   [][]string
}

type opsQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func (c *opsCache) subscriptions(ctx context.Context, q opsQuerier) ([][]string, error) {
	c.mu.Lock()
	if c.cfg.CacheTTL > 0 && c.valid && c.cfg.Now().Sub(c.loaded) < c.cfg.CacheTTL {
		subs := c.subs
		c.mu.Unlock()
		return subs, nil
	}
	gen := c.gen
	c.mu.Unlock()
	rows, err := q.Query(ctx, `SELECT event_types FROM endpoints WHERE tenant_id = $1 AND deleted_at IS NULL`, OperationalTenant)
	if err != nil {
		return nil, fmt.Errorf("load operational endpoints: %w", err)
	}
	subs, err := pgx.CollectRows(rows, pgx.RowTo[[]string])
	if err != nil {
		return nil, fmt.Errorf("load operational endpoints: %w", err)
	}
	c.mu.Lock()
	// A load that an invalidation overtook is used once, not kept.
	if c.cfg.CacheTTL > 0 && gen == c.gen {
		c.valid, c.loaded, c.subs = true, c.cfg.Now(), subs
	}
	c.mu.Unlock()
	return subs, nil
}

// knownEmpty reports whether the cache knows, within its TTL, that no
// operational endpoint exists: a write that would emit events can then
// leave them out without asking.
func (c *opsCache) knownEmpty() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg.CacheTTL > 0 && c.valid && c.cfg.Now().Sub(c.loaded) < c.cfg.CacheTTL && len(c.subs) == 0
}

func (c *opsCache) invalidate() {
	c.mu.Lock()
	c.gen++
	c.valid = false
	c.mu.Unlock()
}

// subscribed reports whether any endpoint of subs receives eventType.
func subscribed(subs [][]string, eventType string) bool {
	filters := EventTypeFilters(eventType)
	for _, s := range subs {
		if len(s) == 0 {
			return true
		}
		for _, f := range filters {
			if slices.Contains(s, f) {
				return true
			}
		}
	}
	return false
}

// InvalidateOperational drops the cached list of operational endpoints
// (on an endpoint notification, or when the listener reconnects).
func (s *Store) InvalidateOperational() {
	if s.ops != nil {
		s.ops.invalidate()
	}
}

// operationalWanted reports whether some operational endpoint receives one
// of types, reading through q when the cache must be loaded.
func (s *Store) operationalWanted(ctx context.Context, q opsQuerier, types ...string) (bool, error) {
	if s.ops == nil {
		return false, nil
	}
	subs, err := s.ops.subscriptions(ctx, q)
	if err != nil {
		return false, err
	}
	for _, t := range types {
		if subscribed(subs, t) {
			return true, nil
		}
	}
	return false, nil
}

// emitOperational stores, in tx, one message of the operational tenant per
// event that some operational endpoint receives, fanned out to them with
// their jobs. Events about operational endpoints are dropped: an
// operational endpoint never hears of itself, so a failing one cannot feed
// its own queue. Without operational endpoints (the cache says so) it runs
// no statement.
func (s *Store) emitOperational(ctx context.Context, tx pgx.Tx, events []OperationalEvent) error {
	if s.ops == nil || len(events) == 0 {
		return nil
	}
	subs, err := s.ops.subscriptions(ctx, tx)
	if err != nil {
		return err
	}
	var keep []OperationalEvent
	var lookup []string
	for _, ev := range events {
		if ev.TenantID == OperationalTenant || !subscribed(subs, ev.Type) {
			continue
		}
		if ev.TenantID == "" && ev.EndpointID != "" {
			lookup = append(lookup, ev.EndpointID)
		}
		keep = append(keep, ev)
	}
	if len(keep) == 0 {
		return nil
	}
	if len(lookup) > 0 {
		rows, err := tx.Query(ctx, `SELECT id, tenant_id FROM endpoints WHERE id = ANY($1)`, lookup)
		if err != nil {
			return fmt.Errorf("load endpoint tenants: %w", err)
		}
		tenants := map[string]string{}
		var id, tenant string
		_, err = pgx.ForEachRow(rows, []any{&id, &tenant}, func() error { tenants[id] = tenant; return nil })
		if err != nil {
			return fmt.Errorf("load endpoint tenants: %w", err)
		}
		kept := keep[:0]
		for _, ev := range keep {
			if ev.TenantID == "" && ev.EndpointID != "" {
				ev.TenantID = tenants[ev.EndpointID]
			}
			if ev.EndpointID == "" || (ev.TenantID != "" && ev.TenantID != OperationalTenant) {
				kept = append(kept, ev)
			}
		}
		if keep = kept; len(keep) == 0 {
			return nil
		}
	}
	ins := make([]NewMessage, len(keep))
	for i, ev := range keep {
		data := map[string]any{}
		for k, v := range ev.Data {
			data[k] = v
		}
		if ev.EndpointID != "" {
			data["endpoint_id"], data["tenant_id"] = ev.EndpointID, ev.TenantID
		}
		body, err := json.Marshal(map[string]any{"type": ev.Type, "timestamp": ev.At.UTC(), "data": data})
		if err != nil {
			return fmt.Errorf("encode operational event: %w", err)
		}
		ins[i] = NewMessage{TenantID: OperationalTenant, EventType: ev.Type, Payload: body}
	}
	if _, _, _, err := s.createMessagesTx(ctx, tx, ins, s.ops.cfg.Enqueuer); err != nil {
		return fmt.Errorf("emit operational events: %w", err)
	}
	return nil
}

// endpointEvent is an endpoint.* event about e.
func endpointEvent(typ string, e Endpoint) OperationalEvent {
	data := map[string]any{
		"url": e.URL, "description": e.Description, "event_types": nonNil(e.EventTypes), "status": e.Status,
	}
	return OperationalEvent{Type: typ, At: e.UpdatedAt, EndpointID: e.ID, TenantID: e.TenantID, Data: data}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// NewOperationalEndpoint is an operational endpoint to create.
type NewOperationalEndpoint struct {
	URL         string
	Description string
	// EventTypes are the operational event types it receives (wildcards
	// allowed); empty receives every one.
	EventTypes []string
	// Secret is its whsec_ signing secret.
	Secret string
}

// CreateOperationalEndpoint stores an operational endpoint (an endpoint of
// OperationalTenant, HMAC-signed) with its closed breaker, and notifies
// dispatchers so they read the operational endpoints again.
func (s *Store) CreateOperationalEndpoint(ctx context.Context, in NewOperationalEndpoint) (Endpoint, error) {
	var out Endpoint
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = s.createOperationalTx(ctx, tx, in)
		return err
	})
	return out, err
}

func (s *Store) createOperationalTx(ctx context.Context, tx pgx.Tx, in NewOperationalEndpoint) (Endpoint, error) {
	if in.EventTypes == nil {
		in.EventTypes = []string{}
	}
	id := NewID("ep", time.Now())
	sealed, err := s.secrets.Seal(in.Secret, endpointSecretContext(id))
	if err != nil {
		return Endpoint{}, fmt.Errorf("create operational endpoint: %w", err)
	}
	out, err := s.scanEndpoint(tx.QueryRow(ctx, `
		WITH e AS (
			INSERT INTO endpoints (id, tenant_id, url, description, event_types, secret, traffic_class, metadata, headers, signing)
			VALUES ($1, $2, $3, $4, $5, $6, 'auto', '{}', '{}', $7)
			RETURNING *
		), n AS (SELECT pg_notify('`+EndpointChannel+`', id) FROM e)
		SELECT `+endpointColumns+` FROM e, (SELECT count(*) FROM n) AS notified`,
		id, OperationalTenant, in.URL, in.Description, in.EventTypes, sealed, SigningHMAC))
	if err != nil {
		return Endpoint{}, fmt.Errorf("insert operational endpoint: %w", err)
	}
	if err := s.afterEndpointCreate(ctx, tx, out); err != nil {
		return Endpoint{}, err
	}
	s.InvalidateOperational()
	return out, nil
}

// ListOperationalEndpoints returns the live operational endpoints in id
// order.
func (s *Store) ListOperationalEndpoints(ctx context.Context, p Page) ([]Endpoint, error) {
	return s.queryEndpoints(ctx, "list operational endpoints", `
		SELECT `+endpointColumns+` FROM endpoints
		WHERE deleted_at IS NULL AND tenant_id = $1 AND id > $2
		ORDER BY id LIMIT $3`, OperationalTenant, p.After, p.Limit)
}

// GetOperationalEndpoint returns a live operational endpoint; a customer
// endpoint's id is ErrNotFound.
func (s *Store) GetOperationalEndpoint(ctx context.Context, id string) (Endpoint, error) {
	e, err := s.scanEndpoint(s.pool.QueryRow(ctx, `SELECT `+endpointColumns+` FROM endpoints WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL`, id, OperationalTenant))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Endpoint{}, fmt.Errorf("load operational endpoint: %w", err)
	}
	return e, err
}

// OperationalPatch holds the fields of an operational endpoint's partial
// update; nil leaves a field as it is.
type OperationalPatch struct {
	URL         *string
	Description *string
	EventTypes  *[]string
}

// UpdateOperationalEndpoint applies p to a live operational endpoint and
// notifies dispatchers.
func (s *Store) UpdateOperationalEndpoint(ctx context.Context, id string, p OperationalPatch) (Endpoint, error) {
	var eventTypes []string
	if p.EventTypes != nil {
		eventTypes = nonNil(*p.EventTypes)
	}
	e, err := s.scanEndpoint(s.pool.QueryRow(ctx, `
		WITH u AS (
			UPDATE endpoints SET url = coalesce($3, url), description = coalesce($4, description),
				event_types = coalesce($5, event_types), updated_at = now()
			WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL
			RETURNING *
		), n AS (SELECT pg_notify('`+EndpointChannel+`', id) FROM u)
		SELECT `+endpointColumns+` FROM u, (SELECT count(*) FROM n) AS notified`,
		id, OperationalTenant, p.URL, p.Description, eventTypes))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Endpoint{}, fmt.Errorf("update operational endpoint: %w", err)
	}
	s.InvalidateOperational()
	return e, err
}

// DeleteOperationalEndpoint deletes a live operational endpoint as
// DeleteEndpoint deletes any (its unsent events fail); a customer
// endpoint's id is ErrNotFound.
func (s *Store) DeleteOperationalEndpoint(ctx context.Context, id string) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM endpoints WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL FOR UPDATE`, id, OperationalTenant).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("load operational endpoint: %w", err)
		}
		return s.deleteEndpointTx(ctx, tx, id)
	})
	s.InvalidateOperational()
	return err
}

// EnsureOperationalEndpoint makes sure one live operational endpoint with
// url exists, receiving every event and signing with secret: it creates
// it, or sets an existing one's secret and subscriptions. Concurrent
// callers (dispatchers starting together) take turns on an advisory lock,
// so they leave one endpoint.
func (s *Store) EnsureOperationalEndpoint(ctx context.Context, url, secret string) (e Endpoint, created bool, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('hookd:operational-endpoint:' || $1))`, url); err != nil {
			return fmt.Errorf("lock operational endpoint: %w", err)
		}
		var id string
		err := tx.QueryRow(ctx, `SELECT id FROM endpoints WHERE tenant_id = $1 AND url = $2 AND deleted_at IS NULL ORDER BY id LIMIT 1`, OperationalTenant, url).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			created = true
			e, err = s.createOperationalTx(ctx, tx, NewOperationalEndpoint{URL: url, Description: "--operational-webhook-url", Secret: secret})
			return err
		}
		if err != nil {
			return fmt.Errorf("load operational endpoint: %w", err)
		}
		sealed, err := s.secrets.Seal(secret, endpointSecretContext(id))
		if err != nil {
			return fmt.Errorf("seal operational secret: %w", err)
		}
		e, err = s.updateEndpointTx(ctx, tx, id, `secret = $2, event_types = '{}', signing = 'hmac'`, sealed)
		return err
	})
	s.InvalidateOperational()
	return e, created, err
}
