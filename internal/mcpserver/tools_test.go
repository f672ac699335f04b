package mcpserver

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	hookd "github.com/hookd/hookd/sdk/go"
	"github.com/hookd/hookd/sdk/go/api"
)

func TestSummarize(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	base := hookd.Delivery{ID: "dlv_1", MessageID: "msg_1", EndpointID: "ep_1", AttemptCount: 2, Series: 1}
	with := func(f func(*explanation)) explanation {
		ex := explanation{Delivery: base}
		f(&ex)
		return ex
	}
	for _, tc := range []struct {
		name string
		ex   explanation
		want []string
	}{
		{"failed with a last attempt", with(func(ex *explanation) {
			ex.Delivery.Status = api.DeliveryStatusFailed
			ex.Delivery.LastError = hookd.Ptr("connection refused")
			ex.Attempts = []hookd.Attempt{{AttemptNumber: 2, AttemptedAt: at, Classification: "failure", StatusCode: hookd.Ptr(503), ErrorClass: hookd.Ptr("http_5xx")}}
		}), []string{
			"Delivery dlv_1 of message msg_1 to endpoint ep_1 is failed after 2 attempt(s) (series 1).",
			"The last attempt (#2 at 2026-01-02T03:04:05Z) was classified failure, status 503, error http_5xx.",
			"Last error: connection refused",
			"Its retries are used up; retry_delivery (or recover_endpoint for many) queues it again.",
		}},
		{"waiting on an open breaker", with(func(ex *explanation) {
			ex.Delivery.Status = api.DeliveryStatusWaiting
			ex.Delivery.BreakerOpenUntil = &at
			ex.Breaker = &hookd.Breaker{State: api.BreakerStateOpen}
			ex.Breaker.Tripped = &struct {
				At                  time.Time `json:"at"`
				ConsecutiveFailures int       `json:"consecutive_failures"`
				FailureRate         float32   `json:"failure_rate"`
				Failures            int       `json:"failures"`
				Observations        int       `json:"observations"`
				Reason              string    `json:"reason"`
			}{Reason: "failure_rate"}
		}), []string{
			"Delivery dlv_1 of message msg_1 to endpoint ep_1 is waiting after 2 attempt(s) (series 1).",
			"It waits for the endpoint's open circuit breaker, until 2026-01-02T03:04:05Z.",
			"The endpoint's breaker is open (tripped: failure_rate).",
		}},
		{"held by a disabled endpoint", with(func(ex *explanation) {
			ex.Delivery.Status = api.DeliveryStatusHeld
			ex.Endpoint = &hookd.Endpoint{DisabledReason: hookd.Ptr("401 from the receiver")}
		}), []string{
			"Delivery dlv_1 of message msg_1 to endpoint ep_1 is held after 2 attempt(s) (series 1).",
			"It is held: the endpoint is disabled; enabling it releases the delivery.",
			"The endpoint is disabled: 401 from the receiver",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, summarize(tc.ex))
		})
	}
}

func TestLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want int }{{0, 50}, {-1, 50}, {10, 10}, {250, 250}, {1000, 250}} {
		require.Equal(t, tc.want, limit(tc.in), "limit(%d)", tc.in)
	}
}

func TestDocTitle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ body, want string }{
		{"# The command line\n\ntext", "The command line"},
		{"intro\n# Later title\n", "Later title"},
		{"no heading", "fallback"},
	} {
		require.Equal(t, tc.want, docTitle([]byte(tc.body), "fallback"))
	}
}
