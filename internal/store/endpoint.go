package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/internal/trafficclass"
)

// Endpoint statuses.
const (
	EndpointEnabled  = "enabled"
	EndpointDisabled = "disabled"
)

// Endpoint signing schemes (Standard Webhooks v1 and v1a signatures).
const (
	SigningHMAC    = "hmac"
	SigningEd25519 = "ed25519"
)

// TypeHTTP is the type of an endpoint delivering to its URL, the default.
const TypeHTTP = "http"

// Endpoint orderings: a FIFO endpoint's deliveries are sent one at a time,
// in the order their messages were accepted (fifo.go).
const (
	OrderingUnordered = "unordered"
	OrderingFIFO      = "fifo"
)

// What a FIFO endpoint does when its head's retries are exhausted: the
// head fails and the next delivery goes, or the queue stops until the
// head is retried or skipped.
const (
	ExhaustedSkip  = "skip"
	ExhaustedBlock = "block"
)

// Endpoint is a customer URL that receives a tenant's messages.
type Endpoint struct {
	ID          string
	TenantID    string
	URL         string
	Description string
	EventTypes  []string
	// Secret is the whsec_ secret, or the whsk_ private key of an Ed25519
	// endpoint (PreviousSecret likewise).
	Secret                  string
	PreviousSecret          string
	PreviousSecretExpiresAt *time.Time
	TrafficClass            string
	AssignedClass           *string
	Metadata                map[string]string
	// Headers are sent with every delivery to the endpoint. Their values
	// are stored sealed like Secret (see secrets.go).
	Headers map[string]string
	// Signing is SigningHMAC or SigningEd25519.
	Signing        string
	Status         string
	DisabledReason *string
	// RateLimit is the most deliveries per second sent to the endpoint by
	// the whole fleet; nil means no limit.
	RateLimit *int
	// Ordering is OrderingUnordered or OrderingFIFO; OnExhausted is
	// ExhaustedSkip or ExhaustedBlock (it applies to FIFO only).
	Ordering    string
	OnExhausted string
	// Filter is the payload filter (internal/filter), nil for none.
	Filter json.RawMessage
	// RetrySchedule is the endpoint's own retry schedule (the delay before
	// each attempt); nil uses the dispatcher's.
	RetrySchedule []time.Duration
	// Timeout is the endpoint's own attempt timeout; zero uses the
	// dispatcher's.
	Timeout time.Duration
	// Type is what the endpoint delivers to: TypeHTTP (URL) or a
	// destination type of internal/destination.
	Type string
	// Destination is a non-HTTP endpoint's destination config without its
	// credentials (the JSON a read shows); nil for HTTP.
	Destination json.RawMessage
	// DestinationCredentials are the destination's write-only fields by
	// JSON name; stored sealed like Secret (see secrets.go), nil for none.
	DestinationCredentials map[string]string
	// BlockedBy names the failed delivery that stops a FIFO queue whose
	// on_exhausted is block; nil when the queue moves.
	BlockedBy *string
	CreatedAt time.Time
	UpdatedAt time.Time
}

const endpointColumns = `id, tenant_id, url, description, event_types, secret,
	coalesce(previous_secret, ''), previous_secret_expires_at, traffic_class, assigned_class, metadata,
	headers, signing, status, disabled_reason, created_at, updated_at, rate_limit,
	ordering, on_exhausted, filter, retry_schedule, coalesce(timeout_ms, 0) * interval '1 millisecond',
	type, destination, coalesce(destination_credentials, ''), ` + blockedByColumn

// endpointColumnsQualified is endpointColumns for a query aliasing
// endpoints as e.
const endpointColumnsQualified = `e.id, e.tenant_id, e.url, e.description, e.event_types, e.secret,
	coalesce(e.previous_secret, ''), e.previous_secret_expires_at, e.traffic_class, e.assigned_class, e.metadata,
	e.headers, e.signing, e.status, e.disabled_reason, e.created_at, e.updated_at, e.rate_limit,
	e.ordering, e.on_exhausted, e.filter, e.retry_schedule, coalesce(e.timeout_ms, 0) * interval '1 millisecond',
	e.type, e.destination, coalesce(e.destination_credentials, ''), ` + blockedByColumnQualified

// endpointDest returns scan destinations for endpointColumns; the
// sealed destination credentials go to creds (openEndpointSecrets opens
// them).
func endpointDest(e *Endpoint, creds *string) []any {
	return []any{&e.ID, &e.TenantID, &e.URL, &e.Description, &e.EventTypes, &e.Secret,
		&e.PreviousSecret, &e.PreviousSecretExpiresAt, &e.TrafficClass, &e.AssignedClass, &e.Metadata,
		&e.Headers, &e.Signing, &e.Status, &e.DisabledReason, &e.CreatedAt, &e.UpdatedAt, &e.RateLimit,
		&e.Ordering, &e.OnExhausted, &e.Filter, &e.RetrySchedule, &e.Timeout,
		&e.Type, &e.Destination, creds, &e.BlockedBy}
}

func (s *Store) scanEndpoint(row pgx.Row) (Endpoint, error) {
	var e Endpoint
	var creds string
	err := row.Scan(endpointDest(&e, &creds)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return Endpoint{}, ErrNotFound
	}
	if err != nil {
		return Endpoint{}, err
	}
	if err := s.openEndpointSecrets(&e, creds); err != nil {
		return Endpoint{}, err
	}
	return e, nil
}

// EndpointChannel is the NOTIFY channel that carries the id of every endpoint
// whose delivery settings changed, so dispatchers drop their cached copy.
const EndpointChannel = "hookd_endpoint"

// CreateEndpoint inserts e (its ID and timestamps are assigned here) and
// returns the stored row.
func (s *Store) CreateEndpoint(ctx context.Context, e Endpoint) (Endpoint, error) {
	if e.EventTypes == nil {
		e.EventTypes = []string{}
	}
	if e.Metadata == nil {
		e.Metadata = map[string]string{}
	}
	if e.Headers == nil {
		e.Headers = map[string]string{}
	}
	if e.TrafficClass == "" {
		e.TrafficClass = "auto"
	}
	if e.Signing == "" {
		e.Signing = SigningHMAC
	}
	if e.Ordering == "" {
		e.Ordering = OrderingUnordered
	}
	if e.OnExhausted == "" {
		e.OnExhausted = ExhaustedSkip
	}
	if e.Type == "" {
		e.Type = TypeHTTP
	}
	id := NewID("ep", time.Now())
	sealed, err := s.secrets.Seal(e.Secret, endpointSecretContext(id))
	if err != nil {
		return Endpoint{}, fmt.Errorf("create endpoint: %w", err)
	}
	headers, err := s.sealEndpointHeaders(id, e.Headers)
	if err != nil {
		return Endpoint{}, fmt.Errorf("create endpoint: %w", err)
	}
	creds, err := s.sealDestinationCredentials(id, e.DestinationCredentials)
	if err != nil {
		return Endpoint{}, fmt.Errorf("create endpoint: %w", err)
	}
	var out Endpoint
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if err := lockClassForUse(ctx, tx, e.TrafficClass); err != nil {
			return err
		}
		var err error
		out, err = s.scanEndpoint(tx.QueryRow(ctx, `
			INSERT INTO endpoints (id, tenant_id, url, description, event_types, secret, traffic_class, metadata, headers, signing, rate_limit,
				ordering, on_exhausted, filter, retry_schedule, timeout_ms, type, destination, destination_credentials)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, nullif($16::int, 0), $17, $18, $19)
			RETURNING `+endpointColumns,
			id, e.TenantID, e.URL, e.Description, e.EventTypes, sealed, e.TrafficClass, e.Metadata, headers, e.Signing, e.RateLimit,
			e.Ordering, e.OnExhausted, nullJSON(e.Filter), e.RetrySchedule, e.Timeout.Milliseconds(),
			e.Type, nullJSON(e.Destination), creds))
		if err != nil {
			return fmt.Errorf("insert endpoint: %w", err)
		}
		if out.Ordering == OrderingFIFO {
			if err := openQueue(ctx, tx, out.ID); err != nil {
				return err
			}
		}
		if err := s.afterEndpointCreate(ctx, tx, out); err != nil {
			return err
		}
		return s.emitOperational(ctx, tx, []OperationalEvent{endpointEvent(OpEndpointCreated, out)})
	})
	return out, err
}

// afterEndpointCreate creates the rows that live beside an endpoint: its
// closed breaker.
func (s *Store) afterEndpointCreate(ctx context.Context, tx pgx.Tx, e Endpoint) error {
	if _, err := tx.Exec(ctx, `INSERT INTO breaker_states (endpoint_id) VALUES ($1)`, e.ID); err != nil {
		return fmt.Errorf("create breaker: %w", err)
	}
	return nil
}

// GetEndpoint returns a live endpoint by id.
func (s *Store) GetEndpoint(ctx context.Context, id string) (Endpoint, error) {
	e, err := s.scanEndpoint(s.pool.QueryRow(ctx, `SELECT `+endpointColumns+` FROM endpoints WHERE id = $1 AND deleted_at IS NULL`, id))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Endpoint{}, fmt.Errorf("load endpoint: %w", err)
	}
	return e, err
}

// deliveryEndpointColumns are endpointColumns without blocked_by: what a
// dispatcher needs to send. blocked_by reads the FIFO queue's row and
// probes the deliveries partitions for its blocker, which cost a
// dispatcher's endpoint load 20 to 30 times a plain one's, for a field only
// the api shows; NULL in its place keeps one scan.
const deliveryEndpointColumns = `id, tenant_id, url, description, event_types, secret,
	coalesce(previous_secret, ''), previous_secret_expires_at, traffic_class, assigned_class, metadata,
	headers, signing, status, disabled_reason, created_at, updated_at, rate_limit,
	ordering, on_exhausted, filter, retry_schedule, coalesce(timeout_ms, 0) * interval '1 millisecond',
	type, destination, coalesce(destination_credentials, ''), NULL::text`

// GetEndpoints returns the live endpoints among ids, keyed by id, as a
// dispatcher sends to them: BlockedBy is not read (always nil). One
// statement for any number of ids, planned for them.
func (s *Store) GetEndpoints(ctx context.Context, ids []string) (map[string]Endpoint, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+deliveryEndpointColumns+` FROM endpoints WHERE id = ANY($1) AND deleted_at IS NULL`, customPlan, ids)
	if err != nil {
		return nil, fmt.Errorf("load endpoints: %w", err)
	}
	defer rows.Close()
	out := make(map[string]Endpoint, len(ids))
	for rows.Next() {
		e, err := s.scanEndpoint(rows)
		if err != nil {
			return nil, fmt.Errorf("load endpoints: %w", err)
		}
		out[e.ID] = e
	}
	return out, rows.Err()
}

// ListDeliveryEndpoints returns up to limit live endpoints after id after,
// in id order, as GetEndpoints returns them: a dispatcher fills its cache
// with them a page at a time when it starts.
func (s *Store) ListDeliveryEndpoints(ctx context.Context, after string, limit int) ([]Endpoint, error) {
	return s.queryEndpoints(ctx, "list endpoints", `
		SELECT `+deliveryEndpointColumns+` FROM endpoints
		WHERE deleted_at IS NULL AND id > $1 ORDER BY id LIMIT $2`, after, limit)
}

// queryEndpoints runs a query of endpoint rows; what names it in errors.
func (s *Store) queryEndpoints(ctx context.Context, what, sql string, args ...any) ([]Endpoint, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []Endpoint
	for rows.Next() {
		e, err := s.scanEndpoint(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// Page selects one page of a list: the rows after the cursor After, at most
// Limit of them.
type Page struct {
	After string
	Limit int
}

// ListEndpoints returns the live customer endpoints (never operational
// ones) of tenants in id order.
func (s *Store) ListEndpoints(ctx context.Context, tenants Tenants, p Page) ([]Endpoint, error) {
	return s.queryEndpoints(ctx, "list endpoints", `
		SELECT `+endpointColumns+` FROM endpoints
		WHERE deleted_at IS NULL AND ($5::boolean OR tenant_id = $1) AND tenant_id <> $4 AND id > $2
		ORDER BY id LIMIT $3`, tenants.id, p.After, p.Limit, OperationalTenant, tenants.all)
}

// EndpointPatch holds the fields of a partial update; nil leaves a field as it is.
type EndpointPatch struct {
	URL          *string
	Description  *string
	EventTypes   *[]string
	TrafficClass *string
	Metadata     *map[string]string
	Headers      *map[string]string
	// RateLimit sets the rate limit; a pointer to 0 removes it.
	RateLimit *int
	// Ordering and OnExhausted set the endpoint's ordering options.
	Ordering    *string
	OnExhausted *string
	// Filter sets the payload filter; a pointer to nil removes it.
	Filter *json.RawMessage
	// RetrySchedule sets the endpoint's retry schedule; a pointer to nil
	// removes it.
	RetrySchedule *[]time.Duration
	// Timeout sets the endpoint's attempt timeout; a pointer to 0 removes
	// it.
	Timeout *time.Duration
	// Destination sets the endpoint's type, destination config and
	// credentials together.
	Destination *EndpointDestination
}

// EndpointDestination is what an endpoint delivers to: Type, and for a
// non-HTTP type its Config (without credentials) and Credentials.
type EndpointDestination struct {
	Type        string
	Config      json.RawMessage
	Credentials map[string]string
}

// UpdateEndpoint applies patch and notifies dispatchers.
func (s *Store) UpdateEndpoint(ctx context.Context, id string, p EndpointPatch) (Endpoint, error) {
	var eventTypes []string
	if p.EventTypes != nil {
		eventTypes = *p.EventTypes
		if eventTypes == nil {
			eventTypes = []string{}
		}
	}
	var metadata map[string]string
	if p.Metadata != nil {
		metadata = *p.Metadata
		if metadata == nil {
			metadata = map[string]string{}
		}
	}
	var headers map[string]string
	if p.Headers != nil {
		headers = *p.Headers
		if headers == nil {
			headers = map[string]string{}
		}
		var err error
		if headers, err = s.sealEndpointHeaders(id, headers); err != nil {
			return Endpoint{}, fmt.Errorf("update endpoint: %w", err)
		}
	}
	var filter json.RawMessage
	if p.Filter != nil {
		filter = nullJSON(*p.Filter)
	}
	var schedule []time.Duration
	if p.RetrySchedule != nil {
		schedule = *p.RetrySchedule
	}
	var timeoutMS *int64
	if p.Timeout != nil {
		ms := p.Timeout.Milliseconds()
		timeoutMS = &ms
	}
	var destType *string
	var destConfig json.RawMessage
	var destCreds *string
	if d := p.Destination; d != nil {
		destType = &d.Type
		destConfig = nullJSON(d.Config)
		sealed, err := s.sealDestinationCredentials(id, d.Credentials)
		if err != nil {
			return Endpoint{}, fmt.Errorf("update endpoint: %w", err)
		}
		destCreds = sealed
	}
	args := []any{p.URL, p.Description, eventTypes, p.TrafficClass, metadata, headers, p.RateLimit,
		p.Ordering, p.OnExhausted, p.Filter != nil, filter, p.RetrySchedule != nil, schedule, timeoutMS,
		destType, destConfig, destCreds}
	lockClass := p.TrafficClass != nil && *p.TrafficClass != trafficclass.Auto
	if !lockClass && s.ops == nil && p.Ordering == nil {
		return s.updateEndpoint(ctx, id, endpointPatchSet, args...)
	}
	var out Endpoint
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if lockClass {
			if err := lockClassForUse(ctx, tx, *p.TrafficClass); err != nil {
				return err
			}
		}
		var err error
		if out, err = s.updateEndpointTx(ctx, tx, id, endpointPatchSet, args...); err != nil {
			return err
		}
		if p.Ordering != nil {
			if err := s.setOrdering(ctx, tx, &out); err != nil {
				return err
			}
		}
		return s.emitOperational(ctx, tx, []OperationalEvent{endpointEvent(OpEndpointUpdated, out)})
	})
	return out, err
}

// nullJSON is a JSON member for a nullable jsonb column: nil for none.
func nullJSON(v json.RawMessage) json.RawMessage {
	if len(v) == 0 || string(v) == "null" {
		return nil
	}
	return v
}

const endpointPatchSet = `
		url = coalesce($2, url),
		description = coalesce($3, description),
		event_types = coalesce($4, event_types),
		traffic_class = coalesce($5, traffic_class),
		metadata = coalesce($6, metadata),
		headers = coalesce($7, headers),
		rate_limit = CASE WHEN $8::int IS NULL THEN rate_limit ELSE nullif($8::int, 0) END,
		ordering = coalesce($9, ordering),
		on_exhausted = coalesce($10, on_exhausted),
		filter = CASE WHEN $11::bool THEN $12::jsonb ELSE filter END,
		retry_schedule = CASE WHEN $13::bool THEN $14::interval[] ELSE retry_schedule END,
		timeout_ms = CASE WHEN $15::int IS NULL THEN timeout_ms ELSE nullif($15::int, 0) END,
		destination = CASE WHEN $16::text IS NULL THEN destination ELSE $17::jsonb END,
		destination_credentials = CASE WHEN $16::text IS NULL THEN destination_credentials ELSE $18::text END,
		type = coalesce($16, type)`

// updateEndpoint runs UPDATE endpoints SET <set> on a live endpoint ($1 is the
// id), bumps updated_at and notifies dispatchers in the same statement.
func (s *Store) updateEndpoint(ctx context.Context, id, set string, args ...any) (Endpoint, error) {
	return s.updateEndpointTx(ctx, s.pool, id, set, args...)
}

func (s *Store) updateEndpointTx(ctx context.Context, q queryRower, id, set string, args ...any) (Endpoint, error) {
	e, err := s.scanEndpoint(q.QueryRow(ctx, `
		WITH u AS (
			UPDATE endpoints SET `+set+`, updated_at = now()
			WHERE id = $1 AND deleted_at IS NULL
			RETURNING *
		), n AS (SELECT pg_notify('`+EndpointChannel+`', id) FROM u)
		SELECT `+endpointColumns+` FROM u, (SELECT count(*) FROM n) AS notified`,
		append([]any{id}, args...)...))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Endpoint{}, fmt.Errorf("update endpoint: %w", err)
	}
	return e, err
}

// LastErrorEndpointDeleted is the last_error of a delivery that failed
// because its endpoint was deleted.
const LastErrorEndpointDeleted = "endpoint deleted"

// DeleteEndpoint soft-deletes an endpoint: its history stays, it receives
// nothing more, and, in the same transaction, every delivery it still owns
// (queued, retrying, waiting on its breaker, parked or held, whatever the
// breaker's state) fails with last_error LastErrorEndpointDeleted. A job
// left behind finds the endpoint gone and sends nothing; an attempt in
// flight at the delete still records what the endpoint answered.
func (s *Store) DeleteEndpoint(ctx context.Context, id string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error { return s.deleteEndpointTx(ctx, tx, id) })
}

func (s *Store) deleteEndpointTx(ctx context.Context, tx pgx.Tx, id string) error {
	e, err := s.updateEndpointTx(ctx, tx, id, `deleted_at = now()`)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `
		UPDATE deliveries SET status = 'failed', last_error = $2, next_attempt_at = NULL,
			breaker_open_until = NULL, updated_at = now()
		WHERE endpoint_id = $1 AND status IN ('pending', 'waiting', 'held')`, id, LastErrorEndpointDeleted); err != nil {
		return fmt.Errorf("settle deleted endpoint's deliveries: %w", err)
	}
	return s.emitOperational(ctx, tx, []OperationalEvent{endpointEvent(OpEndpointDeleted, e)})
}

// SetEndpointStatus enables or disables an endpoint. reason is stored with a
// disable and cleared by an enable.
func (s *Store) SetEndpointStatus(ctx context.Context, id, status string, reason *string) (Endpoint, error) {
	if status == EndpointEnabled {
		reason = nil
	}
	if s.ops == nil {
		return s.updateEndpoint(ctx, id, `status = $2, disabled_reason = $3`, status, reason)
	}
	var out Endpoint
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		if out, err = s.updateEndpointTx(ctx, tx, id, `status = $2, disabled_reason = $3`, status, reason); err != nil {
			return err
		}
		ev := endpointEvent(OpEndpointEnabled, out)
		if status == EndpointDisabled {
			ev.Type = OpEndpointDisabled
			ev.Data["reason"] = reason
		}
		return s.emitOperational(ctx, tx, []OperationalEvent{ev})
	})
	return out, err
}

// RotateSecret makes secret the endpoint's signing secret (a private key of
// an Ed25519 endpoint); the old one keeps signing alongside it until
// overlap has passed.
func (s *Store) RotateSecret(ctx context.Context, id, secret string, overlap time.Duration) (Endpoint, error) {
	sealed, err := s.secrets.Seal(secret, endpointSecretContext(id))
	if err != nil {
		return Endpoint{}, fmt.Errorf("rotate secret: %w", err)
	}
	return s.updateEndpoint(ctx, id, `
		previous_secret = secret,
		previous_secret_expires_at = now() + $3::interval,
		secret = $2`, sealed, overlap)
}
