package delivery

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// OtherEndpoint is the endpoint label used once the label cap is reached.
const OtherEndpoint = "_other"

// EndpointLabels caps the number of distinct endpoint label values a
// process exports, so a fleet of 100,000 endpoints cannot explode Prometheus:
// the first Max endpoints seen get their own series, the rest share
// OtherEndpoint. Max <= 0 means no cap.
type EndpointLabels struct {
	Max int

	mu   sync.RWMutex
	seen map[string]struct{}
}

// Label returns the label value for endpoint id.
func (l *EndpointLabels) Label(id string) string {
	if l == nil || l.Max <= 0 {
		return id
	}
	l.mu.RLock()
	_, ok := l.seen[id]
	n := len(l.seen)
	l.mu.RUnlock()
	if ok {
		return id
	}
	if n >= l.Max {
		return OtherEndpoint
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]struct{}{}
	}
	if len(l.seen) >= l.Max {
		if _, ok := l.seen[id]; !ok {
			return OtherEndpoint
		}
	}
	l.seen[id] = struct{}{}
	return id
}

// Metrics are the delivery worker's Prometheus series (names and labels are
// stable: docs/observability.md lists them).
type Metrics struct {
	Labels *EndpointLabels

	DeliveryTotal      *prometheus.CounterVec
	Delivery5xxTotal   *prometheus.CounterVec
	DeliveryDuration   prometheus.Histogram
	ConcurrencySnoozed *prometheus.CounterVec
	// RateLimited counts deliveries put back to keep their endpoint
	// within its rate limit.
	RateLimited *prometheus.CounterVec
	// FleetSize is the live dispatchers this process counted.
	FleetSize prometheus.Gauge
	// FleetConnections and ServerConnections are the live fleet's
	// registered connections and the server's for clients (Fleet).
	FleetConnections, ServerConnections prometheus.Gauge
	// FleetRescued counts the jobs of gone dispatchers this one made
	// available again.
	FleetRescued prometheus.Counter
	// FleetLostRunsReleased counts this dispatcher's runs whose fetch's
	// answer was lost, made available again by its heartbeat.
	FleetLostRunsReleased prometheus.Counter
	// FleetRunsWithheld counts jobs of fetches answered too late to run.
	FleetRunsWithheld prometheus.Counter
	// FleetOutcomesFenced counts job outcomes this process did not write
	// because their run had lost its job (store.NewFencedDriver).
	FleetOutcomesFenced prometheus.Counter
	// QueueFetches counts this process's fetches of the deliver queue's
	// jobs by kind (store.FetchWindowConfig): full, from the queue's
	// start; windowed, from the last fetch's floor.
	QueueFetches *prometheus.CounterVec
	HeldTotal    prometheus.Counter
	Parked       prometheus.Counter
	Unparked     prometheus.Counter
	// Expired counts deliveries made final as expired, by reason:
	// retention (the maintainer, before their partition goes) or payload
	// (a worker found the payload dropped by payload retention).
	Expired *prometheus.CounterVec
	// PayloadMissing counts attempts that found no payload for a message
	// younger than payload retention (retried, not expired).
	PayloadMissing prometheus.Counter
	// Panics counts attempts cut by a panic (recoverPanic).
	Panics prometheus.Counter
	// JobsLeft counts runs of jobs whose arguments this version cannot run.
	JobsLeft prometheus.Counter
	// LedgerRetries counts the ledger's tries of a batch after a failure
	// that wrote nothing (Ledger.write).
	LedgerRetries prometheus.Counter
	// RequestsInFlight is the requests this process has in flight.
	RequestsInFlight prometheus.Gauge
	// StartDeferred counts attempts that found no place within a bound
	// by their run's start budget, by bound.
	StartDeferred *prometheus.CounterVec
	// Missing counts jobs that found no row for their delivery.
	Missing prometheus.Counter
}

// NewMetrics creates and registers the delivery metrics on reg.
func NewMetrics(reg prometheus.Registerer, labels *EndpointLabels) *Metrics {
	m := &Metrics{
		Labels: labels,
		DeliveryTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhook_delivery_total",
			Help: "Delivery attempts by endpoint and classified outcome (success, failure, ignore, auth_failure, blocked).",
		}, []string{"endpoint", "outcome"}),
		Delivery5xxTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhook_delivery_5xx_total",
			Help: "Delivery attempts answered with a 5xx status, by endpoint.",
		}, []string{"endpoint"}),
		DeliveryDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "webhook_delivery_duration_seconds",
			Help:    "Duration of delivery attempts, from request start to the last byte read.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 15, 30},
		}),
		ConcurrencySnoozed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhook_delivery_concurrency_snoozed_total",
			Help: "Deliveries put back because their endpoint already had its per-process cap of attempts in flight.",
		}, []string{"endpoint"}),
		RateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhook_delivery_rate_limited_total",
			Help: "Deliveries put back (snoozed, using no attempt) to keep their endpoint within its rate_limit, by endpoint.",
		}, []string{"endpoint"}),
		FleetSize: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dispatcher_fleet_size",
			Help: "Live dispatchers this process counted at its last heartbeat.",
		}),
		FleetConnections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dispatcher_fleet_db_connections",
			Help: "The most database connections the live dispatchers may open together (each one's pool, ledger and listener), as they registered them at their last heartbeats. Above dispatcher_server_db_connections, a busy fleet meets refused connections: a dispatcher whose start would take it there refuses to start.",
		}),
		FleetRescued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dispatcher_fleet_jobs_rescued_total",
			Help: "Running jobs of dispatchers whose heartbeats stopped (killed, or cut off from the database) that this dispatcher's heartbeat made available again, seconds after they went silent rather than after --rescue-stuck-after.",
		}),
		FleetLostRunsReleased: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dispatcher_fleet_lost_runs_released_total",
			Help: "Jobs running under this dispatcher's ID that it never ran, made available again by its heartbeat 6 s after their fetch (at most 36 s when no failed or late fetch was seen) rather than after --rescue-stuck-after: the server ran a fetch of jobs whose answer never reached the dispatcher (a connection broken after the fetch ran, or a fetch River stopped waiting for that the server ran later, as after a network cut).",
		}),
		FleetRunsWithheld: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dispatcher_fleet_runs_withheld_total",
			Help: "Jobs of fetches whose answer reached this dispatcher more than 2 s after the server ran them, not run here but left for the release of lost runs (dispatcher_fleet_lost_runs_released_total), which may already have given them to another dispatcher.",
		}),
		FleetOutcomesFenced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dispatcher_fleet_outcomes_fenced_total",
			Help: "Outcomes of job runs (completed, retry, wait) this dispatcher did not write because the job was no longer the run's: its lease lapsed, another dispatcher rescued the job and ran it again. Each is a run that came back after it was declared gone.",
		}),
		QueueFetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dispatcher_queue_fetches_total",
			Help: "This dispatcher's fetches of the deliver queue's jobs by kind: full (River's own, from the queue's start: every fetch unless each of the last three took 5 ms or more and twice a windowed fetch's time; then at most once a second and at most 5% of the time) or windowed (from where the last fetch left the queue, reading only the index entries since; the fetches between full ones while those are slow). Windowed fetches mean River's fetch has become slow, as behind a long transaction, whose dead entries it walks on every call.",
		}, []string{"kind"}),
		ServerConnections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dispatcher_server_db_connections",
			Help: "The database server's connections for clients like hookd: max_connections less superuser_reserved_connections, read at the last heartbeat.",
		}),
		HeldTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "webhook_delivery_held_total",
			Help: "Deliveries held because their endpoint is disabled.",
		}),
		Parked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "webhook_delivery_parked_total",
			Help: "Deliveries parked (waiting without a job) because their endpoint's breaker was open or isolated.",
		}),
		Unparked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "webhook_delivery_unparked_total",
			Help: "Parked deliveries, and held ones of an endpoint that was enabled, queued again: at a pace while the breaker is closed, one as a probe when it could admit one.",
		}),
		Expired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhook_delivery_expired_total",
			Help: "Deliveries made final as expired before they were delivered or failed, by reason: retention (older than --retention) or payload (payload dropped by --payload-retention).",
		}, []string{"reason"}),
		PayloadMissing: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "webhook_delivery_payload_missing_total",
			Help: "Attempts that found no payload for a message younger than --payload-retention: a read that missed, retried by River (never expired, nothing sent).",
		}),
		Panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "webhook_delivery_panics_total",
			Help: "Attempts cut by a panic in the dispatcher's own code: each recorded as an attempt with error class panic and retried on its delivery's schedule; the process and the other deliveries go on.",
		}),
		LedgerRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "webhook_ledger_write_retries_total",
			Help: "Writes of a ledger batch tried again after a failure that wrote nothing (no connection to be had, the server restarting, a deadlock): the attempts it records were sent, and are recorded rather than sent again.",
		}),
		JobsLeft: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "webhook_delivery_jobs_left_total",
			Help: "Runs of message jobs whose arguments' version this dispatcher does not know (queued by a newer one): left untouched, snoozed for a dispatcher that can run them; nothing sent, nothing written.",
		}),
		RequestsInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "webhook_delivery_requests_in_flight",
			Help: "Requests this dispatcher has in flight: at most --workers, and at most --max-per-host to one host:port.",
		}),
		StartDeferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhook_delivery_start_deferred_total",
			Help: "Attempts that found no place within a bound in their run's start budget and went to wait in a job of their own (nothing sent, no attempt used), by bound: job (a message job's attempts in flight), process (--workers), host (--max-per-host), late (the run was frozen past its send deadline before its request), or lease (this dispatcher's heartbeats had lapsed, so the fleet may have taken its jobs).",
		}, []string{"bound"}),
		Missing: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "webhook_delivery_missing_total",
			Help: "Jobs that found no row for their delivery (retention dropped its partition after making it expired): nothing sent, the job ends.",
		}),
	}
	for _, b := range []boundsWait{boundJob, boundProcess, boundHost, boundLate, boundLease} {
		m.StartDeferred.WithLabelValues(string(b))
	}
	for _, r := range []string{ExpiredRetention, ExpiredPayload} {
		m.Expired.WithLabelValues(r)
	}
	for _, kind := range []string{"full", "windowed"} {
		m.QueueFetches.WithLabelValues(kind)
	}
	if reg != nil {
		reg.MustRegister(m.DeliveryTotal, m.Delivery5xxTotal, m.DeliveryDuration, m.ConcurrencySnoozed, m.RateLimited, m.FleetSize, m.FleetConnections, m.ServerConnections, m.FleetRescued, m.FleetLostRunsReleased, m.FleetRunsWithheld, m.FleetOutcomesFenced, m.QueueFetches, m.HeldTotal, m.Parked, m.Unparked, m.Expired, m.PayloadMissing, m.Panics, m.LedgerRetries, m.JobsLeft, m.RequestsInFlight, m.StartDeferred, m.Missing)
	}
	return m
}

// Reasons of webhook_delivery_expired_total.
const (
	ExpiredRetention = "retention"
	ExpiredPayload   = "payload"
)

// DispatcherMetrics are every series a dispatcher exports besides the Go
// and process collectors (telemetry.RegisterRuntime).
type DispatcherMetrics struct {
	Delivery     *Metrics
	Breaker      *BreakerMetrics
	AutoDisabled *prometheus.CounterVec
	Queue        *QueueMetrics
}

// NewDispatcherMetrics creates and registers the dispatcher's metrics on
// reg, endpoint-labelled series capped by labels.
func NewDispatcherMetrics(reg prometheus.Registerer, labels *EndpointLabels) *DispatcherMetrics {
	return &DispatcherMetrics{
		Delivery:     NewMetrics(reg, labels),
		Breaker:      NewBreakerMetrics(reg, labels),
		AutoDisabled: NewAutoDisabledCounter(reg),
		Queue:        NewQueueMetrics(reg),
	}
}
