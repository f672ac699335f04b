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

// TestTenantTokenLifecycle: against the real binaries, a tenant token made
// with `api token create --tenant` reaches its tenant's endpoints only
// (another tenant's answer 404, the admin-only routes 403); a token made
// with POST /v1/tokens and revoked with DELETE /v1/tokens/{id}, and one
// whose expiry comes due, are refused (401) within the 10s cache TTL.
func TestTenantTokenLifecycle(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	boot := StartAPI(t, db.URL, nil)
	ctx := context.Background()
	as := func(token string) *API { return &API{Proc: boot.Proc, URL: boot.URL, Token: token, HTTP: boot.HTTP} }
	status := func(a *API, method, path string, body any) int {
		t.Helper()
		code, err := a.Do(ctx, method, path, body, nil)
		require.NoError(t, err)
		return code
	}

	acme := boot.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": "https://acme.example/hook"})
	globex := boot.CreateEndpoint(t, map[string]any{"tenant_id": "globex", "url": "https://globex.example/hook"})
	tenant := as(strings.TrimSpace(apiCommand(t, db.URL, "token", "create", "--tenant", "globex", "--expires", "720h")))

	var list struct {
		Data []Endpoint `json:"data"`
	}
	code, err := tenant.Do(ctx, "GET", "/v1/endpoints", nil, &list)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, list.Data, 1)
	require.Equal(t, globex.ID, list.Data[0].ID)
	require.Equal(t, http.StatusOK, status(tenant, "GET", "/v1/endpoints/"+globex.ID, nil))
	require.Equal(t, http.StatusNotFound, status(tenant, "GET", "/v1/endpoints/"+acme.ID, nil))
	require.Equal(t, http.StatusForbidden, status(tenant, "POST", "/v1/messages", map[string]any{"tenant_id": "acme", "event_type": "a", "payload": 1}))
	require.Equal(t, http.StatusForbidden, status(tenant, "GET", "/v1/traffic-classes", nil))
	require.Equal(t, http.StatusForbidden, status(tenant, "POST", "/v1/tokens", map[string]any{"name": "escalate"}))

	// Made and revoked through the API.
	var made struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}
	code, err = boot.Do(ctx, "POST", "/v1/tokens", map[string]any{"name": "globex-api", "tenant_id": "globex", "read_only": true}, &made)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	ro := as(made.Token)
	require.Equal(t, http.StatusOK, status(ro, "GET", "/v1/endpoints/"+globex.ID, nil))
	require.Equal(t, http.StatusForbidden, status(ro, "POST", "/v1/endpoints/"+globex.ID+"/disable", nil))

	require.Equal(t, http.StatusNoContent, status(boot, "DELETE", "/v1/tokens/"+made.ID, nil))
	// The CLI's token expires (by the database clock) at the same moment.
	_, err = db.Pool.Exec(ctx, `UPDATE api_tokens SET created_at = now() - interval '1 hour', expires_at = now() WHERE tenant_id = 'globex' AND NOT read_only`)
	require.NoError(t, err)
	ended := time.Now()
	Eventually(t, 15*time.Second, 100*time.Millisecond, "the revoked and the expired token refused", func() bool {
		return status(ro, "GET", "/v1/endpoints", nil) == http.StatusUnauthorized &&
			status(tenant, "GET", "/v1/endpoints", nil) == http.StatusUnauthorized
	})
	require.Less(t, time.Since(ended), 12*time.Second, "refused within the 10s cache TTL")
	require.Equal(t, http.StatusOK, status(boot, "GET", "/v1/endpoints", nil), "the bootstrap token still works")
}
