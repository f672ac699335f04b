// Package telemetry holds what both binaries share of their Prometheus
// exposition: the Go and process collectors, the /metrics handler, a
// listener serving it, and the api's HTTP request metrics. The delivery
// metrics live with the code that counts them, in internal/delivery.
package telemetry

import (
	"context"
	"errors"
	"fmt"
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

// RunServer serves ln with srv until ctx ends, then shuts srv down, giving
// requests in flight up to grace to finish before their connections are cut.
// It returns once the server has stopped, so an errgroup waits for it; a
// failure to serve is returned, a shutdown that outran grace is not.
func RunServer(ctx context.Context, srv *http.Server, ln net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	}
	return nil
}
