// Command devserver runs hookd for the client libraries' tests (sdk/go,
// sdk/typescript): a private PostgreSQL cluster (internal/pgcluster), the
// api and a dispatcher built from this checkout (with the race detector),
// a short retry schedule and private targets allowed, so a receiver on
// 127.0.0.1 gets webhooks within seconds. Once everything is ready it
// prints one JSON line,
//
//	{"api":"http://127.0.0.1:PORT","token":"hkd_...","database_url":"postgres://..."}
//
// with an admin token made by `api token create`, and it stops everything
// when its standard input closes (its parent exited or closed the pipe),
// or on SIGINT or SIGTERM. The processes' logs go to its standard error.
//
//	go run ./internal/devserver [--retry-schedule 0s,1s]
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "devserver:", err)
		os.Exit(1)
	}
}
