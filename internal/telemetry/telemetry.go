// Package telemetry holds what both binaries share of their Prometheus
// exposition: the Go and process collectors, the /metrics handler, a
// listener serving it, and the api's HTTP request metrics. The delivery
// metrics live with the code that counts them, in internal/delivery.
package telemetry

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// RegisterRuntime registers the Go runtime and process collectors on reg.
func RegisterRuntime(reg prometheus.Registerer) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// Handler serves the metrics gathered from reg in the text or protobuf
// exposition format; gathering errors are reported in the response and
// counted in promhttp_metric_handler_errors_total.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}

// Serve listens on addr and serves mux until the returned server is shut
// down. It returns once the listener is bound, so the caller can print the
// address (addr may use port 0).
func Serve(addr string, mux http.Handler, logger *slog.Logger) (*http.Server, net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen for metrics: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics_server", slog.String("error", err.Error()))
		}
	}()
	return srv, ln, nil
}
