package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// S1 trace: tracing off vs on.

// traceSink is an OTLP/HTTP trace collector that keeps nothing: it answers
// every POST 200 with an empty body, which is a valid, empty
// ExportTraceServiceResponse in protobuf, and counts what it was sent, so
// the scenario knows the processes did export.
type traceSink struct {
	srv      *http.Server
	url      string
	requests atomic.Int64
	bytes    atomic.Int64
	// apiRequests and dispatcherRequests count the requests whose spans
	// name the api's or the dispatcher's service (service.name is a plain
	// string in the protobuf).
	apiRequests, dispatcherRequests atomic.Int64
}

func newTraceSink() (*traceSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("trace sink: %w", err)
	}
	s := &traceSink{url: "http://" + ln.Addr().String()}
	s.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		body, _ := io.ReadAll(r.Body)
		s.requests.Add(1)
		s.bytes.Add(int64(len(body)))
		if bytes.Contains(body, []byte("hookd-api")) {
			s.apiRequests.Add(1)
		}
		if bytes.Contains(body, []byte("hookd-dispatcher")) {
			s.dispatcherRequests.Add(1)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *traceSink) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}

// tracingEnv switches a process's tracing on: OTLP over HTTP/protobuf (the
// telemetry package's default protocol) to the sink, every span sampled.
func tracingEnv(sinkURL string) map[string]string {
	return map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": sinkURL,
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_TRACES_SAMPLER":         "always_on",
	}
}

// runS1Trace runs S1's closed loop against an api and a dispatcher with
// tracing off, then on, alternated on one database (both processes
// restarted for each run), and reports the medians of each mode. Tracing
// on exports every span to a sink in the bench process; a run that
// exported nothing is an error, since it would measure tracing off twice.
func runS1Trace(ctx context.Context, b *bench) (_ *scenarioResult, err error) {
	set := b.fanSet()
	order := pairOrder(b.plan.tracePairs)
	res := &scenarioResult{Layout: describeFan(set), Settings: b.river.env(),
		Load: b.describeClosedLoop() + fmt.Sprintf("; a fresh api and dispatcher per run, %d pairs alternated off/on; tracing on: OTLP http/protobuf to a sink in the bench process answering 200, OTEL_TRACES_SAMPLER=always_on", b.plan.tracePairs)}
	sink, err := newTraceSink()
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := sink.close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	s, err := b.newStage(ctx, "s1trace", nil)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if _, err := registerEndpoints(ctx, s.client, s.rcv, b.secret, 32, set); err != nil {
		return nil, err
	}
	var on, off []*scenarioResult
	var exportRequests, exportBytes int64
	for i, tracing := range order {
		var env map[string]string
		if tracing {
			env = tracingEnv(sink.url)
		}
		if err := s.restartAPI(ctx, fmt.Sprintf("s1trace-api-%d", i+1), env); err != nil {
			return res, err
		}
		if _, err := s.startDispatcher(ctx, env); err != nil {
			return res, err
		}
		requests, sent0 := sink.requests.Load(), sink.bytes.Load()
		apiReqs, dispReqs := sink.apiRequests.Load(), sink.dispatcherRequests.Load()
		r := &scenarioResult{Name: fmt.Sprintf("s1trace #%d tracing=%v", i+1, tracing)}
		err := s.closedRun(ctx, r, roundRobin(set), set.perTenant, b.plan.warmup, b.plan.traceMeasure)
		// Both processes export what they still hold as they stop, so the
		// run's count holds every span it made.
		if serr := s.stopDispatchers(); err == nil {
			err = serr
		}
		if aerr := s.stopAPI(); err == nil {
			err = aerr
		}
		if err != nil {
			return res, err
		}
		sent := sink.requests.Load() - requests
		fromAPI, fromDispatcher := sink.apiRequests.Load()-apiReqs, sink.dispatcherRequests.Load()-dispReqs
		r.Extra = map[string]any{"trace_export_requests": sent, "trace_export_bytes": sink.bytes.Load() - sent0,
			"trace_export_requests_api": fromAPI, "trace_export_requests_dispatcher": fromDispatcher}
		res.Runs = append(res.Runs, r)
		switch {
		case tracing && (fromAPI == 0 || fromDispatcher == 0):
			return res, fmt.Errorf("tracing on: the sink got %d export requests from the api and %d from the dispatcher; a process that exported nothing measured tracing off", fromAPI, fromDispatcher)
		case !tracing && sent > 0:
			return res, fmt.Errorf("tracing off exported %d requests to the sink", sent)
		case tracing:
			on = append(on, r)
			exportRequests += sent
			exportBytes += sink.bytes.Load() - sent0
		default:
			off = append(off, r)
		}
	}
	// The scenario's own figures are the tracing-on medians.
	res.setMedians(on)
	res.MeasuredS = round1(b.plan.traceMeasure.Seconds() * float64(len(order)))
	res.Extra = map[string]any{
		"tracing_on_median_per_s":  res.DeliveriesPerS,
		"tracing_off_median_per_s": medianOf(off, func(r *scenarioResult) float64 { return r.DeliveriesPerS }),
		"tracing_on_p99_ms":        res.LatencyP99Ms,
		"tracing_off_p99_ms":       medianOf(off, func(r *scenarioResult) float64 { return r.LatencyP99Ms }),
		"tracing_on_cpu_ms_per_delivery": medianOf(on, func(r *scenarioResult) float64 {
			return r.CPUMsPerDelivery.API + r.CPUMsPerDelivery.Dispatcher
		}),
		"tracing_off_cpu_ms_per_delivery": medianOf(off, func(r *scenarioResult) float64 {
			return r.CPUMsPerDelivery.API + r.CPUMsPerDelivery.Dispatcher
		}),
		"trace_export_requests": exportRequests,
		"trace_export_bytes":    exportBytes,
	}
	return res, nil
}
