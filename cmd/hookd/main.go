// Command hookd is hookd's operator command line and MCP server: it
// drives a hookd API through the Go SDK with the token of hookd login (or
// HOOKD_API and HOOKD_TOKEN), as docs/cli.md and docs/mcp.md describe.
//
//	hookd login --api URL        store the API's address and a token
//	hookd endpoints|messages|deliveries|breakers|classes|... SUBCOMMAND
//	hookd tail | listen --forward URL | mcp [--allow-writes]
//
// Exit codes: 0 ok, 1 an API error or other failure, 2 a usage error.
package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/hookd/hookd/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(cli.ExitCode(err, os.Stderr))
}

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return cli.Run(ctx, args, cli.Env{Getenv: getenv, Stdin: stdin, Stdout: stdout, Stderr: stderr, Logger: logger})
}
