package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Owner kinds: the objects a tenant token may reach by id.
const (
	OwnerEndpoint = "endpoint"
	OwnerMessage  = "message"
	OwnerDelivery = "delivery"
)

// ownerQueries read the tenant of one object by id; an endpoint counts
// only while it is not deleted, as everywhere else.
var ownerQueries = map[string]string{
	OwnerEndpoint: `SELECT tenant_id FROM endpoints WHERE id = $1 AND deleted_at IS NULL`,
	OwnerMessage:  `SELECT tenant_id FROM messages WHERE id = $1`,
	OwnerDelivery: `SELECT tenant_id FROM deliveries WHERE id = $1`,
}

// OwnerTenant returns the tenant the object of kind (OwnerEndpoint,
// OwnerMessage or OwnerDelivery) with id belongs to, or ErrNotFound.
func (s *Store) OwnerTenant(ctx context.Context, kind, id string) (string, error) {
	q, ok := ownerQueries[kind]
	if !ok {
		return "", fmt.Errorf("owner of %q: unknown kind", kind)
	}
	var tenant string
	err := s.pool.QueryRow(ctx, q, id).Scan(&tenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("owner of %s: %w", kind, err)
	}
	return tenant, nil
}

// Tenants is whose rows a query reads: every tenant's (AllTenants, what an
// admin reads) or one tenant's (OneTenant). The zero value reads no
// tenant's rows: a scope that was never set grants nothing, and no tenant
// id, the empty one included, stands for every tenant.
type Tenants struct {
	all bool
	id  string
}

// AllTenants reads every tenant's rows.
func AllTenants() Tenants { return Tenants{all: true} }

// OneTenant reads the rows of tenant id alone.
func OneTenant(id string) Tenants { return Tenants{id: id} }

// All reports whether t reads every tenant's rows.
func (t Tenants) All() bool { return t.all }

// ID is the one tenant t reads, when not All.
func (t Tenants) ID() string { return t.id }
