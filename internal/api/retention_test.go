package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMessagePastRetention: once payload retention has dropped a message's
// payload, GET answers "payload": null with payload_expired, and a retry
// of its failed delivery is refused naming payload; once retention has
// dropped the message, GET answers 404.
func TestMessagePastRetention(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	b.createEndpoint(t, "acme")
	m := b.sendMessage(t, "acme", "order.paid")
	require.Len(t, m.Deliveries, 1)
	d := m.Deliveries[0]
	b.markFailed(t, d, 1, 1)

	r := b.do(t, "GET", "/v1/messages/"+m.ID, nil)
	requireStatus(t, http.StatusOK, r)
	got := decodeJSON[messageJSON](t, r)
	require.JSONEq(t, `{"n":1}`, string(got.Payload))
	require.NotNil(t, got.PayloadExpired)
	require.False(t, *got.PayloadExpired)

	// What dropping the payload's partition leaves.
	_, err := b.db.Pool.Exec(ctx, `DELETE FROM message_payloads WHERE message_id = $1`, m.ID)
	require.NoError(t, err)
	r = b.do(t, "GET", "/v1/messages/"+m.ID, nil)
	requireStatus(t, http.StatusOK, r)
	require.Contains(t, string(r.Body), `"payload":null`)
	got = decodeJSON[messageJSON](t, r)
	require.NotNil(t, got.PayloadExpired)
	require.True(t, *got.PayloadExpired)
	require.Equal(t, m.ID, got.ID)
	require.Len(t, got.Deliveries, 1, "the metadata stays")

	r = b.do(t, "POST", "/v1/deliveries/"+d.ID+"/retry", nil)
	p := requireFieldError(t, http.StatusConflict, r, "payload")
	require.True(t, strings.HasSuffix(p.Type, "/conflict"), p.Type)
	r = b.do(t, "GET", "/v1/deliveries/"+d.ID, nil)
	requireStatus(t, http.StatusOK, r)
	require.Equal(t, "failed", decodeJSON[deliveryJSON](t, r).Status, "a refused retry changes nothing")

	// What dropping the message's partitions leaves.
	for _, q := range []string{`DELETE FROM deliveries WHERE message_id = $1`, `DELETE FROM messages WHERE id = $1`} {
		_, err = b.db.Pool.Exec(ctx, q, m.ID)
		require.NoError(t, err)
	}
	requireProblem(t, http.StatusNotFound, b.do(t, "GET", "/v1/messages/"+m.ID, nil))
	requireProblem(t, http.StatusNotFound, b.do(t, "GET", "/v1/deliveries/"+d.ID, nil))
}
