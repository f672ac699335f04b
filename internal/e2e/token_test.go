package e2e

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store/storetest"
)

// apiCommand runs the api binary with args against databaseURL and returns
// its stdout, failing the test unless it exits 0.
func apiCommand(t *testing.T, databaseURL string, args ...string) string {
	t.Helper()
	bin, _ := Binaries(t)
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "DATABASE_URL=" + databaseURL}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), "api %s: %s", strings.Join(args, " "), errOut.String())
	return out.String()
}

// TestStoredTokenLifecycle: a token made with `api token create` is
// accepted by a running api, is named in what it does, and is refused
// within the cache TTL (10s) of `api token revoke`; the bootstrap token
// keeps working throughout.
func TestStoredTokenLifecycle(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	boot := StartAPI(t, db.URL, nil)
	token := strings.TrimSpace(apiCommand(t, db.URL, "token", "create", "--name", "ops-e2e"))
	require.True(t, strings.HasPrefix(token, "hkd_"))
	ops := &API{Proc: boot.Proc, URL: boot.URL, Token: token, HTTP: boot.HTTP}
	ctx := context.Background()

	e := ops.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": "https://acme.example/hook"})
	code, err := ops.Do(ctx, "POST", "/v1/endpoints/"+e.ID+"/breaker/isolate", map[string]any{"reason": "e2e"}, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	var actor string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT actor FROM breaker_transitions WHERE endpoint_id = $1`, e.ID).Scan(&actor))
	require.Equal(t, "ops-e2e", actor)

	list := apiCommand(t, db.URL, "token", "list")
	require.Contains(t, list, "ops-e2e")
	require.NotContains(t, list, token)

	apiCommand(t, db.URL, "token", "revoke", "--name", "ops-e2e")
	revoked := time.Now()
	Eventually(t, 15*time.Second, 100*time.Millisecond, "the revoked token refused", func() bool {
		code, err := ops.Do(ctx, "GET", "/v1/endpoints", nil, nil)
		require.NoError(t, err)
		return code == http.StatusUnauthorized
	})
	require.Less(t, time.Since(revoked), 12*time.Second, "refused within the 10s cache TTL")

	code, err = boot.Do(ctx, "GET", "/v1/endpoints", nil, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "the bootstrap token still works")
}
