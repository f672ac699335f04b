package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// createMessageV6 stores a message and its deliveries with the statements
// of the schema before partitioning (payload in messages, delivery ids
// minted on their own): how every message of an upgraded database was
// written. CreateMessage itself now writes message_payloads.
func createMessageV6(t *testing.T, db *storetest.DB, tenant, key string, payload string, endpoints map[string]string) (string, []string) {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	id := store.NewID("msg", now)
	var dlvs []string
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if key != "" {
			if _, err := tx.Exec(ctx, `INSERT INTO idempotency_keys (tenant_id, key, message_id) VALUES ($1, $2, $3)`, tenant, key, id); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO messages (id, tenant_id, event_type, payload, idempotency_key) VALUES ($1, $2, 'order.paid', $3::json, nullif($4, ''))`,
			id, tenant, payload, key); err != nil {
			return err
		}
		for ep, status := range endpoints {
			d := store.NewID("dlv", now)
			var job *int64
			if status == store.DeliveryPending {
				j := int64(len(dlvs) + 1)
				job = &j
			}
			if _, err := tx.Exec(ctx, `
				INSERT INTO deliveries (id, message_id, endpoint_id, tenant_id, status, job_id, created_at, updated_at)
				VALUES ($1, $2, $3, $4, $5, $6, now(), now())`, d, id, ep, tenant, status, job); err != nil {
				return err
			}
			dlvs = append(dlvs, d)
		}
		return nil
	})
	require.NoError(t, err)
	return id, dlvs
}

// createEndpointV10 stores an endpoint (and its closed breaker) with the
// columns every schema up to version 10 has, as an endpoint of an upgraded
// database was written; previous is a rotated-out secret, or empty.
func createEndpointV10(t *testing.T, db *storetest.DB, tenant, url, secret, previous string) string {
	t.Helper()
	ctx := context.Background()
	id := store.NewID("ep", time.Now())
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
			INSERT INTO endpoints (id, tenant_id, url, secret, previous_secret, previous_secret_expires_at, metadata)
			VALUES ($1, $2, $3, $4, nullif($5, ''), CASE WHEN $5 = '' THEN NULL ELSE now() + interval '1 hour' END, '{"team":"billing"}')`,
			id, tenant, url, secret, previous); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO breaker_states (endpoint_id) VALUES ($1)`, id)
		return err
	})
	require.NoError(t, err)
	return id
}

// createMessageV7 stores a message, its payload and a pending delivery
// with a job to each of endpoints, with the columns every partitioned
// schema (version 7 on) has, as a message of an upgraded database was
// written: CreateMessage reads endpoint columns later migrations add. It
// returns the message's id and its deliveries' ids in endpoints' order.
func createMessageV7(t *testing.T, db *storetest.DB, tenant, eventType, payload string, endpoints ...string) (string, []string) {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	id := store.NewID("msg", now)
	var dlvs []string
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO messages (id, tenant_id, event_type) VALUES ($1, $2, $3)`, id, tenant, eventType); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO message_payloads (message_id, payload) VALUES ($1, $2::json)`, id, payload); err != nil {
			return err
		}
		for _, ep := range endpoints {
			d := store.NewID("dlv", now)
			if _, err := tx.Exec(ctx, `
				INSERT INTO deliveries (id, message_id, endpoint_id, tenant_id, status, job_id)
				VALUES ($1, $2, $3, $4, 'pending', (SELECT count(*) + 1 FROM deliveries))`, d, id, ep, tenant); err != nil {
				return err
			}
			dlvs = append(dlvs, d)
		}
		return nil
	})
	require.NoError(t, err)
	return id, dlvs
}

// TestUpgradeToPartitionedStorage: a database at the schema before
// partitioning, filled with messages, deliveries in every status,
// attempts and idempotency keys, is migrated in place with nothing lost:
// every row is there and reads back through the store, and new rows land
// in the new partitions.
func TestUpgradeToPartitionedStorage(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	resetTo(t, db, 6)
	s := store.New(db.Pool, nil)
	enq := &fakeEnqueuer{next: 1000}

	// Endpoints as that schema stored them: CreateEndpoint writes columns
	// later migrations added.
	var eps []store.Endpoint
	for i := range 5 {
		eps = append(eps, store.Endpoint{ID: createEndpointV10(t, db, "acme", fmt.Sprintf("https://example.com/%d", i), testSecret, "")})
	}
	// One delivery per status the old schema knows, per message.
	statuses := []string{store.DeliveryPending, store.DeliveryDelivered, store.DeliveryFailed, store.DeliveryWaiting, store.DeliveryHeld}
	type want struct {
		payload string
		status  map[string]string // delivery id -> status
	}
	msgs := map[string]want{}
	var allDeliveries []string
	for i := range 20 {
		byEP := map[string]string{}
		for j, st := range statuses {
			byEP[eps[j].ID] = st
		}
		key := ""
		if i%2 == 0 {
			key = fmt.Sprintf("key-%d", i)
		}
		payload := fmt.Sprintf(`{"i": %d, "z": [1, 2]}`, i)
		id, dlvs := createMessageV6(t, db, "acme", key, payload, byEP)
		w := want{payload: payload, status: map[string]string{}}
		var rows []struct{ id, ep, status string }
		r, err := db.Pool.Query(ctx, `SELECT id, endpoint_id, status FROM deliveries WHERE message_id = $1`, id)
		require.NoError(t, err)
		for r.Next() {
			var x struct{ id, ep, status string }
			require.NoError(t, r.Scan(&x.id, &x.ep, &x.status))
			rows = append(rows, x)
		}
		r.Close()
		require.Len(t, rows, len(dlvs))
		// Attempts and statuses through the ledger, as the dispatcher
		// writes them (its statements are unchanged by the upgrade).
		var attempts []store.Attempt
		var updates []store.StatusUpdate
		for _, x := range rows {
			w.status[x.id] = x.status
			allDeliveries = append(allDeliveries, x.id)
			if x.status == store.DeliveryPending || x.status == store.DeliveryHeld {
				continue
			}
			at := time.Now()
			code := 503
			class := "failure"
			if x.status == store.DeliveryDelivered {
				code, class = 200, "success"
			}
			attempts = append(attempts, store.Attempt{DeliveryID: x.id, MessageID: id, EndpointID: x.ep, AttemptNumber: 1,
				AttemptedAt: at, Duration: 10 * time.Millisecond, StatusCode: &code, Classification: class})
			updates = append(updates, store.StatusUpdate{DeliveryID: x.id, Series: 1, Status: x.status, AttemptCount: 1,
				LastAttemptAt: &at, LastStatusCode: &code, Park: x.status == store.DeliveryWaiting})
		}
		recordLedgerBefore0023(t, db, attempts, updates)
		msgs[id] = w
	}
	counts := func(tables ...string) map[string]int {
		out := map[string]int{}
		for _, table := range tables {
			var n int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n))
			out[table] = n
		}
		return out
	}
	before := counts("messages", "deliveries", "delivery_attempts", "idempotency_keys")
	require.Equal(t, 20, before["messages"])
	require.Equal(t, 100, before["deliveries"])
	require.Equal(t, 60, before["delivery_attempts"])
	require.Equal(t, 10, before["idempotency_keys"])
	var maxAttempt int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT max(id) FROM delivery_attempts`).Scan(&maxAttempt))

	require.NoError(t, store.Migrate(ctx, db.Pool, nil))
	after := counts("messages", "message_payloads", "deliveries", "delivery_attempts", "idempotency_keys",
		"messages_default", "message_payloads_default", "deliveries_default", "delivery_attempts_default")
	require.Equal(t, before["messages"], after["messages"])
	require.Equal(t, before["messages"], after["message_payloads"])
	require.Equal(t, before["deliveries"], after["deliveries"])
	require.Equal(t, before["delivery_attempts"], after["delivery_attempts"])
	require.Equal(t, before["idempotency_keys"], after["idempotency_keys"])
	for _, table := range []string{"messages_default", "message_payloads_default", "deliveries_default", "delivery_attempts_default"} {
		require.Zero(t, after[table], "%s: every old row is in the legacy partition", table)
	}

	for id, w := range msgs {
		m, err := s.GetMessage(ctx, id)
		require.NoError(t, err)
		require.False(t, m.PayloadExpired)
		var got, exp any
		require.NoError(t, json.Unmarshal(m.Payload, &got))
		require.NoError(t, json.Unmarshal([]byte(w.payload), &exp))
		require.Equal(t, exp, got)
		require.Len(t, m.Deliveries, len(w.status))
		for _, d := range m.Deliveries {
			require.Equal(t, w.status[d.ID], d.Status, d.ID)
			list, err := s.ListAttempts(ctx, store.AttemptFilter{DeliveryID: d.ID, Limit: 10})
			require.NoError(t, err)
			if d.Status == store.DeliveryPending || d.Status == store.DeliveryHeld {
				require.Empty(t, list)
			} else {
				require.Len(t, list, 1)
			}
		}
	}
	// The old keys still replay their messages.
	for id := range msgs {
		m, err := s.GetMessage(ctx, id)
		require.NoError(t, err)
		if m.IdempotencyKey == "" {
			continue
		}
		replay, created, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "order.paid", Payload: json.RawMessage(`1`), IdempotencyKey: m.IdempotencyKey}, enq)
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, id, replay.ID)
	}
	// A failed old delivery can be retried: its payload moved with it.
	for id, w := range msgs {
		for d, st := range w.status {
			if st == store.DeliveryFailed {
				got, err := s.RetryDelivery(ctx, d, enq)
				require.NoError(t, err, id)
				require.Equal(t, store.DeliveryPending, got.Status)
			}
		}
		break
	}

	// New rows land in the new partitions, and attempt ids go on.
	_, err := s.EnsurePartitions(ctx, time.Now(), time.Minute, 2)
	require.NoError(t, err)
	m, created, err := s.CreateMessage(ctx, store.NewMessage{TenantID: "acme", EventType: "order.paid", Payload: json.RawMessage(`{"new":true}`)}, enq)
	require.NoError(t, err)
	require.True(t, created)
	require.Len(t, m.Deliveries, 5)
	at := time.Now()
	require.NoError(t, s.RecordLedger(ctx, []store.Attempt{{DeliveryID: m.Deliveries[0].ID, MessageID: m.ID, EndpointID: m.Deliveries[0].EndpointID,
		AttemptNumber: 1, AttemptedAt: at, Classification: "success"}}, nil))
	where := func(table, column, id string) string {
		var name string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM `+table+` WHERE `+column+` = $1`, id).Scan(&name))
		return name
	}
	for table, id := range map[string]string{"messages": m.ID, "deliveries": m.Deliveries[0].ID} {
		p := where(table, "id", id)
		require.NotEqual(t, table+"_legacy", p)
		require.NotEqual(t, table+"_default", p)
	}
	require.Regexp(t, `^message_payloads_p`, where("message_payloads", "message_id", m.ID))
	require.Regexp(t, `^delivery_attempts_p`, where("delivery_attempts", "delivery_id", m.Deliveries[0].ID))
	var newAttempt int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id FROM delivery_attempts WHERE delivery_id = $1`, m.Deliveries[0].ID).Scan(&newAttempt))
	require.Greater(t, newAttempt, maxAttempt)
	for _, d := range allDeliveries {
		require.Equal(t, "deliveries_legacy", where("deliveries", "id", d))
	}
}

// TestUpgradeEndpointsGainHeaders: endpoints stored at version 10 read
// back unchanged after the later migrations, with no headers, and take
// headers through an update.
func TestUpgradeEndpointsGainHeaders(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	resetTo(t, db, 10)
	const previous = "whsec_Dx1gsDwxK9pmGkLqSbqSQFRx2EZD2KRbTfVMdbLkq5g="
	plain := createEndpointV10(t, db, "acme", "https://acme.example/a", testSecret, "")
	rotated := createEndpointV10(t, db, "globex", "https://globex.example/b", testSecret, previous)

	require.NoError(t, store.Migrate(ctx, db.Pool, nil))
	s := store.New(db.Pool, nil)
	got, err := s.GetEndpoints(ctx, []string{plain, rotated})
	require.NoError(t, err)
	require.Len(t, got, 2)
	for _, id := range []string{plain, rotated} {
		e := got[id]
		require.Equal(t, map[string]string{}, e.Headers, id)
		require.Equal(t, store.SigningHMAC, e.Signing, id)
		require.Equal(t, testSecret, e.Secret, id)
		require.Equal(t, map[string]string{"team": "billing"}, e.Metadata, id)
	}
	require.Equal(t, previous, got[rotated].PreviousSecret)
	require.NotNil(t, got[rotated].PreviousSecretExpiresAt)

	headers := map[string]string{"X-Api-Key": "k"}
	e, err := s.UpdateEndpoint(ctx, plain, store.EndpointPatch{Headers: &headers})
	require.NoError(t, err)
	require.Equal(t, headers, e.Headers)
	list, err := s.ListEndpoints(ctx, store.AllTenants(), store.Page{Limit: 10})
	require.NoError(t, err)
	require.Len(t, list, 2)
}

// TestUpgradeEndpointsGainSigning: endpoints stored at version 11, with
// headers and a rotated secret, sign with HMAC after the signing
// migration, everything else kept.
func TestUpgradeEndpointsGainSigning(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	resetTo(t, db, 11)
	const previous = "whsec_Dx1gsDwxK9pmGkLqSbqSQFRx2EZD2KRbTfVMdbLkq5g="
	var ids []string
	for i := range 3 {
		id := createEndpointV10(t, db, "acme", fmt.Sprintf("https://acme.example/%d", i), testSecret, previous)
		_, err := db.Pool.Exec(ctx, `UPDATE endpoints SET headers = '{"X-Api-Key": "k"}' WHERE id = $1`, id)
		require.NoError(t, err)
		ids = append(ids, id)
	}

	require.NoError(t, store.Migrate(ctx, db.Pool, nil))
	s := store.New(db.Pool, nil)
	got, err := s.GetEndpoints(ctx, ids)
	require.NoError(t, err)
	require.Len(t, got, 3)
	for _, e := range got {
		require.Equal(t, store.SigningHMAC, e.Signing)
		require.Equal(t, map[string]string{"X-Api-Key": "k"}, e.Headers)
		require.Equal(t, testSecret, e.Secret)
		require.Equal(t, previous, e.PreviousSecret)
	}
	_, err = db.Pool.Exec(ctx, `UPDATE endpoints SET signing = 'rsa' WHERE id = $1`, ids[0])
	require.Error(t, err, "only the known schemes are stored")
	e, err := s.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://acme.example/new", Secret: "whsk_x", Signing: store.SigningEd25519})
	require.NoError(t, err)
	require.Equal(t, store.SigningEd25519, e.Signing)
}

// TestUpgradeAddsEventTypeCatalogue: a database at version 12 with
// endpoints and messages gains an empty catalogue; a type its old messages
// name is archived, not deleted, and one they do not name is deleted.
func TestUpgradeAddsEventTypeCatalogue(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	resetTo(t, db, 12)
	s := store.New(db.Pool, nil)
	ep := createEndpointV10(t, db, "acme", "https://acme.example/a", testSecret, "")
	for i := range 3 {
		createMessageV7(t, db, "acme", "invoice.paid", fmt.Sprintf(`{"i":%d}`, i), ep)
	}

	require.NoError(t, store.Migrate(ctx, db.Pool, nil))
	list, err := s.ListEventTypes(ctx, store.Page{})
	require.NoError(t, err)
	require.Empty(t, list)
	for _, name := range []string{"invoice.paid", "user.created"} {
		_, err := s.CreateEventType(ctx, store.EventType{Name: name, Schema: json.RawMessage(`{"type":"object"}`)})
		require.NoError(t, err)
	}
	_, err = s.CreateEventType(ctx, store.EventType{Name: "user.created"})
	require.ErrorIs(t, err, store.ErrEventTypeExists)
	e, archived, err := s.DeleteEventType(ctx, "invoice.paid")
	require.NoError(t, err)
	require.True(t, archived, "old messages name it")
	require.True(t, e.Archived)
	_, archived, err = s.DeleteEventType(ctx, "user.created")
	require.NoError(t, err)
	require.False(t, archived)
	_, err = s.GetEventType(ctx, "user.created")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, _, err = s.DeleteEventType(ctx, "user.created")
	require.ErrorIs(t, err, store.ErrNotFound)
	var messages int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM messages`).Scan(&messages))
	require.Equal(t, 3, messages, "the messages are kept")
}
