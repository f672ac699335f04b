package api_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
)

// messageSummaryJSON is a message as a search answers it.
type messageSummaryJSON struct {
	ID             string    `json:"id"`
	TenantID       string    `json:"tenant_id"`
	EventType      string    `json:"event_type"`
	PayloadRaw     any       `json:"payload"`
	PayloadExpired *bool     `json:"payload_expired"`
	IdempotencyKey *string   `json:"idempotency_key"`
	CreatedAt      time.Time `json:"created_at"`
}

// pages follows a search's next_cursor from query to its last page and
// returns every item, failing if an id comes twice.
func pages[T any](t *testing.T, b *testBundle, path string, q url.Values, id func(T) string, opts ...callOpt) []T {
	t.Helper()
	var out []T
	seen := map[string]bool{}
	for range 100 {
		r := b.do(t, "GET", path+"?"+q.Encode(), nil, opts...)
		requireStatus(t, http.StatusOK, r)
		page := decodeJSON[listJSON[T]](t, r)
		for _, v := range page.Data {
			require.False(t, seen[id(v)], "%s comes twice", id(v))
			seen[id(v)] = true
		}
		out = append(out, page.Data...)
		if page.NextCursor == nil {
			return out
		}
		require.NotEmpty(t, page.Data)
		require.Equal(t, id(page.Data[len(page.Data)-1]), *page.NextCursor)
		q.Set("after", *page.NextCursor)
	}
	t.Fatal("no last page")
	return nil
}

func messageID(m messageSummaryJSON) string { return m.ID }
func deliveryID(d deliveryJSON) string      { return d.ID }

// idTime is when an id was minted.
func idTime(t *testing.T, id string) time.Time {
	t.Helper()
	at, ok := store.IDTime(id)
	require.True(t, ok, id)
	return at
}

// TestSearchMessages: every filter alone and combined finds exactly the
// messages it describes, newest first, over pages that repeat and miss
// nothing; include=payload adds payloads, an expired one as null.
func TestSearchMessages(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b.createEndpoint(t, "acme")
	type sent struct{ id, tenant, eventType string }
	var all []sent
	for _, c := range []struct{ tenant, eventType string }{
		{"acme", "invoice.paid"}, {"globex", "invoice.paid"}, {"acme", "invoice.void"}, {"acme", "invoice.paid"},
		{"globex", "user.created"}, {"acme", "user.created"}, {"acme", "invoice.paid"},
	} {
		m := b.sendMessage(t, c.tenant, c.eventType)
		all = append(all, sent{m.ID, c.tenant, c.eventType})
	}
	slices.Reverse(all) // newest first
	// The expected answers are computed from the ids' times, so messages
	// minted in the same millisecond are counted right.
	split := idTime(t, all[3].id)
	after := split.Format(time.RFC3339Nano)

	cases := []struct {
		name  string
		query url.Values
		want  func(sent) bool
	}{
		{"everything", url.Values{}, func(sent) bool { return true }},
		{"tenant", url.Values{"tenant_id": {"acme"}}, func(m sent) bool { return m.tenant == "acme" }},
		{"event type", url.Values{"event_type": {"invoice.paid"}}, func(m sent) bool { return m.eventType == "invoice.paid" }},
		{"since", url.Values{"since": {after}}, func(m sent) bool { return !idTime(t, m.id).Before(split) }},
		{"until", url.Values{"until": {after}}, func(m sent) bool { return idTime(t, m.id).Before(split) }},
		{"tenant, event type and time range", url.Values{
			"tenant_id": {"acme"}, "event_type": {"invoice.paid"}, "since": {split.Add(-time.Hour).Format(time.RFC3339)}, "until": {after},
		}, func(m sent) bool {
			return m.tenant == "acme" && m.eventType == "invoice.paid" && idTime(t, m.id).Before(split)
		}},
		{"a range in the future", url.Values{"since": {time.Now().Add(time.Hour).Format(time.RFC3339)}}, func(sent) bool { return false }},
	}
	for _, c := range cases {
		for _, limit := range []string{"2", "250"} {
			q := url.Values{"limit": {limit}}
			for k, v := range c.query {
				q[k] = v
			}
			got := pages(t, b, "/v1/messages", q, messageID)
			var want []string
			for _, m := range all {
				if c.want(m) {
					want = append(want, m.id)
				}
			}
			var ids []string
			for _, m := range got {
				ids = append(ids, m.ID)
				require.Nil(t, m.PayloadExpired, "no payload without include")
				require.Nil(t, m.PayloadRaw)
			}
			require.Equal(t, want, ids, "%s, limit %s", c.name, limit)
		}
	}

	// include=payload: the payload, or null once payload retention dropped it.
	_, err := b.db.Pool.Exec(context.Background(), `DELETE FROM message_payloads WHERE message_id = $1`, all[0].id)
	require.NoError(t, err)
	r := b.do(t, "GET", "/v1/messages?include=payload&limit=2", nil)
	requireStatus(t, http.StatusOK, r)
	page := decodeJSON[listJSON[messageSummaryJSON]](t, r)
	require.Len(t, page.Data, 2)
	require.True(t, *page.Data[0].PayloadExpired)
	require.Nil(t, page.Data[0].PayloadRaw)
	require.Contains(t, string(r.Body), `"payload":null`)
	require.False(t, *page.Data[1].PayloadExpired)
	require.Equal(t, map[string]any{"n": float64(1)}, page.Data[1].PayloadRaw)
}

// deliveryFixture holds deliveries in every status, of two tenants and
// three endpoints.
type deliveryFixture struct {
	all []deliveryJSON // newest first, as the admin sees them
	e1  endpointJSON
}

func newDeliveryFixture(t *testing.T, b *testBundle) *deliveryFixture {
	t.Helper()
	ctx := context.Background()
	fx := &deliveryFixture{}
	fx.e1 = b.createEndpoint(t, "acme")
	e2 := b.createEndpoint(t, "acme", "invoice.*")
	b.createEndpoint(t, "globex")
	var sent []deliveryJSON
	for _, c := range []struct{ tenant, eventType string }{
		{"acme", "invoice.paid"}, {"globex", "a"}, {"acme", "user.created"}, {"acme", "invoice.void"}, {"globex", "b"}, {"acme", "invoice.paid"},
	} {
		sent = append(sent, b.sendMessage(t, c.tenant, c.eventType).Deliveries...)
	}
	// Statuses: failed, delivered, expired, delivering, waiting; held for
	// a disabled endpoint's; the rest pending.
	b.markFailed(t, sent[0], 1, 3)
	b.markFailed(t, sent[5], 1, 3)
	code := 200
	now := time.Now()
	require.NoError(t, b.store.RecordLedger(ctx, nil, []store.StatusUpdate{{
		DeliveryID: sent[1].ID, Series: 1, Status: store.DeliveryDelivered, AttemptCount: 1, LastAttemptAt: &now, LastStatusCode: &code,
	}}))
	_, err := b.db.Pool.Exec(ctx, `UPDATE deliveries SET status = 'expired', job_id = NULL WHERE id = $1`, sent[2].ID)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempted_at = now(), attempt = 1 WHERE id = $1`, *b.jobIDOf(t, sent[3].ID))
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE deliveries SET status = 'waiting', job_id = NULL WHERE id = $1`, sent[4].ID)
	require.NoError(t, err)
	requireStatus(t, http.StatusOK, b.do(t, "POST", "/v1/endpoints/"+e2.ID+"/disable", nil))
	sent = append(sent, b.sendMessage(t, "acme", "invoice.paid").Deliveries...)

	fx.all = pages(t, b, "/v1/deliveries", url.Values{"limit": {"250"}}, deliveryID)
	require.Len(t, fx.all, len(sent))
	statuses := map[string]int{}
	for _, d := range fx.all {
		statuses[d.Status]++
	}
	for _, s := range []string{"pending", "delivering", "delivered", "failed", "waiting", "held", "expired"} {
		require.Positive(t, statuses[s], "the fixture has a %s delivery: %v", s, statuses)
	}
	return fx
}

// TestSearchDeliveries: every filter alone and combined finds exactly the
// deliveries it describes, newest first, over pages that repeat and miss
// nothing.
func TestSearchDeliveries(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	fx := newDeliveryFixture(t, b)
	for i := 1; i < len(fx.all); i++ {
		require.Greater(t, fx.all[i-1].ID, fx.all[i].ID, "newest first")
	}
	msg := fx.all[0].MessageID // the newest: one delivery pending, one held
	split := idTime(t, fx.all[len(fx.all)/2].ID)
	cases := []struct {
		name  string
		query url.Values
		want  func(deliveryJSON) bool
	}{
		{"failed", url.Values{"status": {"failed"}}, func(d deliveryJSON) bool { return d.Status == "failed" }},
		{"pending (not delivering)", url.Values{"status": {"pending"}}, func(d deliveryJSON) bool { return d.Status == "pending" }},
		{"delivering", url.Values{"status": {"delivering"}}, func(d deliveryJSON) bool { return d.Status == "delivering" }},
		{"the final ones", url.Values{"status": {"failed,expired,delivered"}}, func(d deliveryJSON) bool {
			return d.Status == "failed" || d.Status == "expired" || d.Status == "delivered"
		}},
		{"held or waiting", url.Values{"status": {"held,waiting"}}, func(d deliveryJSON) bool { return d.Status == "held" || d.Status == "waiting" }},
		{"endpoint", url.Values{"endpoint_id": {fx.e1.ID}}, func(d deliveryJSON) bool { return d.EndpointID == fx.e1.ID }},
		{"tenant", url.Values{"tenant_id": {"globex"}}, func(d deliveryJSON) bool { return d.TenantID == "globex" }},
		{"message", url.Values{"message_id": {msg}}, func(d deliveryJSON) bool { return d.MessageID == msg }},
		{"since", url.Values{"since": {split.Format(time.RFC3339Nano)}}, func(d deliveryJSON) bool { return !idTime(t, d.ID).Before(split) }},
		{"until", url.Values{"until": {split.Format(time.RFC3339Nano)}}, func(d deliveryJSON) bool { return idTime(t, d.ID).Before(split) }},
		{"an endpoint's failed deliveries of a tenant since a time", url.Values{
			"status": {"failed"}, "endpoint_id": {fx.e1.ID}, "tenant_id": {"acme"}, "since": {split.Add(-time.Hour).Format(time.RFC3339)},
		}, func(d deliveryJSON) bool { return d.Status == "failed" && d.EndpointID == fx.e1.ID }},
		{"a message's held deliveries until now", url.Values{
			"message_id": {msg}, "status": {"held"}, "until": {time.Now().Add(time.Minute).Format(time.RFC3339)},
		}, func(d deliveryJSON) bool { return d.MessageID == msg && d.Status == "held" }},
		{"nothing in the past", url.Values{"until": {"2020-01-01T00:00:00Z"}}, func(deliveryJSON) bool { return false }},
	}
	for _, c := range cases {
		for _, limit := range []string{"1", "3", "250"} {
			q := url.Values{"limit": {limit}}
			for k, v := range c.query {
				q[k] = v
			}
			got := pages(t, b, "/v1/deliveries", q, deliveryID)
			var want []deliveryJSON
			for _, d := range fx.all {
				if c.want(d) {
					want = append(want, d)
				}
			}
			require.Equal(t, want, got, "%s, limit %s", c.name, limit)
			if c.name != "nothing in the past" {
				require.NotEmpty(t, got, "%s finds something", c.name)
			}
		}
	}
}

// TestSearchTenantIsolation: a tenant token's searches hold its tenant's
// messages and deliveries only, and naming another tenant is refused.
func TestSearchTenantIsolation(t *testing.T) {
	t.Parallel()
	in := setupIsolation(t)
	b := in.b
	as := withHeader("Authorization", "Bearer "+in.globex)
	for _, path := range []string{"/v1/messages", "/v1/messages?include=payload", "/v1/deliveries", "/v1/deliveries?status=failed,pending",
		"/v1/deliveries?endpoint_id=" + in.initechEndpoint.ID, "/v1/deliveries?message_id=" + in.initechMessage.ID, "/v1/messages?tenant_id=globex"} {
		r := b.do(t, "GET", path, nil, as)
		requireStatus(t, http.StatusOK, r)
		for _, m := range in.markers() {
			require.NotContains(t, strings.ReplaceAll(string(r.Body), path, ""), m, path)
		}
		page := looseJSON[listJSON[struct {
			TenantID string `json:"tenant_id"`
		}]](t, r)
		for _, v := range page.Data {
			require.Equal(t, "globex", v.TenantID, path)
		}
	}
	requireStatus(t, http.StatusOK, b.do(t, "GET", "/v1/deliveries", nil, as))
	mine := looseJSON[listJSON[deliveryJSON]](t, b.do(t, "GET", "/v1/deliveries", nil, as)).Data
	require.Len(t, mine, 1)
	require.Equal(t, in.globexMessage.Deliveries[0].ID, mine[0].ID)
	// The admin sees both tenants.
	require.Len(t, looseJSON[listJSON[deliveryJSON]](t, b.do(t, "GET", "/v1/deliveries", nil)).Data, 2)
	for _, path := range []string{"/v1/messages?tenant_id=initech", "/v1/deliveries?tenant_id=initech"} {
		requireFieldError(t, http.StatusForbidden, b.do(t, "GET", path, nil, as), "tenant_id")
	}
}

// TestSearchRejectsBadInput: each bad parameter answers 400 naming it,
// and nothing else.
func TestSearchRejectsBadInput(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	const noSchema = "the document cannot say that since must not be after until"
	for _, c := range []struct {
		path, field string
		opts        []callOpt
	}{
		{"/v1/deliveries?status=lost", "status", nil},
		{"/v1/deliveries?status=failed,lost", "status", nil},
		{"/v1/deliveries?status=failed,", "status", nil},
		{"/v1/deliveries?since=2026-12-01T12:00:00Z&until=2026-12-01T11:00:00Z", "since", []callOpt{docBlind(noSchema)}},
		{"/v1/messages?since=2026-12-01T12:00:00Z&until=2026-12-01T11:00:00Z", "since", []callOpt{docBlind(noSchema)}},
		{"/v1/deliveries?since=yesterday", "since", nil},
		{"/v1/messages?until=2026-13-01", "until", nil},
		{"/v1/deliveries?limit=251", "limit", nil},
		{"/v1/messages?limit=0", "limit", nil},
		{"/v1/messages?after=dlv_01KKNTQ7NRTF3D8VMNKEC3EYYS", "after", nil},
		{"/v1/deliveries?after=garbage", "after", nil},
		{"/v1/deliveries?endpoint_id=msg_01KKNTQ66WBPRRVZKGZSVQD5R5", "endpoint_id", nil},
		{"/v1/deliveries?message_id=nope", "message_id", nil},
		{"/v1/deliveries?tenant_id=%20x", "tenant_id", nil},
		{"/v1/messages?event_type=a..b", "event_type", nil},
		{"/v1/messages?include=deliveries", "include", nil},
	} {
		p := requireFieldError(t, http.StatusBadRequest, b.do(t, "GET", c.path, nil, c.opts...), c.field)
		require.Len(t, p.Errors, 1, c.path)
	}
}
