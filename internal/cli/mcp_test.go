package cli_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	hookd "github.com/hookd/hookd/sdk/go"
	"github.com/hookd/hookd/sdk/go/api"
)

var readTools = []string{"search_messages", "search_deliveries", "explain_delivery", "list_open_breakers", "class_recommendation"}
var writeTools = []string{"retry_delivery", "recover_endpoint", "reset_breaker", "disable_endpoint", "send_test_event"}

// mcpSession starts `hookd mcp args...` with token and connects the Go
// SDK's MCP client to it over stdio; the session is closed at cleanup.
func mcpSession(t *testing.T, ctx context.Context, token string, args ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(hookdBin, append([]string{"mcp"}, args...)...)
	// A config directory of the test's: no login file but the environment.
	cmd.Env = []string{"HOOKD_API=" + server.API, "HOOKD_TOKEN=" + token, "XDG_CONFIG_HOME=" + t.TempDir(), "HOME=" + t.TempDir()}
	client := mcp.NewClient(&mcp.Implementation{Name: "hookd-cli-test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// call calls a tool and returns its result's text.
func call(t *testing.T, ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err, "%s: a tool's failure is its result, not a protocol error", name)
	var text strings.Builder
	for _, c := range res.Content {
		tc, ok := c.(*mcp.TextContent)
		require.True(t, ok, "%s answers text", name)
		text.WriteString(tc.Text)
	}
	require.NotContains(t, text.String(), "whsec_", "%s reveals no signing secret", name)
	return text.String(), res.IsError
}

// TestMCP drives hookd mcp with the Go SDK's MCP client over stdio: the
// tools listed, each read tool called, a write tool refused without
// --allow-writes and allowed with it, and a read-only token's write
// refused by the API with the server still answering after.
func TestMCP(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 3*time.Minute)
	admin := adminClient(t)
	tenant := newTenant(t)
	// An endpoint nobody answers: its delivery fails, which is what the
	// tools explain and retry.
	ep, err := admin.Endpoints.Create(ctx, hookd.CreateEndpointRequest{TenantID: tenant, URL: hookd.Ptr("http://127.0.0.1:1/hooks"), Secret: hookd.Ptr(newSecret())})
	require.NoError(t, err)
	sent, err := admin.Messages.Send(ctx, hookd.NewMessage{TenantID: tenant, EventType: "mcp.test", Payload: map[string]string{"k": "v"}})
	require.NoError(t, err)
	dlv := sent.Deliveries[0].ID
	require.Eventually(t, func() bool {
		d, err := admin.Deliveries.Get(ctx, dlv)
		require.NoError(t, err)
		return d.Status == api.DeliveryStatusFailed
	}, 2*time.Minute, 100*time.Millisecond)
	_, err = admin.Breakers.Isolate(ctx, ep.ID, "mcp test")
	require.NoError(t, err)
	readOnly, err := admin.Tokens.Create(ctx, hookd.CreateTokenRequest{Name: "mcp-" + tenant, TenantID: &tenant, ReadOnly: hookd.Ptr(true)})
	require.NoError(t, err)

	// In order: the second retries the delivery the first reads.
	t.Run("read tools, writes off", func(t *testing.T) {
		cs := mcpSession(t, ctx, server.Token)
		tools, err := cs.ListTools(ctx, nil)
		require.NoError(t, err)
		var names []string
		for _, tool := range tools.Tools {
			names = append(names, tool.Name)
			require.NotNil(t, tool.InputSchema, tool.Name)
		}
		require.ElementsMatch(t, append(append([]string{}, readTools...), writeTools...), names)

		for _, tc := range []struct {
			tool string
			args map[string]any
			want []string
		}{
			{"search_messages", map[string]any{"tenant_id": tenant}, []string{sent.ID, `"mcp.test"`}},
			{"search_deliveries", map[string]any{"tenant_id": tenant, "status": "failed"}, []string{dlv}},
			{"explain_delivery", map[string]any{"delivery_id": dlv}, []string{dlv, `"failed"`, "Its retries are used up", `"attempts"`, `"isolated"`}},
			{"list_open_breakers", map[string]any{"tenant_id": tenant}, []string{ep.ID, `"isolated"`}},
			{"class_recommendation", map[string]any{"class": "trickle"}, []string{`"class": "trickle"`}},
		} {
			text, isErr := call(t, ctx, cs, tc.tool, tc.args)
			require.False(t, isErr, "%s: %s", tc.tool, text)
			for _, w := range tc.want {
				require.Contains(t, text, w, tc.tool)
			}
		}
		// The API's refusal is the tool's error: an unknown delivery.
		text, isErr := call(t, ctx, cs, "explain_delivery", map[string]any{"delivery_id": "dlv_01AAAAAAAAAAAAAAAAAAAAAAAA"})
		require.True(t, isErr, text)
		require.Contains(t, text, `"status":404`)

		text, isErr = call(t, ctx, cs, "retry_delivery", map[string]any{"delivery_id": dlv})
		require.True(t, isErr, text)
		require.Contains(t, text, "--allow-writes")
		d, err := admin.Deliveries.Get(ctx, dlv)
		require.NoError(t, err)
		require.Equal(t, 1, d.Series, "refused: the delivery was not retried")

		// The resources: the API's document and the docs.
		res, err := cs.ListResources(ctx, nil)
		require.NoError(t, err)
		var uris []string
		for _, r := range res.Resources {
			uris = append(uris, r.URI)
		}
		require.Contains(t, uris, "hookd://openapi.json")
		require.Contains(t, uris, "hookd://docs/api.md")
		doc, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "hookd://openapi.json"})
		require.NoError(t, err)
		var openapi map[string]any
		require.NoError(t, json.Unmarshal([]byte(doc.Contents[0].Text), &openapi))
		require.Contains(t, openapi, "openapi")
	})

	t.Run("writes allowed, then a read-only token", func(t *testing.T) {
		cs := mcpSession(t, ctx, server.Token, "--allow-writes")
		text, isErr := call(t, ctx, cs, "retry_delivery", map[string]any{"delivery_id": dlv})
		require.False(t, isErr, text)
		require.Contains(t, text, dlv)
		d, err := admin.Deliveries.Get(ctx, dlv)
		require.NoError(t, err)
		require.Equal(t, 2, d.Series, "retried: a new series")

		ro := mcpSession(t, ctx, readOnly.Token, "--allow-writes")
		text, isErr = call(t, ctx, ro, "disable_endpoint", map[string]any{"endpoint_id": ep.ID})
		require.True(t, isErr, text)
		require.Contains(t, text, `"status":403`, "the API's problem, as it answered")
		got, err := admin.Endpoints.Get(ctx, ep.ID)
		require.NoError(t, err)
		require.Equal(t, "enabled", string(got.Status))
		// The server keeps running: the next call is answered.
		text, isErr = call(t, ctx, ro, "search_deliveries", map[string]any{"endpoint_id": ep.ID})
		require.False(t, isErr, text)
		require.Contains(t, text, dlv)
	})
}

// TestMCPHTTP serves hookd mcp over streamable HTTP and drives it with the
// Go SDK's streamable client; SIGINT stops it with exit 0.
func TestMCPHTTP(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 2*time.Minute)
	cmd := exec.Command(hookdBin, "mcp", "--http", "127.0.0.1:0")
	cmd.Env = []string{"HOOKD_API=" + server.API, "HOOKD_TOKEN=" + server.Token, "XDG_CONFIG_HOME=" + t.TempDir(), "HOME=" + t.TempDir()}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string, 10)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var endpoint string
	select {
	case line, ok := <-lines:
		require.True(t, ok, "hookd mcp --http exited")
		var found bool
		endpoint, found = strings.CutPrefix(line, "MCP server at ")
		require.True(t, found, line)
	case <-ctx.Done():
		t.Fatal("hookd mcp --http not ready")
	}

	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	client := mcp.NewClient(&mcp.Implementation{Name: "hookd-cli-test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: transport}}, nil)
	require.NoError(t, err)
	tools, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	require.Len(t, tools.Tools, len(readTools)+len(writeTools))
	text, isErr := call(t, ctx, cs, "list_open_breakers", map[string]any{})
	require.False(t, isErr, text)
	require.NoError(t, cs.Close())

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	for range lines {
	}
	require.NoError(t, cmd.Wait())
}
