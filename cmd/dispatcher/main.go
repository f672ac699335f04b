// Command dispatcher delivers queued webhooks: a River client whose deliver
// worker signs and POSTs each message to its endpoint, logs every attempt
// and retries on a schedule, behind a per-endpoint circuit breaker shared
// through Postgres.
//
//	dispatcher [run] [flags]      deliver (migrating first unless --no-migrate)
//	dispatcher migrate [flags]    apply migrations and exit
//	dispatcher replay [flags]     replay outcomes through the breaker (docs/tuning.md)
//	dispatcher trace synth [...]  write a synthetic outcome trace
package main

// The tables of docs/configuration.md and docs/observability.md that
// mirror this binary's flags and series.
//go:generate go test -count=1 -run=TestGeneratedDocs . -args -update-docs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/hookd/hookd/internal/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err))
}

func exitCode(err error) int {
	var ue *config.UsageError
	switch {
	case err == nil, errors.Is(err, config.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintln(os.Stderr, "dispatcher:", err)
		return 2
	default:
		fmt.Fprintln(os.Stderr, "dispatcher:", err)
		return 1
	}
}
