// Package mcpserver is hookd's MCP server: tools that search messages and
// deliveries, explain a failed delivery, list open breakers and show a
// class's tuning recommendation, write tools (retry, recover, reset a
// breaker, disable an endpoint, send a test event) that stay off unless
// the operator allows them, and resources for the API document and the
// docs. It calls the API through the Go SDK with one token, so the
// token's scope decides what it may do, and no tool reveals a signing
// secret (none calls the routes that read one).
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	hookd "github.com/hookd/hookd/sdk/go"
)

// Options configures a server.
type Options struct {
	// OpenAPI is the API's OpenAPI document, which the tools' input
	// schemas come from and the hookd://openapi.json resource serves (nil:
	// New reads it from the API, GET /openapi.json).
	OpenAPI []byte
	// AllowWrites turns the write tools on; without it they answer an
	// error and change nothing.
	AllowWrites bool
	// Docs holds the Markdown files served as hookd://docs/NAME resources
	// (nil: none).
	Docs fs.FS
	// Version is the server's version as it introduces itself.
	Version string
	// Logger receives the server's diagnostics.
	Logger *slog.Logger
}

// New returns the MCP server of the API client calls.
func New(ctx context.Context, client *hookd.Client, opts Options) (*mcp.Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "hookd", Title: "hookd webhook dispatch", Version: opts.Version},
		&mcp.ServerOptions{
			Logger: opts.Logger,
			Instructions: "Tools of a hookd webhook dispatch service: search messages and deliveries, explain why a delivery failed, " +
				"list open circuit breakers, read a traffic class's tuning recommendation. Write tools change the service and work only " +
				"when the server was started with --allow-writes and its token allows them. Resources hold the API's OpenAPI document and the docs.",
		})
	if opts.OpenAPI == nil {
		b, err := readOpenAPI(ctx, client)
		if err != nil {
			return nil, err
		}
		opts.OpenAPI = b
	}
	doc, err := parseDocument(opts.OpenAPI)
	if err != nil {
		return nil, err
	}
	t := &tools{client: client, allowWrites: opts.AllowWrites, doc: doc}
	t.addRead(s)
	t.addWrite(s)
	if t.err != nil {
		return nil, fmt.Errorf("tool schemas: %w", t.err)
	}
	if err := addResources(s, opts.OpenAPI, opts.Docs); err != nil {
		return nil, err
	}
	return s, nil
}

// readOpenAPI reads the API's OpenAPI document, as any client may.
func readOpenAPI(ctx context.Context, client *hookd.Client) ([]byte, error) {
	r, err := client.API().GetOpenAPIWithResponse(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the API's OpenAPI document: %w", err)
	}
	if r.StatusCode() != http.StatusOK {
		return nil, fmt.Errorf("read the API's OpenAPI document: %s", r.Status())
	}
	return r.Body, nil
}

// ServeStdio serves one session over in and out until in closes or ctx
// ends.
func ServeStdio(ctx context.Context, s *mcp.Server, in io.Reader, out io.Writer) error {
	err := s.Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(in), Writer: nopWriteCloser{out}})
	if err != nil && ctx.Err() != nil {
		return nil // interrupted: a normal end
	}
	return err
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// Handler is the streamable HTTP transport of s.
func Handler(s *mcp.Server) http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
}

// The resources: the OpenAPI document as the API serves it, and each doc.
const (
	openAPIURI = "hookd://openapi.json"
	docsPrefix = "hookd://docs/"
)

func addResources(s *mcp.Server, openAPI []byte, docs fs.FS) error {
	s.AddResource(&mcp.Resource{
		URI: openAPIURI, Name: "openapi.json", MIMEType: "application/json",
		Description: "The hookd API's OpenAPI 3.1 document, as the API serves it at /openapi.json.",
	}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: openAPIURI, MIMEType: "application/json", Text: string(openAPI)}}}, nil
	})
	if docs == nil {
		return nil
	}
	names, err := fs.Glob(docs, "*.md")
	if err != nil {
		return fmt.Errorf("list docs: %w", err)
	}
	for _, name := range names {
		uri := docsPrefix + name
		body, err := fs.ReadFile(docs, name)
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		s.AddResource(&mcp.Resource{
			URI: uri, Name: name, MIMEType: "text/markdown",
			Description: "hookd's documentation: " + docTitle(body, strings.TrimSuffix(path.Base(name), ".md")),
		}, func(_ context.Context, _ *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "text/markdown", Text: string(body)}}}, nil
		})
	}
	return nil
}

// docTitle is a doc's first heading, or fallback.
func docTitle(body []byte, fallback string) string {
	for line := range strings.Lines(string(body)) {
		if t, ok := strings.CutPrefix(line, "# "); ok {
			return strings.TrimSpace(t)
		}
	}
	return fallback
}

// answer is a tool's result: the API's answer as JSON text.
func answer(v any) (*mcp.CallToolResult, any, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, nil, fmt.Errorf("encode the answer: %w", err)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil, nil
}

// failure is a tool's error result: the API's problem as it answered it
// (application/problem+json), or the error's text. The session goes on.
func failure(err error) (*mcp.CallToolResult, any, error) {
	text := err.Error()
	var herr *hookd.Error
	if errors.As(err, &herr) && len(herr.Body) > 0 {
		text = string(herr.Body)
	}
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
}
