// Command receiver is a webhook receiver for trying hookd by hand: it
// answers every POST with 200 and prints the webhook's id, path and body.
// Given --secret (the endpoint's whsec_ signing secret) it verifies each
// Standard Webhooks signature and answers a bad one with 400.
//
//	go run ./internal/delivery/deliverytest/cmd/receiver [--addr 127.0.0.1:9000] [--secret whsec_...]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/delivery/deliverytest"
)

// maxBody caps a request body: the largest payload the api accepts
// (--max-payload-bytes at most).
const maxBody = 64 << 20

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "address to listen on")
	secretText := flag.String("secret", "", "the endpoint's signing secret (whsec_...); when set, badly signed webhooks get 400")
	flag.Parse()

	var secret *delivery.Secret
	if *secretText != "" {
		s, err := delivery.ParseSecret(*secretText)
		if err != nil {
			fmt.Fprintln(os.Stderr, "receiver: --secret:", err)
			os.Exit(2)
		}
		secret = &s
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, *addr, newHandler(os.Stdout, secret, time.Now)); err != nil {
		fmt.Fprintln(os.Stderr, "receiver:", err)
		os.Exit(1)
	}
}

func serve(ctx context.Context, addr string, h http.Handler) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	fmt.Printf("receiver listening on http://%s\n", addr)
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// newHandler prints each webhook to out, verifying its signature against
// secret when secret is not nil.
func newHandler(out io.Writer, secret *delivery.Secret, now func() time.Time) http.Handler {
	var mu sync.Mutex
	printf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format, args...)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "webhooks are POSTed", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			http.Error(w, "read body", http.StatusBadRequest)
			return
		}
		id := r.Header.Get("webhook-id")
		check := "not verified"
		if secret != nil {
			unix, _ := strconv.ParseInt(r.Header.Get("webhook-timestamp"), 10, 64)
			err := delivery.Verify(r.Header.Get("webhook-signature"), id, time.Unix(unix, 0), body, *secret, now(), deliverytest.SignatureTolerance)
			if err != nil {
				printf("%s %s REFUSED (%v)\n", id, r.URL.Path, err)
				http.Error(w, "bad signature", http.StatusBadRequest)
				return
			}
			check = "signature ok"
		}
		printf("%s %s %s %s\n", id, r.URL.Path, check, body)
		_, _ = io.WriteString(w, "ok\n")
	})
}
