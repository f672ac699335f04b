package cli_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	hookd "github.com/hookd/hookd/sdk/go"
	"github.com/hookd/hookd/sdk/go/webhook"
)

// TestListen runs hookd listen as a process: it forwards 100 webhooks of
// a tenant, headers and signature included, to a local receiver that
// verifies each with the SDK's verifier, prints each, and deletes its
// temporary endpoint on SIGINT.
func TestListen(t *testing.T) {
	t.Parallel()
	const n = 100
	ctx := testContext(t, 4*time.Minute)
	admin := adminClient(t)
	tenant := newTenant(t)
	secret := newSecret()

	v, err := webhook.NewVerifier([]string{secret})
	require.NoError(t, err)
	var mu sync.Mutex
	verified := map[string]bool{}
	got := make(chan string, 2*n)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := v.VerifyRequest(r); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		id := r.Header.Get(webhook.HeaderID)
		mu.Lock()
		first := !verified[id]
		verified[id] = true
		mu.Unlock()
		if first {
			got <- id
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(recv.Close)

	cmd := exec.Command(hookdBin, "listen", "--tenant", tenant, "--forward", recv.URL+"/hooks", "--secret", secret, "--json")
	cmd.Env = []string{"HOOKD_API=" + server.API, "HOOKD_TOKEN=" + server.Token, "XDG_CONFIG_HOME=" + t.TempDir(), "HOME=" + t.TempDir()}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	errLines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			errLines <- sc.Text()
		}
		close(errLines)
	}()
	printed := make(chan map[string]any, 2*n)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil {
				printed <- rec
			}
		}
		close(printed)
	}()

	// The start line names the temporary endpoint.
	epRE := regexp.MustCompile(`temporary endpoint (ep_\w+)`)
	var epID string
	for epID == "" {
		select {
		case line, ok := <-errLines:
			require.True(t, ok, "hookd listen exited before it was ready")
			if m := epRE.FindStringSubmatch(line); m != nil {
				epID = m[1]
			}
		case <-ctx.Done():
			t.Fatal("hookd listen not ready")
		}
	}
	ep, err := admin.Endpoints.Get(ctx, epID)
	require.NoError(t, err)
	require.Equal(t, tenant, ep.TenantID)

	sent := map[string]bool{}
	for i := range n {
		m, err := admin.Messages.Send(ctx, hookd.NewMessage{TenantID: tenant, EventType: "listen.test", Payload: map[string]int{"i": i}})
		require.NoError(t, err)
		sent[m.ID] = true
	}
	for range n {
		select {
		case id := <-got:
			require.True(t, sent[id], "webhook %s is one the test sent", id)
		case <-ctx.Done():
			t.Fatalf("%d of %d webhooks verified before the timeout", len(verified), n)
		}
	}
	// Each one printed, with the receiver's answer.
	seen := map[string]bool{}
	for len(seen) < n {
		select {
		case rec, ok := <-printed:
			require.True(t, ok, "hookd listen's output ended early")
			require.EqualValues(t, http.StatusNoContent, rec["status"], rec)
			seen[rec["webhook_id"].(string)] = true
		case <-ctx.Done():
			t.Fatalf("%d of %d webhooks printed before the timeout", len(seen), n)
		}
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	var rest []string
	for line := range errLines {
		rest = append(rest, line)
	}
	require.NoError(t, cmd.Wait(), "exit status after SIGINT; stderr: %v", rest)
	require.Contains(t, rest, "Deleted the temporary endpoint "+epID+".")
	for e, err := range admin.Endpoints.All(ctx, &hookd.EndpointFilter{TenantID: &tenant}) {
		require.NoError(t, err)
		t.Fatalf("endpoint %s left behind", e.ID)
	}
}
