package cli_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/hookd/hookd/internal/cli"
	hookd "github.com/hookd/hookd/sdk/go"
	"github.com/hookd/hookd/sdk/go/api"
)

// TestTail follows 1,000 deliveries, some retried once and some failing
// for good, and requires each one's final status printed exactly once,
// none missed, and nothing printed twice while tail keeps polling after.
func TestTail(t *testing.T) {
	t.Parallel()
	const n = 1000
	ctx := testContext(t, 5*time.Minute)
	admin := adminClient(t)
	tenant := newTenant(t)

	// Message i's first attempt fails when i%5 == 0 (the retry lands), and
	// every attempt fails when i%50 == 0 (the delivery fails).
	var mu sync.Mutex
	attempts := map[string]int{}
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ I int }
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		mu.Lock()
		attempts[r.Header.Get("Webhook-Id")]++
		first := attempts[r.Header.Get("Webhook-Id")] == 1
		mu.Unlock()
		switch {
		case body.I%50 == 0, body.I%5 == 0 && first:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	t.Cleanup(recv.Close)
	_, err := admin.Endpoints.Create(ctx, hookd.CreateEndpointRequest{TenantID: tenant, URL: hookd.Ptr(recv.URL + "/hooks")})
	require.NoError(t, err)

	since := time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)
	out := newLineWriter(100 * n)
	tailCtx, stopTail := context.WithCancel(ctx)
	defer stopTail()
	tailDone := make(chan error, 1)
	go func() {
		tailDone <- cli.Run(tailCtx, []string{"tail", "--tenant", tenant, "--since", since, "--interval", "200ms", "--json"}, cli.Env{
			Getenv: func(k string) string {
				return map[string]string{"HOOKD_API": server.API, "HOOKD_TOKEN": server.Token}[k]
			},
			Stdin: strings.NewReader(""), Stdout: out, Stderr: io.Discard,
			ConfigDir: func() (string, error) { return t.TempDir(), nil },
		})
	}()

	// The expected final status of each delivery, as the sends answer.
	want := map[string]api.DeliveryStatus{}
	var wantMu sync.Mutex
	var g errgroup.Group
	g.SetLimit(8)
	for i := range n {
		g.Go(func() error {
			m, err := admin.Messages.Send(ctx, hookd.NewMessage{TenantID: tenant, EventType: "tail.test", Payload: map[string]int{"i": i}})
			if err != nil {
				return err
			}
			st := api.DeliveryStatusDelivered
			if i%50 == 0 {
				st = api.DeliveryStatusFailed
			}
			wantMu.Lock()
			want[m.Deliveries[0].ID] = st
			wantMu.Unlock()
			return nil
		})
	}
	require.NoError(t, g.Wait())
	require.Len(t, want, n)

	finals := map[string][]api.DeliveryStatus{}
	retried := 0
	read := func(until func() bool) {
		t.Helper()
		for !until() {
			select {
			case line := <-out.lines:
				var d hookd.Delivery
				require.NoError(t, json.Unmarshal([]byte(line), &d), line)
				if d.Status == api.DeliveryStatusDelivered || d.Status == api.DeliveryStatusFailed || d.Status == api.DeliveryStatusExpired {
					finals[d.ID] = append(finals[d.ID], d.Status)
					if d.AttemptCount > 1 {
						retried++
					}
				}
			case err := <-tailDone:
				t.Fatalf("tail ended early: %v", err)
			case <-ctx.Done():
				t.Fatalf("%d of %d deliveries' final statuses printed before the timeout", len(finals), n)
			}
		}
	}
	read(func() bool { return len(finals) >= n })

	// One more delivery after them all: once tail prints it, it has polled
	// the window holding the others again, and printed none of them twice.
	marker, err := admin.Messages.Send(ctx, hookd.NewMessage{TenantID: tenant, EventType: "tail.test", Payload: map[string]int{"i": 1}})
	require.NoError(t, err)
	markerID := marker.Deliveries[0].ID
	read(func() bool { return len(finals[markerID]) > 0 })
	stopTail()
	require.NoError(t, <-tailDone)

	delete(finals, markerID)
	require.Len(t, finals, n, "only the test's deliveries")
	for id, st := range want {
		require.Equal(t, []api.DeliveryStatus{st}, finals[id], "delivery %s: its final status, once", id)
	}
	require.GreaterOrEqual(t, retried, n/5, "the retried deliveries' final lines say so")
}
