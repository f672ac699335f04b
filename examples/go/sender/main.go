// Command sender registers an endpoint for tenant acme and sends it one
// message with hookd's Go client.
//
//	HOOKD_API=http://127.0.0.1:8080 HOOKD_TOKEN=... RECEIVER_URL=http://127.0.0.1:9000/hooks \
//	WEBHOOK_SECRET=whsec_... go run ./sender
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	hookd "github.com/hookd/hookd/sdk/go"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	client, err := hookd.New(os.Getenv("HOOKD_API"), os.Getenv("HOOKD_TOKEN"))
	if err != nil {
		log.Fatal(err)
	}

	// The endpoint signs with the receiver's secret; without one, hookd
	// generates it and client.Endpoints.Secret reads it.
	secret := os.Getenv("WEBHOOK_SECRET")
	ep, err := client.Endpoints.Create(ctx, hookd.CreateEndpointRequest{
		TenantID: "acme",
		URL:      hookd.Ptr(os.Getenv("RECEIVER_URL")),
		Secret:   &secret,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("endpoint", ep.ID)

	// Send retries 429s, 503s and timeouts with one idempotency key: the
	// message is stored once.
	msg, err := client.Messages.Send(ctx, hookd.NewMessage{
		TenantID:  "acme",
		EventType: "invoice.paid",
		Payload:   map[string]any{"invoice": "in_1", "amount": 4200},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("message", msg.ID)
}
