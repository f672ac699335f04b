package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBatchSendDeliversTheValidMessages: a batch of 100 messages with two
// invalid ones, through real api and dispatcher processes: the 98 valid
// ones are delivered once each, the two are answered with problems naming
// their index and field, and replaying the batch creates nothing.
func TestBatchSendDeliversTheValidMessages(t *testing.T) {
	t.Parallel()
	p := setupPipeline(t, nil)
	StartDispatcher(t, "dispatcher", p.db.URL, nil)
	p.api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": p.receiver.URL("/batch"), "secret": testSecret})

	msgs := make([]map[string]any, 100)
	for i := range msgs {
		msgs[i] = map[string]any{"tenant_id": "acme", "event_type": "invoice.paid", "payload": map[string]any{"n": i},
			"idempotency_key": fmt.Sprintf("k-%d", i)}
	}
	msgs[10]["event_type"] = ""
	msgs[57]["tenant_id"] = "not a tenant"
	type result struct {
		ID     string `json:"id"`
		Status int    `json:"status"`
		Errors []struct {
			Field string `json:"field"`
		} `json:"errors"`
	}
	var res struct {
		Results []result `json:"results"`
	}
	code, err := p.api.Do(context.Background(), "POST", "/v1/messages/batch", map[string]any{"messages": msgs}, &res)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, res.Results, 100)
	accepted := 0
	for i, r := range res.Results {
		switch i {
		case 10, 57:
			field := map[int]string{10: "messages[10].event_type", 57: "messages[57].tenant_id"}[i]
			require.Equal(t, http.StatusBadRequest, r.Status)
			require.Len(t, r.Errors, 1)
			require.Equal(t, field, r.Errors[0].Field)
		default:
			require.NotEmpty(t, r.ID, i)
			accepted++
		}
	}
	require.Equal(t, 98, accepted)

	Eventually(t, time.Minute, 100*time.Millisecond, "98 deliveries delivered", func() bool {
		return p.count(t, `SELECT count(*) FROM deliveries WHERE status = 'delivered'`) == 98
	})
	st := p.receiver.Stats("/batch")
	require.Equal(t, 98, st.DistinctDelivered)
	require.Zero(t, st.Duplicates)
	require.Zero(t, st.BadSignatures)

	var replay struct {
		Results []result `json:"results"`
	}
	code, err = p.api.Do(context.Background(), "POST", "/v1/messages/batch", map[string]any{"messages": msgs}, &replay)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	for i := range replay.Results {
		require.Equal(t, res.Results[i].ID, replay.Results[i].ID, i)
	}
	require.Equal(t, 98, p.count(t, `SELECT count(*) FROM messages`), "the replay creates nothing")
	require.Equal(t, 98, p.count(t, `SELECT count(*) FROM deliveries`))
	require.Equal(t, 98, p.count(t, `SELECT count(*) FROM river_job`))
}
