// Command api serves hookd's REST API: endpoints are registered and
// messages accepted here, and each accepted message's deliveries are queued
// in the same transaction.
//
//	api [serve] [flags]   serve the API (migrating first unless --no-migrate)
//	api migrate [flags]   apply migrations and exit
//	api token create|list|revoke [flags]   manage stored API tokens
package main

// The tables of docs/configuration.md and docs/observability.md that
// mirror this binary's flags and series.
//go:generate go test -count=1 -run=TestGeneratedDocs . -args -update-docs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/hookd/hookd/internal/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// exitCode maps run's error to the exit status, printing it to stderr: 0
// for success or --help, 2 for a usage error, 1 for any other failure.
func exitCode(err error, stderr io.Writer) int {
	var ue *config.UsageError
	switch {
	case err == nil, errors.Is(err, config.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, "api:", err)
		return 2
	default:
		fmt.Fprintln(stderr, "api:", err)
		return 1
	}
}
