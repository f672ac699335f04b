package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/store"
)

// TestRecoverEndpoint: a recovery answers how many failed deliveries it
// queued (parked for the dispatcher's release) and how many it skipped for
// an expired payload; a second one while the first is releasing is 409.
func TestRecoverEndpoint(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	e := b.createEndpoint(t, "acme")
	var msgs []messageJSON
	for range 3 {
		m := b.sendMessage(t, "acme", "invoice.paid")
		b.markFailed(t, m.Deliveries[0], 1, 8)
		msgs = append(msgs, m)
	}
	_, err := b.db.Pool.Exec(t.Context(), `DELETE FROM message_payloads WHERE message_id = $1`, msgs[2].ID)
	require.NoError(t, err)
	path := "/v1/endpoints/" + e.ID + "/recover"
	body := map[string]any{"since": time.Now().Add(-time.Hour).Format(time.RFC3339Nano)}

	r := b.do(t, "POST", path, body)
	requireStatus(t, http.StatusAccepted, r)
	require.JSONEq(t, `{"queued": 2, "payload_expired": 1}`, string(r.Body))
	for _, m := range msgs[:2] {
		d, err := b.store.GetDelivery(t.Context(), m.Deliveries[0].ID)
		require.NoError(t, err)
		require.Equal(t, store.DeliveryWaiting, d.Status)
		require.Equal(t, 2, d.Series)
	}
	requireProblem(t, http.StatusConflict, b.do(t, "POST", path, body))
}

// TestRecoverEndpointRefusesBadRanges: each bad range names its field and
// writes nothing.
func TestRecoverEndpointRefusesBadRanges(t *testing.T) {
	t.Parallel()
	_, b := setup(t, func(d *api.Deps) { d.MaxRecoverWindow = 48 * time.Hour })
	e := b.createEndpoint(t, "acme")
	b.markFailed(t, b.sendMessage(t, "acme", "invoice.paid").Deliveries[0], 1, 8)
	path := "/v1/endpoints/" + e.ID + "/recover"
	now := time.Now().UTC()
	at := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339) }
	for _, tc := range []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"no since", map[string]any{}, "since"},
		{"malformed since", map[string]any{"since": "yesterday"}, "since"},
		{"since without a zone", map[string]any{"since": "2026-11-30T12:00:00"}, "since"},
		{"since past the window", map[string]any{"since": at(-49 * time.Hour)}, "since"},
		{"malformed until", map[string]any{"since": at(-time.Hour), "until": "soon"}, "until"},
		{"until before since", map[string]any{"since": at(-time.Hour), "until": at(-2 * time.Hour)}, "until"},
		{"until at since", map[string]any{"since": at(-time.Hour), "until": at(-time.Hour)}, "until"},
	} {
		r := b.do(t, "POST", path, tc.body, docBlind("the window and the order of the times have no schema"))
		requireFieldError(t, http.StatusBadRequest, r, tc.field)
	}
	d := b.do(t, "POST", path, map[string]any{"since": at(-47 * time.Hour), "until": at(time.Minute)})
	requireStatus(t, http.StatusAccepted, d)
	require.JSONEq(t, `{"queued": 1, "payload_expired": 0}`, string(d.Body))
}

// TestRecoverEndpointScope: a tenant token recovers its own endpoints
// only, and a read-only token none.
func TestRecoverEndpointScope(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	acme := b.createEndpoint(t, "acme")
	initech := b.createEndpoint(t, "initech")
	acmeTok, _ := b.scopedToken(t, store.NewAPIToken{Scope: store.ScopeTenant, Name: "acme", TenantID: "acme"})
	acmeRO, _ := b.scopedToken(t, store.NewAPIToken{Scope: store.ScopeTenant, Name: "acme-ro", TenantID: "acme", ReadOnly: true})
	body := map[string]any{"since": time.Now().Add(-time.Hour).Format(time.RFC3339)}
	require.Equal(t, http.StatusNotFound, b.raw(t, "POST", "/v1/endpoints/"+initech.ID+"/recover", "Bearer "+acmeTok, body).status)
	require.Equal(t, http.StatusForbidden, b.raw(t, "POST", "/v1/endpoints/"+acme.ID+"/recover", "Bearer "+acmeRO, body).status)
	require.Equal(t, http.StatusAccepted, b.raw(t, "POST", "/v1/endpoints/"+acme.ID+"/recover", "Bearer "+acmeTok, body).status)
}
