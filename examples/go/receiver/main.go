// Command receiver receives hookd's webhooks, verifies each one's
// signature with hookd's Go client, and prints it.
//
//	LISTEN_ADDR=127.0.0.1:9000 WEBHOOK_SECRET=whsec_... go run ./receiver
package main

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"os"

	"github.com/hookd/hookd/sdk/go/webhook"
)

func main() {
	// The endpoint's whsec_ secret, or the whpk_ public key of an ed25519
	// endpoint.
	verifier, err := webhook.NewVerifier([]string{os.Getenv("WEBHOOK_SECRET")})
	if err != nil {
		log.Fatal(err)
	}

	http.HandleFunc("POST /hooks", func(w http.ResponseWriter, r *http.Request) {
		body, err := verifier.VerifyRequest(r)
		if err != nil {
			http.Error(w, "bad signature", http.StatusBadRequest)
			return
		}
		fmt.Printf("%s verified %s\n", r.Header.Get(webhook.HeaderID), body)
		w.WriteHeader(http.StatusNoContent)
	})

	addr := os.Getenv("LISTEN_ADDR")
	if addr == "" {
		addr = "127.0.0.1:9000"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening on http://%s/hooks\n", ln.Addr())
	log.Fatal(http.Serve(ln, nil))
}
