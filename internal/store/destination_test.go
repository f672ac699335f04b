package store_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestUpgradeEndpointsGainDestinations: a database at version 46 with
// endpoints (one rotated, one with headers) and a message reads back
// unchanged after the destinations migration, every endpoint of type
// http with no destination; a destination endpoint is then created and
// an old one turned into one, and an http endpoint with a destination
// config is refused by the schema.
func TestUpgradeEndpointsGainDestinations(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	resetTo(t, db, 46)
	const previous = "whsec_Dx1gsDwxK9pmGkLqSbqSQFRx2EZD2KRbTfVMdbLkq5g="
	plain := createEndpointV10(t, db, "acme", "https://acme.example/a", testSecret, "")
	rotated := createEndpointV10(t, db, "globex", "https://globex.example/b", testSecret, previous)
	_, err := db.Pool.Exec(ctx, `UPDATE endpoints SET headers = '{"X-Api-Key": "k"}', ordering = 'fifo' WHERE id = $1`, rotated)
	require.NoError(t, err)
	_, dlvs := createMessageV7(t, db, "acme", "invoice.paid", `{"amount": 5}`, plain)

	require.NoError(t, store.Migrate(ctx, db.Pool, nil))
	s := store.New(db.Pool, nil)
	got, err := s.GetEndpoints(ctx, []string{plain, rotated})
	require.NoError(t, err)
	require.Len(t, got, 2)
	for id, e := range got {
		require.Equal(t, store.TypeHTTP, e.Type, id)
		require.Nil(t, e.Destination, id)
		require.Nil(t, e.DestinationCredentials, id)
		require.Equal(t, testSecret, e.Secret, id)
	}
	require.Equal(t, previous, got[rotated].PreviousSecret)
	require.Equal(t, map[string]string{"X-Api-Key": "k"}, got[rotated].Headers)
	require.Equal(t, store.OrderingFIFO, got[rotated].Ordering)
	d, err := s.GetDelivery(ctx, dlvs[0])
	require.NoError(t, err)
	require.Equal(t, plain, d.EndpointID)

	cfg := json.RawMessage(`{"url":"amqp://mq.example","exchange":"hooks","username":"u"}`)
	e, err := s.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", Secret: testSecret, Type: "rabbitmq",
		Destination: cfg, DestinationCredentials: map[string]string{"password": "p"}})
	require.NoError(t, err)
	require.Equal(t, "rabbitmq", e.Type)
	require.JSONEq(t, string(cfg), string(e.Destination))
	require.Equal(t, map[string]string{"password": "p"}, e.DestinationCredentials)

	e, err = s.UpdateEndpoint(ctx, plain, store.EndpointPatch{Destination: &store.EndpointDestination{
		Type: "redis", Config: json.RawMessage(`{"url":"redis://r.example","stream":"s"}`)}})
	require.NoError(t, err)
	require.Equal(t, "redis", e.Type)
	require.Nil(t, e.DestinationCredentials)
	e, err = s.UpdateEndpoint(ctx, plain, store.EndpointPatch{Destination: &store.EndpointDestination{Type: store.TypeHTTP}})
	require.NoError(t, err)
	require.Equal(t, store.TypeHTTP, e.Type)
	require.Nil(t, e.Destination)

	_, err = db.Pool.Exec(ctx, `UPDATE endpoints SET destination = '{}' WHERE id = $1`, rotated)
	require.Error(t, err, "an http endpoint has no destination config")
	_, err = db.Pool.Exec(ctx, `UPDATE endpoints SET type = 'smtp', destination = '{}' WHERE id = $1`, rotated)
	require.Error(t, err, "only the known types are stored")
}

// TestDestinationCredentialsSealedAtRest: destination credentials are
// stored sealed for their endpoint, opened on every read, counted and
// opened by CheckSecrets and resealed under a new key by ResealSecrets;
// a PATCH of other fields keeps them.
func TestDestinationCredentialsSealedAtRest(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	s := store.New(b.db.Pool, nil, store.WithKeyring(keyring(t, 1)))
	const password = "broker-password-77c1e0"
	creds := map[string]string{"password": password}
	e, err := s.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", Secret: testSecret, Type: "nats",
		Destination: json.RawMessage(`{"url":"nats://n.example","subject":"a.b","username":"u"}`), DestinationCredentials: creds})
	require.NoError(t, err)
	require.Equal(t, creds, e.DestinationCredentials)
	var stored string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT destination_credentials FROM endpoints WHERE id = $1`, e.ID).Scan(&stored))
	require.True(t, strings.HasPrefix(stored, "hks1."), stored)
	require.NotContains(t, stored, password)

	desc := "kept"
	e, err = s.UpdateEndpoint(ctx, e.ID, store.EndpointPatch{Description: &desc})
	require.NoError(t, err)
	require.Equal(t, creds, e.DestinationCredentials)
	byID, err := s.GetEndpoints(ctx, []string{e.ID})
	require.NoError(t, err)
	require.Equal(t, creds, byID[e.ID].DestinationCredentials)

	rep, err := s.CheckSecrets(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Stale)

	s2 := store.New(b.db.Pool, nil, store.WithKeyring(keyring(t, 2, 1)))
	rep, err = s2.CheckSecrets(ctx)
	require.NoError(t, err)
	require.Positive(t, rep.Stale)
	_, err = s2.ResealSecrets(ctx, 100, nil)
	require.NoError(t, err)
	rep, err = s2.CheckSecrets(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Stale)
	require.Zero(t, rep.Plain)
	got, err := store.New(b.db.Pool, nil, store.WithKeyring(keyring(t, 2))).GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.Equal(t, creds, got.DestinationCredentials, "resealed under the new key")

	_, err = store.New(b.db.Pool, nil, store.WithKeyring(keyring(t, 3))).CheckSecrets(ctx)
	require.ErrorIs(t, err, store.ErrSecretKey)
}
