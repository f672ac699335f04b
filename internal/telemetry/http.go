package telemetry

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// Unmatched is the route label of a request no route matched.
const Unmatched = "unmatched"

// HTTPMetrics count and time the requests an http.Handler serves, labelled
// by method, route pattern and status. Every label is bounded: the route is
// the pattern that matched (/v1/endpoints/{id}, never the path), a method
// outside the standard set is "OTHER", and a status is one of the few codes
// a handler writes.
type HTTPMetrics struct {
	Requests *prometheus.CounterVec
	Duration *prometheus.HistogramVec
}

// NewHTTPMetrics creates and registers http_requests_total and
// http_request_duration_seconds on reg.
func NewHTTPMetrics(reg prometheus.Registerer) *HTTPMetrics {
	m := &HTTPMetrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "http_requests_total",
			Help: "HTTP requests served, by method, route pattern and status code.",
		}, []string{"method", "route", "status"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "http_request_duration_seconds",
			Help:    "Time to serve an HTTP request, from the first byte read to the handler's return, by method, route pattern and status code.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method", "route", "status"}),
	}
	reg.MustRegister(m.Requests, m.Duration)
	return m
}

// Wrap returns next, instrumented. next may be a chi router (its matched
// pattern is read from the routing context Wrap hands it) or an
// http.ServeMux (its Request.Pattern).
func (m *HTTPMetrics) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rctx := chi.NewRouteContext()
		r = r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, rctx))
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			route := rctx.RoutePattern()
			if route == "" {
				route = r.Pattern
			}
			if route == "" {
				route = Unmatched
			}
			labels := []string{method(r.Method), route, strconv.Itoa(sw.status())}
			m.Requests.WithLabelValues(labels...).Inc()
			m.Duration.WithLabelValues(labels...).Observe(time.Since(start).Seconds())
		}()
		next.ServeHTTP(sw, r)
	})
}

func method(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "OTHER"
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 && code >= 200 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer (flushes
// for server-sent events, deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush passes a flush through, for handlers that assert http.Flusher.
func (w *statusWriter) Flush() {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}
