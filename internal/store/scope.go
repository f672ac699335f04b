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
