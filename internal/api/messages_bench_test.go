package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// transactionPerMessage stores each message in a transaction of its own,
// as the api did before group commit.
type transactionPerMessage struct {
	store *store.Store
	enq   store.Enqueuer
}

var _ api.MessageCreator = transactionPerMessage{}

func (t transactionPerMessage) CreateMessage(ctx context.Context, in store.NewMessage) (store.Message, bool, error) {
	return t.store.CreateMessage(ctx, in, t.enq)
}

// BenchmarkCreateMessage measures POST /v1/messages in process against a
// real Postgres, with group commit and with a transaction per message: 1 KB
// payloads to 100 tenants of one endpoint each, from 16 parallel clients.
// Its CPU profile is the api's own cost per accepted message.
func BenchmarkCreateMessage(b *testing.B) {
	b.Run("group_commit", func(b *testing.B) { benchmarkCreateMessage(b, false) })
	b.Run("transaction_per_message", func(b *testing.B) { benchmarkCreateMessage(b, true) })
}

func benchmarkCreateMessage(b *testing.B, perMessage bool) {
	db := storetest.New(b)
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	if err != nil {
		b.Fatal(err)
	}
	deps := api.Deps{
		Store:               store.New(db.Pool, nil),
		Enqueuer:            &delivery.Enqueuer{Client: rc},
		Token:               testToken,
		AllowPrivateTargets: true,
		Resolver:            hosts{},
	}
	if perMessage {
		deps.Messages = transactionPerMessage{store: deps.Store, enq: deps.Enqueuer}
	}
	h := api.NewServer(deps)
	post := func(path, body string) int {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Content-Type", "application/json")
		rr := httptest.NewRecorder()
		h.ServeHTTP(rr, req)
		return rr.Code
	}
	const tenants = 100
	for i := range tenants {
		if code := post("/v1/endpoints", fmt.Sprintf(`{"tenant_id":"t%d","url":"http://127.0.0.1:9/hook"}`, i)); code != http.StatusCreated {
			b.Fatalf("create endpoint: %d", code)
		}
	}
	payload := `{"data":"` + strings.Repeat("x", 1000) + `"}`
	bodies := make([]string, tenants)
	for i := range bodies {
		bodies[i] = fmt.Sprintf(`{"tenant_id":"t%d","event_type":"bench.event","payload":%s}`, i, payload)
	}
	b.SetParallelism(8)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if code := post("/v1/messages", bodies[i%tenants]); code != http.StatusAccepted {
				b.Errorf("create message: %d", code)
				return
			}
			i++
		}
	})
}
