package api_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/store"
)

func TestHealthz(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	r := b.do(t, "GET", "/healthz", nil, withoutAuth())
	requireStatus(t, http.StatusOK, r)
	require.Equal(t, "application/json", r.Header.Get("Content-Type"))
	require.JSONEq(t, `{"status":"ok"}`, string(r.Body))
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	down := func(t *testing.T) func(*api.Deps) {
		pool, err := pgxpool.New(context.Background(), "postgres://hookd@127.0.0.1:1/hookd?sslmode=disable&connect_timeout=2")
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return func(d *api.Deps) { d.Store = store.New(pool, nil) }
	}
	for _, tc := range []struct {
		name   string
		deps   func(t *testing.T) func(*api.Deps)
		status int
		body   string
		kind   string
	}{
		{"ready", func(*testing.T) func(*api.Deps) { return func(*api.Deps) {} }, 200, `{"status":"ready"}`, ""},
		{"migrations current", func(*testing.T) func(*api.Deps) {
			return func(d *api.Deps) {
				d.Ready = func(ctx context.Context) error {
					ok, err := store.MigrationsCurrent(ctx, d.Store.Pool())
					if err == nil && !ok {
						err = errors.New("pending migrations")
					}
					return err
				}
			}
		}, 200, `{"status":"ready"}`, ""},
		{"migrations pending", func(*testing.T) func(*api.Deps) {
			return func(d *api.Deps) {
				d.Ready = func(context.Context) error { return errors.New("migration 0002 is pending") }
			}
		}, 503, "", "not-ready"},
		{"database down", down, 503, "", "unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, b := setup(t, tc.deps(t))
			r := b.do(t, "GET", "/readyz", nil, withoutAuth())
			if tc.status == http.StatusOK {
				// The handler gives the database 2 s to answer, and says
				// 503 when it does not: on a loaded machine that is the
				// truth, and readiness comes back.
				require.Eventually(t, func() bool {
					r = b.do(t, "GET", "/readyz", nil, withoutAuth())
					return r.Status == http.StatusOK
				}, 30*time.Second, 100*time.Millisecond, "ready: %s", r.Body)
				requireStatus(t, http.StatusOK, r)
				require.JSONEq(t, tc.body, string(r.Body))
				return
			}
			p := requireProblem(t, tc.status, r)
			require.Equal(t, api.ProblemTypeBase+tc.kind, p.Type)
			require.NotContains(t, p.Detail, "0002", "the cause is not exposed")
		})
	}
}

func TestUnknownRoutesAndMethods(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	e := b.createEndpoint(t, "acme")
	for _, tc := range []struct {
		method, path string
		status       int
		kind         string
	}{
		{"GET", "/", 404, "not-found"},
		{"GET", "/v2/endpoints", 404, "not-found"},
		{"GET", "/v1/nope", 404, "not-found"},
		{"GET", "/v1/endpoints/" + e.ID + "/nope", 404, "not-found"},
		{"PUT", "/v1/endpoints/" + e.ID, 405, "method-not-allowed"},
		{"DELETE", "/v1/endpoints", 405, "method-not-allowed"},
		{"PUT", "/v1/messages", 405, "method-not-allowed"},
		{"POST", "/healthz", 405, "method-not-allowed"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			t.Parallel()
			p := requireProblem(t, tc.status, b.do(t, tc.method, tc.path, nil))
			require.Equal(t, api.ProblemTypeBase+tc.kind, p.Type)
			require.Equal(t, tc.path, p.Instance)
		})
	}
}
