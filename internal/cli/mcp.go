package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/hookd/hookd/docs"
	"github.com/hookd/hookd/internal/mcpserver"
)

func (a *app) mcpCommand() *cobra.Command {
	var httpAddr string
	var allowWrites bool
	c := &cobra.Command{
		Use:   "mcp",
		Short: "Serve hookd's MCP tools to an agent over stdio (or streamable HTTP with --http)",
		Long: `mcp serves an MCP server with the logged-in token: read tools (search
messages and deliveries, explain a delivery, list open breakers, show a
class's recommendation), write tools (retry, recover, reset a breaker,
disable an endpoint, send a test event) that refuse unless --allow-writes
is given, and resources for the API document and the docs. Over stdio by
default; --http ADDR serves the streamable HTTP transport at ADDR/mcp
instead (anyone who reaches ADDR acts with the token: keep it on loopback).`,
		Example: "  hookd mcp\n  hookd mcp --allow-writes\n  hookd mcp --http 127.0.0.1:8765",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := a.api()
			if err != nil {
				return err
			}
			srv, err := mcpserver.New(cmd.Context(), client, mcpserver.Options{AllowWrites: allowWrites, Docs: docs.Files, Logger: a.env.Logger})
			if err != nil {
				return err
			}
			if httpAddr == "" {
				return mcpserver.ServeStdio(cmd.Context(), srv, a.env.Stdin, a.env.Stdout)
			}
			return a.serveMCPHTTP(cmd.Context(), httpAddr, mcpserver.Handler(srv))
		},
	}
	c.Flags().StringVar(&httpAddr, "http", "", "serve streamable HTTP at ADDR (such as 127.0.0.1:8765) instead of stdio")
	c.Flags().BoolVar(&allowWrites, "allow-writes", false, "turn the write tools on (the token must allow them too)")
	return c
}

func (a *app) serveMCPHTTP(ctx context.Context, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(a.env.Stderr, "MCP server at http://%s/mcp\n", ln.Addr())
	select {
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
		<-served
		return nil
	case err := <-served:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("MCP server: %w", err)
	}
}
