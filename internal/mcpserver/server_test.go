package mcpserver

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	hookd "github.com/hookd/hookd/sdk/go"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// session connects the SDK's client to a server of the repository's
// OpenAPI document over in-memory transports. The server's API is
// unreachable: these tests never get as far as calling it.
func session(t *testing.T, allowWrites bool) *mcp.ClientSession {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "api", "openapi.json"))
	require.NoError(t, err)
	client, err := hookd.New("http://127.0.0.1:1", "hkd_unused", hookd.WithRetryPolicy(hookd.RetryPolicy{MaxAttempts: 1}))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	srv, err := New(ctx, client, Options{OpenAPI: doc, AllowWrites: allowWrites, Docs: fstest.MapFS{"cli.md": {Data: []byte("# The command line\n")}}})
	require.NoError(t, err)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	require.NoError(t, err)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
	})
	return cs
}

// TestInputSchemasFromOpenAPI: every tool's arguments carry the API
// document's types, patterns and bounds, and no other argument is taken.
func TestInputSchemasFromOpenAPI(t *testing.T) {
	t.Parallel()
	cs := session(t, false)
	tools, err := cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	schemas := map[string]map[string]any{}
	for _, tool := range tools.Tools {
		b, err := json.Marshal(tool.InputSchema)
		require.NoError(t, err)
		var s map[string]any
		require.NoError(t, json.Unmarshal(b, &s))
		require.Equal(t, false, s["additionalProperties"], tool.Name)
		schemas[tool.Name] = s
	}
	prop := func(tool, name string) map[string]any {
		t.Helper()
		p, ok := schemas[tool]["properties"].(map[string]any)[name].(map[string]any)
		require.True(t, ok, "%s has no argument %s", tool, name)
		return p
	}
	for _, tc := range []struct {
		tool, arg, key string
		want           any
	}{
		{"explain_delivery", "delivery_id", "pattern", "^dlv_[0-7][0-9A-HJKMNP-TV-Z]{25}$"},
		{"search_deliveries", "limit", "maximum", 250.0},
		{"search_deliveries", "since", "format", "date-time"},
		{"search_deliveries", "tenant_id", "pattern", "^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"},
		{"search_messages", "event_type", "maxLength", 128.0},
		{"recover_endpoint", "endpoint_id", "pattern", "^ep_[0-7][0-9A-HJKMNP-TV-Z]{25}$"},
		{"reset_breaker", "reason", "maxLength", 500.0},
		{"list_open_breakers", "tenant_id", "description", "Only this tenant's breakers."},
	} {
		require.Equal(t, tc.want, prop(tc.tool, tc.arg)[tc.key], "%s.%s's %s", tc.tool, tc.arg, tc.key)
	}
	require.ElementsMatch(t, []any{"delivery_id"}, schemas["explain_delivery"]["required"])
	require.ElementsMatch(t, []any{"endpoint_id", "since"}, schemas["recover_endpoint"]["required"])
	require.ElementsMatch(t, []any{"tenant_id", "event_type"}, schemas["send_test_event"]["required"])
}

// TestToolsRefuseBeforeCalling: arguments the document refuses, and
// writes while they are off, are the tool's error, and the API is not
// called (it is unreachable here: a call would say so).
func TestToolsRefuseBeforeCalling(t *testing.T) {
	t.Parallel()
	cs := session(t, false)
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"explain_delivery", map[string]any{"delivery_id": "not-an-id"}, "delivery_id"},
		{"explain_delivery", map[string]any{}, "delivery_id"},
		{"search_deliveries", map[string]any{"limit": 1000}, "limit"},
		{"search_deliveries", map[string]any{"bogus": 1}, "bogus"},
		{"class_recommendation", map[string]any{"class": "Not A Class"}, "class"},
		{"retry_delivery", map[string]any{"delivery_id": "dlv_01AAAAAAAAAAAAAAAAAAAAAAAA"}, "--allow-writes"},
		{"send_test_event", map[string]any{"tenant_id": "acme", "event_type": "a.b"}, "--allow-writes"},
	} {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args})
		require.NoError(t, err, tc.tool)
		require.True(t, res.IsError, "%s %v", tc.tool, tc.args)
		text := res.Content[0].(*mcp.TextContent).Text
		require.Contains(t, text, tc.want, "%s %v", tc.tool, tc.args)
		require.NotContains(t, text, "127.0.0.1:1", "%s %v called the API", tc.tool, tc.args)
	}
}

// TestResources: the document and the docs given.
func TestResources(t *testing.T) {
	t.Parallel()
	cs := session(t, false)
	res, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "hookd://docs/cli.md"})
	require.NoError(t, err)
	require.Equal(t, "# The command line\n", res.Contents[0].Text)
	list, err := cs.ListResources(context.Background(), nil)
	require.NoError(t, err)
	var descriptions []string
	for _, r := range list.Resources {
		descriptions = append(descriptions, r.Description)
	}
	require.Contains(t, strings.Join(descriptions, "\n"), "hookd's documentation: The command line")
	doc, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "hookd://openapi.json"})
	require.NoError(t, err)
	require.True(t, json.Valid([]byte(doc.Contents[0].Text)))
}

// TestDocsListEveryTool: docs/mcp.md names every tool, with its
// arguments.
func TestDocsListEveryTool(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "mcp.md"))
	require.NoError(t, err)
	doc := string(b)
	cs := session(t, false)
	tools, err := cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	for _, tool := range tools.Tools {
		i := strings.Index(doc, "| `"+tool.Name+"` |")
		require.GreaterOrEqual(t, i, 0, "docs/mcp.md has no row of %s", tool.Name)
		row, _, _ := strings.Cut(doc[i:], "\n")
		b, err := json.Marshal(tool.InputSchema)
		require.NoError(t, err)
		var s struct {
			Properties map[string]any `json:"properties"`
		}
		require.NoError(t, json.Unmarshal(b, &s))
		for name := range s.Properties {
			require.Contains(t, row, "`"+name+"`", "docs/mcp.md's row of %s names its argument %s", tool.Name, name)
		}
	}
}
