package hookd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	hookd "github.com/hookd/hookd/sdk/go"
)

// countMessages counts the tenant's stored messages, page by page.
func countMessages(t *testing.T, c *hookd.Client, tenant string) int {
	t.Helper()
	n := 0
	for _, err := range c.Messages.All(testContext(t), &hookd.MessageFilter{TenantID: &tenant}) {
		require.NoError(t, err)
		n++
	}
	return n
}

// TestSendIsDeliveredAndVerified registers an endpoint of each signing
// scheme, sends a message, and has the receiver verify both webhooks with
// package webhook: the whsec_ secret given at creation and the whpk_
// public key read back from the endpoint.
func TestSendIsDeliveredAndVerified(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	c := newClient(t, "")
	tenant := newTenant(t)
	hmacRecv, edRecv := newReceiver(t), newReceiver(t)

	secret := newSecret()
	hmacEp, err := c.Endpoints.Create(ctx, hookd.CreateEndpointRequest{TenantID: tenant, URL: hookd.Ptr(hmacRecv.url("/hooks")), Secret: &secret})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(hmacEp.ID, "ep_"))
	hmacRecv.verifyWith(t, secret)

	edEp, err := c.Endpoints.Create(ctx, hookd.CreateEndpointRequest{TenantID: tenant, URL: hookd.Ptr(edRecv.url("/hooks")), Signing: hookd.Ptr(hookd.SigningEd25519)})
	require.NoError(t, err)
	key, err := c.Endpoints.Secret(ctx, edEp.ID)
	require.NoError(t, err)
	publicKey, err := key.Secret.AsPublicKey()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(publicKey, "whpk_"), publicKey)
	edRecv.verifyWith(t, publicKey)

	msg, err := c.Messages.Send(ctx, hookd.NewMessage{TenantID: tenant, EventType: "invoice.paid", Payload: map[string]any{"invoice": "in_1", "amount": 4200}})
	require.NoError(t, err)
	require.Len(t, msg.Deliveries, 2)
	require.NotNil(t, msg.IdempotencyKey, "Send sends a key of its own")

	for _, r := range []*receiver{hmacRecv, edRecv} {
		body := r.waitVerified(t, msg.ID)
		require.JSONEq(t, `{"invoice":"in_1","amount":4200}`, string(body))
	}
	require.Eventually(t, func() bool {
		m, err := c.Messages.Get(ctx, msg.ID)
		require.NoError(t, err)
		return len(m.Deliveries) == 2 && m.Deliveries[0].Status == "delivered" && m.Deliveries[1].Status == "delivered"
	}, time.Minute, 50*time.Millisecond)
}

// TestSendIdempotency: a key given twice stores one message; sends without
// a key each get a key of their own, so they are distinct messages.
func TestSendIdempotency(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	c := newClient(t, "")
	tenant := newTenant(t)

	first, err := c.Messages.Send(ctx, hookd.NewMessage{TenantID: tenant, EventType: "order.created", Payload: json.RawMessage(`{"n":1}`), IdempotencyKey: "order-1"})
	require.NoError(t, err)
	again, err := c.Messages.Send(ctx, hookd.NewMessage{TenantID: tenant, EventType: "order.created", Payload: json.RawMessage(`{"n":1}`), IdempotencyKey: "order-1"})
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID, "the same key answers the first message")
	require.Equal(t, "order-1", *again.IdempotencyKey)

	a, err := c.Messages.Send(ctx, hookd.NewMessage{TenantID: tenant, EventType: "order.created", Payload: 2})
	require.NoError(t, err)
	b, err := c.Messages.Send(ctx, hookd.NewMessage{TenantID: tenant, EventType: "order.created", Payload: 2})
	require.NoError(t, err)
	require.NotEqual(t, a.ID, b.ID)
	require.NotEqual(t, *a.IdempotencyKey, *b.IdempotencyKey)
	require.Equal(t, 3, countMessages(t, c, tenant))
}

// TestSendRetriedThrough503 puts a proxy before hookd that answers the
// first two sends 503 with Retry-After: 1: Send waits as asked, succeeds on
// the third try, and one message is stored.
func TestSendRetriedThrough503(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	keys := make(chan string, 3)
	proxy := newFaultProxy(t, func(n int, w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		if r.URL.Path != "/v1/messages" {
			return false
		}
		raw, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		r.Body = io.NopCloser(bytes.NewReader(raw))
		var body struct {
			IdempotencyKey string `json:"idempotency_key"`
		}
		require.NoError(t, json.Unmarshal(raw, &body))
		keys <- body.IdempotencyKey
		if n > 2 {
			return false
		}
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"type":"https://hookd.dev/problems/unavailable","title":"Service Unavailable","status":503}`))
		return true
	})
	c := newClient(t, proxy.srv.URL)
	direct := newClient(t, "")
	tenant := newTenant(t)

	start := time.Now()
	msg, err := c.Messages.Send(ctx, hookd.NewMessage{TenantID: tenant, EventType: "invoice.paid", Payload: map[string]int{"amount": 1}})
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), 2*time.Second, "Send waits the Retry-After of both 503s")
	require.Equal(t, 3, proxy.requests(http.MethodPost, "/v1/messages"))
	k1, k2, k3 := <-keys, <-keys, <-keys
	require.NotEmpty(t, k1)
	require.Equal(t, []string{k1, k1}, []string{k2, k3}, "every try carries the same idempotency key")
	require.Equal(t, k1, *msg.IdempotencyKey)
	require.Equal(t, 1, countMessages(t, direct, tenant))
}

// TestSendRetriedAfterTimeout: hookd stores the first try's message but
// its answer never reaches the client, which gives up after its attempt
// timeout and sends again with the same key: one message is stored, and
// Send answers it.
func TestSendRetriedAfterTimeout(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	stored := make(chan struct{})
	proxy := newFaultProxy(t, func(n int, w http.ResponseWriter, r *http.Request, pass http.Handler) bool {
		if r.URL.Path != "/v1/messages" || n > 1 {
			return false
		}
		// Pass the first try to hookd, keep its answer, and hold the
		// client until it gives up.
		rec := httptest.NewRecorder()
		pass.ServeHTTP(rec, r.Clone(context.WithoutCancel(r.Context())))
		if rec.Code == http.StatusAccepted {
			close(stored)
		}
		<-r.Context().Done()
		return true
	})
	p := hookd.DefaultRetryPolicy()
	p.AttemptTimeout, p.MinBackoff, p.MaxBackoff = 2*time.Second, 10*time.Millisecond, 100*time.Millisecond
	c := newClient(t, proxy.srv.URL, hookd.WithRetryPolicy(p))
	direct := newClient(t, "")
	tenant := newTenant(t)

	msg, err := c.Messages.Send(ctx, hookd.NewMessage{TenantID: tenant, EventType: "invoice.paid", Payload: map[string]int{"amount": 2}})
	require.NoError(t, err)
	// The retry may answer before the proxy has read the first try's
	// answer: wait for it.
	select {
	case <-stored:
	case <-time.After(time.Minute):
		t.Fatal("the first try did not store the message")
	}
	// A retry that also timed out on a loaded machine makes a third try,
	// with the same key.
	require.GreaterOrEqual(t, proxy.requests(http.MethodPost, "/v1/messages"), 2)
	require.Equal(t, 1, countMessages(t, direct, tenant))
	var ids []string
	for m, err := range direct.Messages.All(ctx, &hookd.MessageFilter{TenantID: &tenant}) {
		require.NoError(t, err)
		ids = append(ids, m.ID)
	}
	require.Equal(t, []string{msg.ID}, ids, "the retry answered the first try's message")
}

// TestListsPageThrough reads lists larger than a page with the iterators.
func TestListsPageThrough(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	c := newClient(t, "")
	tenant := newTenant(t)
	var created []string
	for range 7 {
		ep, err := c.Endpoints.Create(ctx, hookd.CreateEndpointRequest{TenantID: tenant, URL: hookd.Ptr("http://127.0.0.1:9/hooks")})
		require.NoError(t, err)
		created = append(created, ep.ID)
	}
	limit := 2
	var listed []string
	for ep, err := range c.Endpoints.All(ctx, &hookd.EndpointFilter{TenantID: &tenant, Limit: &limit}) {
		require.NoError(t, err)
		listed = append(listed, ep.ID)
	}
	require.Equal(t, created, listed, "every endpoint once, in creation order, over 4 pages")

	// Breaking out of the loop stops the iteration.
	n := 0
	for _, err := range c.Endpoints.All(ctx, &hookd.EndpointFilter{TenantID: &tenant, Limit: &limit}) {
		require.NoError(t, err)
		n++
		if n == 3 {
			break
		}
	}
	require.Equal(t, 3, n)

	// An error ends the iteration: a tenant id the API refuses.
	bad := "not a tenant!"
	var errs []error
	for _, err := range c.Endpoints.All(ctx, &hookd.EndpointFilter{TenantID: &bad}) {
		errs = append(errs, err)
	}
	require.Len(t, errs, 1)
	var herr *hookd.Error
	require.ErrorAs(t, errs[0], &herr)
	require.Equal(t, http.StatusBadRequest, herr.Status)
}

// TestRetryFailedDelivery: a delivery whose receiver fails every attempt
// ends failed; its attempts are read back; once the receiver is fixed,
// Deliveries.Retry delivers it.
func TestRetryFailedDelivery(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	c := newClient(t, "")
	tenant := newTenant(t)
	recv := newReceiver(t)
	secret := newSecret()
	recv.verifyWith(t, secret)
	recv.status.Store(http.StatusInternalServerError)
	_, err := c.Endpoints.Create(ctx, hookd.CreateEndpointRequest{TenantID: tenant, URL: hookd.Ptr(recv.url("/hooks")), Secret: &secret})
	require.NoError(t, err)
	msg, err := c.Messages.Send(ctx, hookd.NewMessage{TenantID: tenant, EventType: "invoice.paid", Payload: "x"})
	require.NoError(t, err)
	require.Len(t, msg.Deliveries, 1)
	id := msg.Deliveries[0].ID

	// devserver's dispatcher makes two attempts within about a second.
	require.Eventually(t, func() bool {
		d, err := c.Deliveries.Get(ctx, id)
		require.NoError(t, err)
		return d.Status == "failed"
	}, time.Minute, 50*time.Millisecond)
	var codes []int
	for a, err := range c.Deliveries.Attempts(ctx, id, nil) {
		require.NoError(t, err)
		require.NotNil(t, a.StatusCode)
		codes = append(codes, *a.StatusCode)
	}
	require.Equal(t, []int{500, 500}, codes)

	recv.status.Store(http.StatusOK)
	d, err := c.Deliveries.Retry(ctx, id)
	require.NoError(t, err)
	require.NotEqual(t, "failed", string(d.Status))
	recv.waitVerified(t, msg.ID)
	require.Eventually(t, func() bool {
		d, err := c.Deliveries.Get(ctx, id)
		require.NoError(t, err)
		return d.Status == "delivered"
	}, time.Minute, 50*time.Millisecond)
	codes = codes[:0]
	for a, err := range c.Deliveries.Attempts(ctx, id, nil) {
		require.NoError(t, err)
		codes = append(codes, *a.StatusCode)
	}
	require.Equal(t, []int{200, 500, 500}, codes, "newest first")

	// A delivered delivery is not retried: a typed 409.
	_, err = c.Deliveries.Retry(ctx, id)
	var herr *hookd.Error
	require.ErrorAs(t, err, &herr)
	require.Equal(t, http.StatusConflict, herr.Status)
	// Nor skipped: only a FIFO queue's blocking delivery is.
	_, err = c.Deliveries.Skip(ctx, id)
	require.ErrorAs(t, err, &herr)
	require.Equal(t, http.StatusConflict, herr.Status)
}

// TestTypedErrors: the API's problems come back as *hookd.Error with their
// fields.
func TestTypedErrors(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	c := newClient(t, "")

	_, err := c.Endpoints.Create(ctx, hookd.CreateEndpointRequest{TenantID: newTenant(t), URL: hookd.Ptr("ftp://example.com/hooks")})
	var herr *hookd.Error
	require.ErrorAs(t, err, &herr)
	require.Equal(t, http.StatusBadRequest, herr.Status)
	require.Equal(t, "https://hookd.dev/problems/validation", herr.Type)
	require.NotEmpty(t, herr.Title)
	f, ok := herr.Field("url")
	require.True(t, ok, "the problem names url: %v", herr.Errors)
	require.NotEmpty(t, f.Message)
	require.Contains(t, err.Error(), "url: ")

	_, err = c.Endpoints.Get(ctx, "ep_01HZZZZZZZZZZZZZZZZZZZZZZZ")
	require.ErrorAs(t, err, &herr)
	require.Equal(t, http.StatusNotFound, herr.Status)

	bad, err := hookd.New(server.API, "not-a-token")
	require.NoError(t, err)
	_, err = bad.Endpoints.Get(ctx, "ep_01HZZZZZZZZZZZZZZZZZZZZZZZ")
	require.ErrorAs(t, err, &herr)
	require.Equal(t, http.StatusUnauthorized, herr.Status)

	_, err = hookd.New("127.0.0.1:8080", "t")
	require.Error(t, err, "a base URL without a scheme")
}

// TestPortalSessionAndRecover: the portal session and recovery calls.
func TestPortalSessionAndRecover(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	c := newClient(t, "")
	tenant := newTenant(t)

	s, err := c.PortalSessions.Create(ctx, tenant, hookd.CreatePortalSessionRequest{ReadOnly: hookd.Ptr(true)})
	require.NoError(t, err)
	require.Equal(t, tenant, s.TenantID)
	require.True(t, s.ReadOnly)
	require.Contains(t, s.URL, "/portal#code=")
	require.True(t, s.ExpiresAt.After(time.Now()))

	// Listed without its code, then ended: it no longer lists as live.
	var listed []hookd.PortalSessionSummary
	for ps, err := range c.PortalSessions.All(ctx, tenant, nil) {
		require.NoError(t, err)
		listed = append(listed, ps)
	}
	require.Len(t, listed, 1)
	require.Equal(t, s.ID, listed[0].ID)
	require.Equal(t, "pending", string(listed[0].Status))
	require.NoError(t, c.PortalSessions.End(ctx, s.ID))
	for ps, err := range c.PortalSessions.All(ctx, tenant, nil) {
		require.NoError(t, err)
		require.Equal(t, "ended", string(ps.Status))
	}
	var ended *hookd.Error
	require.ErrorAs(t, c.PortalSessions.End(ctx, s.ID), &ended)
	require.Equal(t, http.StatusNotFound, ended.Status, "an ended session is not live")

	ep, err := c.Endpoints.Create(ctx, hookd.CreateEndpointRequest{TenantID: tenant, URL: hookd.Ptr("http://127.0.0.1:9/hooks")})
	require.NoError(t, err)
	rec, err := c.Endpoints.Recover(ctx, ep.ID, hookd.RecoverRequest{Since: time.Now().Add(-time.Hour)})
	require.NoError(t, err)
	require.Zero(t, rec.Queued, "nothing failed yet")

	_, err = c.Endpoints.Recover(ctx, ep.ID, hookd.RecoverRequest{Since: time.Now().Add(-time.Hour), Until: hookd.Ptr(time.Now().Add(-2 * time.Hour))})
	var herr *hookd.Error
	require.ErrorAs(t, err, &herr)
	require.Equal(t, http.StatusBadRequest, herr.Status)
	require.True(t, slices.ContainsFunc(herr.Errors, func(f hookd.FieldError) bool { return f.Field == "until" }), "%v", herr.Errors)
	require.False(t, errors.Is(err, context.DeadlineExceeded))
}

// TestBreakerOperationsAndTrafficClasses isolates and resets an
// endpoint's breaker, reads it back, and reads the traffic classes and a
// class's recommendation; a tenant token is refused the operator's calls.
func TestBreakerOperationsAndTrafficClasses(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	c := newClient(t, "")
	tenant := newTenant(t)
	ep, err := c.Endpoints.Create(ctx, hookd.CreateEndpointRequest{TenantID: tenant, URL: hookd.Ptr("http://127.0.0.1:1/hooks")})
	require.NoError(t, err)

	b, err := c.Breakers.Isolate(ctx, ep.ID, "sdk test")
	require.NoError(t, err)
	require.Equal(t, "isolated", string(b.State))
	b, err = c.Breakers.Get(ctx, ep.ID)
	require.NoError(t, err)
	require.Equal(t, "isolated", string(b.State))
	b, err = c.Breakers.Reset(ctx, ep.ID, "")
	require.NoError(t, err)
	require.Equal(t, "closed", string(b.State))

	classes, err := c.TrafficClasses.List(ctx)
	require.NoError(t, err)
	var names []string
	for _, cl := range classes {
		names = append(names, cl.Name)
	}
	require.Subset(t, names, []string{"high", "medium", "low", "trickle"})
	cl, err := c.TrafficClasses.Get(ctx, "medium")
	require.NoError(t, err)
	require.True(t, cl.Builtin)
	rec, err := c.TrafficClasses.Recommendation(ctx, "medium")
	require.NoError(t, err)
	require.Equal(t, "medium", rec.Class)

	tok, err := c.Tokens.Create(ctx, hookd.CreateTokenRequest{Name: "sdk-" + tenant, TenantID: &tenant})
	require.NoError(t, err)
	tc, err := hookd.New(server.API, tok.Token)
	require.NoError(t, err)
	var herr *hookd.Error
	_, err = tc.Breakers.Reset(ctx, ep.ID, "")
	require.ErrorAs(t, err, &herr)
	require.Equal(t, http.StatusForbidden, herr.Status)
	_, err = tc.TrafficClasses.List(ctx)
	require.ErrorAs(t, err, &herr)
	require.Equal(t, http.StatusForbidden, herr.Status)
}
