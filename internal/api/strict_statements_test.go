package api_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// statementCounter counts the statements a pool sends.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestStrictModeAddsNoStatement: once the catalogue is loaded, a strict
// api sends no statement per message beyond what a non-strict one sends.
func TestStrictModeAddsNoStatement(t *testing.T) {
	t.Parallel()
	statements := func(strict bool) int64 {
		db := storetest.New(t)
		counter := &statementCounter{}
		cfg, err := pgxpool.ParseConfig(db.URL)
		require.NoError(t, err)
		cfg.ConnConfig.Tracer = counter
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		s := store.New(pool, nil)
		rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
		require.NoError(t, err)
		srv := httptest.NewServer(api.NewServer(api.Deps{Store: s, Enqueuer: &delivery.Enqueuer{Client: rc}, Token: testToken,
			Resolver: hosts{}, StrictEventTypes: strict, CatalogueRefresh: time.Hour}))
		t.Cleanup(srv.Close)
		post := func(path, body string, want int) {
			req, err := http.NewRequest("POST", srv.URL+path, bytes.NewBufferString(body))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+testToken)
			res, err := srv.Client().Do(req)
			require.NoError(t, err)
			res.Body.Close()
			require.Equal(t, want, res.StatusCode)
		}
		post("/v1/endpoints", `{"tenant_id":"acme","url":"https://acme.example/h"}`, http.StatusCreated)
		post("/v1/event-types", `{"name":"invoice.paid","schema":{"type":"object","required":["amount"]}}`, http.StatusCreated)
		// The first message loads the catalogue (strict) and warms the
		// connections' prepared statements (both).
		post("/v1/messages", `{"tenant_id":"acme","event_type":"invoice.paid","payload":{"amount":1}}`, http.StatusAccepted)
		before := counter.n.Load()
		for range 20 {
			post("/v1/messages", `{"tenant_id":"acme","event_type":"invoice.paid","payload":{"amount":1}}`, http.StatusAccepted)
		}
		return counter.n.Load() - before
	}
	lax, strict := statements(false), statements(true)
	require.Positive(t, lax)
	// Both counts include the pool's own traffic, which varies a little
	// from run to run; a statement per message would add 20.
	require.Less(t, strict-lax, int64(20), "strict %d, lax %d statements for 20 messages", strict, lax)
}
