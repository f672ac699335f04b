package destination_test

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/destination"
)

// No SQS server runs offline here: goaws v0.4.5 (the newest the module
// proxy serves) speaks SQS's query protocol only, and aws-sdk-go-v2's
// SQS client speaks its JSON protocol. This test therefore stands in
// for SQS's answers with fixed replies: it checks what the SDK sends
// (attributes, FIFO group and dedup id) and how each answer is
// classified, not a queue.
func TestSQSRequestsAndClassification(t *testing.T) {
	t.Parallel()
	type reply struct {
		status int
		body   string
	}
	var mu sync.Mutex
	var next reply
	var got map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		got = map[string]any{"target": r.Header.Get("X-Amz-Target"), "auth": r.Header.Get("Authorization")}
		var body map[string]any
		_ = json.Unmarshal(b, &body)
		got["body"] = body
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(next.status)
		out := next.body
		if next.status == http.StatusOK {
			// The SDK checks the body's MD5, as SQS computes it.
			sum := md5.Sum([]byte(body["MessageBody"].(string)))
			out = strings.Replace(out, "MD5", hex.EncodeToString(sum[:]), 1)
		}
		_, _ = io.WriteString(w, out)
	}))
	t.Cleanup(srv.Close)
	set := func(r reply) { mu.Lock(); next = r; mu.Unlock() }

	s := newSigner(t)
	pool := newPool(t, destination.Deps{})
	cfg := &destination.SQSConfig{QueueURL: srv.URL + "/000000000000/hooks.fifo", Region: "us-east-1", AccessKeyID: "AKIDTEST", SecretAccessKey: "secret"}
	require.NoError(t, cfg.Validate())
	m := s.message("sqs", 0)

	set(reply{200, `{"MessageId":"5fea7756-0ea4-451a-a703-a558b933e274","MD5OfMessageBody":"MD5"}`})
	r := publish(pool, cfg, m)
	require.Equal(t, destination.Confirmed, r.Outcome, "%v", r.Err)
	require.Equal(t, "5fea7756-0ea4-451a-a703-a558b933e274", r.Ref)
	mu.Lock()
	require.Equal(t, "AmazonSQS.SendMessage", got["target"])
	require.True(t, strings.HasPrefix(got["auth"].(string), "AWS4-HMAC-SHA256 Credential=AKIDTEST/"), "signed with the destination's key")
	body := got["body"].(map[string]any)
	require.Equal(t, string(m.Body), body["MessageBody"])
	require.Equal(t, m.EndpointID, body["MessageGroupId"], "a FIFO queue's group is the endpoint")
	require.Equal(t, m.DeliveryID, body["MessageDeduplicationId"], "its dedup id the delivery")
	attrs := body["MessageAttributes"].(map[string]any)
	headers := map[string]string{}
	for k, v := range attrs {
		headers[k] = v.(map[string]any)["StringValue"].(string)
	}
	mu.Unlock()
	require.Equal(t, m.ID, s.verify(t, headers, m.Body))

	set(reply{400, `{"__type":"com.amazon.coral.service#InvalidClientTokenId","message":"The security token included in the request is invalid."}`})
	require.Equal(t, destination.AuthRefused, publish(pool, cfg, m).Outcome)
	set(reply{403, `{"__type":"com.amazon.coral.service#AccessDeniedException","message":"denied"}`})
	require.Equal(t, destination.AuthRefused, publish(pool, cfg, m).Outcome)
	set(reply{400, `{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"no queue"}`})
	requireRefused(t, publish(pool, cfg, m))

	closed := &destination.SQSConfig{QueueURL: "http://" + closedAddr(t) + "/000000000000/hooks", Region: "us-east-1", AccessKeyID: "A", SecretAccessKey: "S"}
	requireFailedWithin(t, publishWithin(pool, closed, m), destination.Unreachable)
	silent := &destination.SQSConfig{QueueURL: "http://" + silentAddr(t) + "/000000000000/hooks", Region: "us-east-1", AccessKeyID: "A", SecretAccessKey: "S"}
	requireFailedWithin(t, publishWithin(pool, silent, m), destination.Timeout)
}
