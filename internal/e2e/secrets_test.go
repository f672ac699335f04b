package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/secretbox"
	"github.com/hookd/hookd/internal/store/storetest"
)

func secretKey(b byte) string {
	return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, secretbox.KeyBytes))
}

// TestSecretKeyRotationWhileDelivering: endpoints (secrets and header
// values) sealed under key A; the processes restart with B as the key and
// A as previous; messages flow while `api secrets rotate-key` reseals in
// small batches; then a dispatcher with B alone still signs. No delivery
// is lost, the receiver verifies every signature and sees each endpoint's
// header value on every delivery.
func TestSecretKeyRotationWhileDelivering(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	keyA, keyB := secretKey(0xa1), secretKey(0xb2)
	apiKey := func(path string) string { return "rcv-key-for" + path }
	var withHeader, withoutHeader atomic.Int64
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: func(r *deliverytest.Request) deliverytest.Response {
		if r.Header.Get("X-Api-Key") == apiKey(r.Path) {
			withHeader.Add(1)
		} else {
			withoutHeader.Add(1)
		}
		return deliverytest.Response{Status: http.StatusOK}
	}})

	first := StartAPI(t, db.URL, map[string]string{"SECRET_KEY": keyA})
	const receivers, idle = 3, 60
	for i := range receivers {
		path := fmt.Sprintf("/r%d", i)
		first.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL(path), "secret": testSecret,
			"headers": map[string]string{"X-Api-Key": apiKey(path)}})
	}
	// Endpoints of another tenant, so the rotation has batches to go
	// through while acme's deliveries flow.
	for i := range idle {
		path := fmt.Sprintf("/idle%d", i)
		first.CreateEndpoint(t, map[string]any{"tenant_id": "bulk", "url": rc.URL(path), "secret": testSecret,
			"headers": map[string]string{"X-Api-Key": apiKey(path)}})
	}
	var sealedA int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM endpoints e, jsonb_each_text(e.headers) h WHERE h.value LIKE $1`,
		secretbox.Prefix+secretbox.KeyID(bytes.Repeat([]byte{0xa1}, 32))+".%").Scan(&sealedA))
	require.Equal(t, receivers+idle, sealedA, "every header value sealed under key A")
	require.NoError(t, first.Stop(30*time.Second))

	both := map[string]string{"SECRET_KEY": keyB, "SECRET_KEY_PREVIOUS": keyA}
	api := StartAPI(t, db.URL, both)
	StartDispatcher(t, "dispatcher", db.URL, both)

	apiBin, _ := Binaries(t)
	rotated := make(chan error, 1)
	var rotateOut []byte
	go func() {
		cmd := exec.Command(apiBin, "secrets", "rotate-key", "--batch", "4")
		cmd.Env = []string{"DATABASE_URL=" + db.URL, "SECRET_KEY=" + keyB, "SECRET_KEY_PREVIOUS=" + keyA}
		out, err := cmd.CombinedOutput()
		rotateOut = out
		rotated <- err
	}()
	sent := 0
	for done := false; !done || sent < 20; sent++ {
		select {
		case err := <-rotated:
			require.NoError(t, err, "rotate-key: %s", rotateOut)
			done = true
		default:
		}
		api.SendMessage(t, "acme", "order.created", map[string]any{"n": sent})
	}
	require.Regexp(t, regexp.MustCompile(`resealed the secrets of 63 endpoints under key id `+secretbox.KeyID(bytes.Repeat([]byte{0xb2}, 32))), string(rotateOut))

	Eventually(t, 2*time.Minute, 100*time.Millisecond, "every delivery delivered", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE status = 'delivered'`).Scan(&n))
		return n == sent*receivers
	})
	for i := range receivers {
		st := rc.Stats(fmt.Sprintf("/r%d", i))
		require.Equal(t, sent, st.DistinctDelivered)
		require.Zero(t, st.BadSignatures, "every signature verifies")
	}
	require.Zero(t, withoutHeader.Load(), "every delivery carried its endpoint's header value")
	require.GreaterOrEqual(t, withHeader.Load(), int64(sent*receivers))
	var stale, staleHeaders int
	keyBPattern := secretbox.Prefix + secretbox.KeyID(bytes.Repeat([]byte{0xb2}, 32)) + ".%"
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM endpoints WHERE secret NOT LIKE $1`, keyBPattern).Scan(&stale))
	require.Zero(t, stale, "every secret sealed under the new key")
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM endpoints e, jsonb_each_text(e.headers) h WHERE h.value NOT LIKE $1`,
		keyBPattern).Scan(&staleHeaders))
	require.Zero(t, staleHeaders, "every header value sealed under the new key")

	// The previous key is no longer needed.
	StartDispatcher(t, "dispatcher-b", db.URL, map[string]string{"SECRET_KEY": keyB})
	api.SendMessage(t, "acme", "order.created", map[string]any{"n": "last"})
	Eventually(t, time.Minute, 100*time.Millisecond, "the last message delivered", func() bool {
		return rc.Stats("/r0").DistinctDelivered == sent+1
	})
	for i := range receivers {
		require.Zero(t, rc.Stats(fmt.Sprintf("/r%d", i)).BadSignatures)
	}
	require.Zero(t, withoutHeader.Load(), "the dispatcher with the new key alone opens the header values")
}

// TestWrongSecretKeyFailsStartup: with secrets sealed under one key, an api
// or dispatcher given another key, or none, refuses to start and says why.
func TestWrongSecretKeyFailsStartup(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: func(*deliverytest.Request) deliverytest.Response {
		return deliverytest.Response{Status: http.StatusOK}
	}})
	first := StartAPI(t, db.URL, map[string]string{"SECRET_KEY": secretKey(1)})
	first.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/a"), "secret": testSecret})
	require.NoError(t, first.Stop(30*time.Second))

	apiBin, dispBin := Binaries(t)
	tests := []struct {
		name, bin, key, want string
	}{
		{"api wrong key", apiBin, secretKey(2), "no --secret-key-previous matches"},
		{"api no key", apiBin, "", "no --secret-key (SECRET_KEY) is set"},
		{"dispatcher wrong key", dispBin, secretKey(2), "no --secret-key-previous matches"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Start(t, tt.name, tt.bin, map[string]string{"DATABASE_URL": db.URL, "SECRET_KEY": tt.key, "NO_MIGRATE": "true",
				"LISTEN_ADDR": "127.0.0.1:0", "METRICS_ADDR": "127.0.0.1:0"}, nil)
			Eventually(t, time.Minute, 50*time.Millisecond, "the process exits", p.Exited)
			require.Contains(t, p.Output(), "stored endpoint secrets cannot be opened with the configured secret key")
			require.Contains(t, p.Output(), tt.want)
		})
	}
}
