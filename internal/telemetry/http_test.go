package telemetry_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/telemetry"
)

func serve(t *testing.T, h http.Handler, method, path string) int {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Code
}

func TestHTTPMetricsLabelChiRoutesByPattern(t *testing.T) {
	t.Parallel()
	r := chi.NewRouter()
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	r.Route("/v1", func(r chi.Router) {
		r.Get("/endpoints/{id}", func(w http.ResponseWriter, r *http.Request) {
			if chi.URLParam(r, "id") == "missing" {
				http.Error(w, "no such endpoint", http.StatusNotFound)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		r.Post("/messages", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
	})
	reg := prometheus.NewRegistry()
	m := telemetry.NewHTTPMetrics(reg)
	h := m.Wrap(r)

	require.Equal(t, http.StatusOK, serve(t, h, "GET", "/healthz"))
	for _, id := range []string{"ep_1", "ep_2", "ep_3"} {
		require.Equal(t, http.StatusOK, serve(t, h, "GET", "/v1/endpoints/"+id))
	}
	require.Equal(t, http.StatusNotFound, serve(t, h, "GET", "/v1/endpoints/missing"))
	require.Equal(t, http.StatusAccepted, serve(t, h, "POST", "/v1/messages"))
	require.Equal(t, http.StatusNotFound, serve(t, h, "GET", "/nowhere/at/all"))
	require.Equal(t, http.StatusMethodNotAllowed, serve(t, h, "BREW", "/healthz"))
	require.Equal(t, http.StatusNotFound, serve(t, h, "GET", "/v1/nothing/here"))

	count := func(method, route, status string) float64 {
		return testutil.ToFloat64(m.Requests.WithLabelValues(method, route, status))
	}
	require.Equal(t, 1.0, count("GET", "/healthz", "200"))
	require.Equal(t, 3.0, count("GET", "/v1/endpoints/{id}", "200"), "one series for every id")
	require.Equal(t, 1.0, count("GET", "/v1/endpoints/{id}", "404"))
	require.Equal(t, 1.0, count("POST", "/v1/messages", "202"))
	require.Equal(t, 1.0, count("GET", telemetry.Unmatched, "404"))
	require.Equal(t, 1.0, count("OTHER", telemetry.Unmatched, "405"), "an odd method is OTHER")
	require.Equal(t, 1.0, count("GET", "/v1/*", "404"), "a path no route under /v1 matches is the mount's pattern")
	// Seven distinct (method, route, status) series for nine requests.
	require.Equal(t, 7, testutil.CollectAndCount(m.Requests))
	require.Equal(t, 7, testutil.CollectAndCount(m.Duration))
}

func TestHTTPMetricsReadServeMuxPatterns(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {})
	reg := prometheus.NewRegistry()
	m := telemetry.NewHTTPMetrics(reg)
	h := m.Wrap(mux)
	serve(t, h, "GET", "/items/1")
	serve(t, h, "GET", "/items/2")
	serve(t, h, "GET", "/other")
	require.Equal(t, 2.0, testutil.ToFloat64(m.Requests.WithLabelValues("GET", "GET /items/{id}", "200")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.Requests.WithLabelValues("GET", telemetry.Unmatched, "404")))
}

func TestHTTPMetricsKeepFlushing(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := telemetry.NewHTTPMetrics(reg)
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, http.NewResponseController(w).Flush())
		w.(http.Flusher).Flush()
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/events", nil))
	require.True(t, rec.Flushed)
	require.Equal(t, 1.0, testutil.ToFloat64(m.Requests.WithLabelValues("GET", telemetry.Unmatched, "200")))
}
