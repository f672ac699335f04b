package dispatcher

import (
	"errors"
	"fmt"
	"time"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/retention"
	"github.com/hookd/hookd/internal/trafficclass"
	"github.com/hookd/hookd/internal/tuning"
)

// Config is the dispatcher's tuning. Start from DefaultConfig: every field is
// checked by Validate, and a zero value is not a default (except where said).
type Config struct {
	// MetricsAddr serves /metrics, /healthz and /readyz.
	MetricsAddr string
	// Workers is how many requests are in flight at once in this process.
	Workers int
	// MaxJobs is how many delivery and message jobs River runs at once in
	// this process; 0 means JobsPerWorker x Workers. A job also waits for
	// its payload, its endpoint's and host's turn and the ledger's commit,
	// none of which holds a request: with as many jobs as requests, those
	// waits take the places of requests and a burst queues behind them.
	MaxJobs int
	// RequestTimeout bounds one delivery attempt.
	RequestTimeout time.Duration
	// RetrySchedule is the delay before each attempt, comma-separated, in
	// the form delivery.ParseSchedule reads.
	RetrySchedule string
	// MaxPerEndpoint is how many attempts to one endpoint are in flight in
	// this process; excess deliveries are snoozed.
	MaxPerEndpoint int
	// MaxPerHost is how many requests to one destination host:port are in
	// flight in this process; excess deliveries wait their turn within
	// the start budget (delivery.DefaultStartBudget), then in jobs of
	// their own.
	MaxPerHost int
	// ShutdownGrace is how long in-flight deliveries get to finish once
	// Run's context ends; then their contexts are cancelled.
	ShutdownGrace time.Duration
	// FetchCooldown is the least time between River job fetches.
	FetchCooldown time.Duration
	// FetchPollInterval is River's fallback poll interval.
	FetchPollInterval time.Duration
	// CompletedJobRetention is how long River keeps completed jobs.
	CompletedJobRetention time.Duration
	// RescueStuckAfter is when a running job of a dead process is retried;
	// 0 means the longest an attempt may be given (RequestTimeout, or an
	// endpoint's own timeout, at most delivery.MaxEndpointTimeout) + 60s.
	// It must exceed the job timeout.
	RescueStuckAfter time.Duration
	// LedgerWriteTimeout bounds one ledger write (a batch of attempts and
	// status updates); a write past it fails and its jobs retry.
	LedgerWriteTimeout time.Duration
	// MetricsEndpointCap is the most endpoints with their own metric
	// series (0 = no cap).
	MetricsEndpointCap int
	// QueueMetricsInterval is how often the deliver queue's depth and
	// backlog age are measured.
	QueueMetricsInterval time.Duration
	// Breakers runs every delivery through its endpoint's circuit breaker.
	Breakers bool
	// BreakerFlushInterval is how often counted outcomes go to the shared
	// breaker window.
	BreakerFlushInterval time.Duration
	// FleetHeartbeat is how often the dispatcher heartbeats in the fleet
	// table; one silent for three of them is gone, and its running jobs
	// are taken by the others. A fleet's dispatchers should agree on it.
	FleetHeartbeat time.Duration
	// FleetSuspectShare is the share of active endpoints opening within a
	// minute above which no breaker opens on transport errors; 0 disables.
	FleetSuspectShare float64
	// ReclassifyInterval is how often auto endpoints' traffic classes are
	// re-evaluated.
	ReclassifyInterval time.Duration
	// TuneInterval is how often each traffic class not off gets a tuning
	// pass (by the fleet's tuning leader).
	TuneInterval time.Duration
	// TuneWindow is how much of the delivery log a periodic tuning pass
	// reads, up to now; bounded by Retention.
	TuneWindow time.Duration
	// TuneShadow is how long a proposal of a class in apply runs in shadow
	// before it is judged.
	TuneShadow time.Duration
	// OperationalWebhookURL, when set, is registered at start as an
	// operational endpoint receiving every operational event (once, by
	// URL); empty registers none. More operational endpoints are managed
	// through the api's /v1/operational-endpoints.
	OperationalWebhookURL string
	// OperationalWebhookSecret is that operational endpoint's whsec_
	// secret, required with the URL.
	OperationalWebhookSecret string
	// AllowPrivateTargets turns the SSRF guard off: deliveries may dial
	// loopback and private addresses (development and tests).
	AllowPrivateTargets bool
	// PropagateTrace sends each attempt's trace context to the receiver
	// (the traceparent header) when tracing is on.
	PropagateTrace bool
	// Actor names this process in the breaker transition history; empty
	// means host/pid.
	Actor string
	// PartitionInterval is the width of one time partition of messages,
	// payloads, deliveries and attempts.
	PartitionInterval time.Duration
	// Retention is how long messages, deliveries and attempts are kept.
	Retention time.Duration
	// PayloadRetention is how long payloads are kept; 0 means Retention.
	PayloadRetention time.Duration
	// HistoryRetention is how long breaker transitions, endpoint events
	// and class changes are kept.
	HistoryRetention time.Duration
	// Pprof also serves Go's runtime profiles on the metrics listener.
	Pprof bool
	// PollOnly is for a pool behind a connection pooler in transaction
	// mode: River polls for jobs every FetchPollInterval instead of
	// LISTENing, and the session advisory locks get connections of their
	// own to Deps.DirectURL, which is then required.
	PollOnly bool
}

// JobsPerWorker is River's running jobs per request place when
// Config.MaxJobs is 0. Measured (docs/benchmarks.md, S1rate): with one job
// per place one dispatcher fell behind 2,000 messages/s (p99 436 ms, or
// 5.3 s and growing); with three it kept up with a p99 of 53-56 ms.
const JobsPerWorker = 3

// DefaultConfig returns the defaults the dispatcher's flags document.
func DefaultConfig() Config {
	return Config{
		MetricsAddr:           "127.0.0.1:9090",
		Workers:               100,
		RequestTimeout:        15 * time.Second,
		RetrySchedule:         delivery.DefaultSchedule.String(),
		MaxPerEndpoint:        10,
		MaxPerHost:            delivery.DefaultMaxPerHost,
		ShutdownGrace:         30 * time.Second,
		FetchCooldown:         5 * time.Millisecond,
		FetchPollInterval:     250 * time.Millisecond,
		CompletedJobRetention: time.Hour,
		LedgerWriteTimeout:    delivery.DefaultLedgerWriteTimeout,
		MetricsEndpointCap:    1000,
		QueueMetricsInterval:  15 * time.Second,
		Breakers:              true,
		BreakerFlushInterval:  100 * time.Millisecond,
		FleetHeartbeat:        2 * time.Second,
		FleetSuspectShare:     0.3,
		ReclassifyInterval:    trafficclass.ReclassifyInterval,
		TuneInterval:          tuning.DefaultInterval,
		TuneWindow:            tuning.DefaultWindow,
		TuneShadow:            tuning.DefaultShadow,
		PartitionInterval:     retention.DefaultInterval,
		Retention:             retention.DefaultRetention,
		HistoryRetention:      retention.DefaultHistoryRetention,
	}
}

// ConfigError is a Config field whose value is not allowed.
type ConfigError struct {
	// Field is the Config field's name, such as "Workers".
	Field string
	// Reason says what is allowed, such as "must be from 1 to 10000".
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("dispatcher config: %s %s", e.Field, e.Reason)
}

func invalid(field, format string, args ...any) error {
	return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Validate returns a *ConfigError for the first field out of range.
func (c Config) Validate() error {
	_, err := c.resolve()
	return err
}

// resolved is a valid Config's parsed and derived values.
type resolved struct {
	schedule    delivery.Schedule
	opsSecret   delivery.Secret
	jobTimeout  time.Duration
	rescueAfter time.Duration
	retention   retention.Config
	maxJobs     int
}

func (c Config) resolve() (resolved, error) {
	var r resolved
	var err error
	if r.schedule, err = delivery.ParseSchedule(c.RetrySchedule); err != nil {
		return r, invalid("RetrySchedule", "%v", err)
	}
	switch {
	case c.MetricsAddr == "":
		return r, invalid("MetricsAddr", "must be set")
	case c.Workers < 1 || c.Workers > 10000:
		return r, invalid("Workers", "must be from 1 to 10000")
	case c.MaxJobs != 0 && (c.MaxJobs < c.Workers || c.MaxJobs > 30000):
		return r, invalid("MaxJobs", "must be 0 (%d x workers) or from workers (%d) to 30000", JobsPerWorker, c.Workers)
	case c.RequestTimeout < 100*time.Millisecond || c.RequestTimeout > 5*time.Minute:
		return r, invalid("RequestTimeout", "must be from 100ms to 5m")
	case c.MaxPerEndpoint < 1:
		return r, invalid("MaxPerEndpoint", "must be at least 1")
	case c.MaxPerHost < 1 || c.MaxPerHost > 10000:
		return r, invalid("MaxPerHost", "must be from 1 to 10000")
	case c.ShutdownGrace <= 0:
		return r, invalid("ShutdownGrace", "must be positive")
	case c.FetchCooldown < time.Millisecond:
		return r, invalid("FetchCooldown", "must be at least 1ms")
	case c.FetchPollInterval < c.FetchCooldown:
		return r, invalid("FetchPollInterval", "must be at least the fetch cooldown")
	case c.CompletedJobRetention < time.Minute:
		return r, invalid("CompletedJobRetention", "must be at least 1m")
	case c.RescueStuckAfter < 0:
		return r, invalid("RescueStuckAfter", "must not be negative")
	case c.LedgerWriteTimeout < time.Second:
		return r, invalid("LedgerWriteTimeout", "must be at least 1s")
	case c.MetricsEndpointCap < 0:
		return r, invalid("MetricsEndpointCap", "must not be negative")
	case c.QueueMetricsInterval < time.Second:
		return r, invalid("QueueMetricsInterval", "must be at least 1s")
	case c.FleetHeartbeat < 100*time.Millisecond || c.FleetHeartbeat > time.Hour:
		return r, invalid("FleetHeartbeat", "must be from 100ms to 1h")
	case c.BreakerFlushInterval < 10*time.Millisecond || c.BreakerFlushInterval > 10*time.Second:
		return r, invalid("BreakerFlushInterval", "must be from 10ms to 10s")
	case c.FleetSuspectShare < 0 || c.FleetSuspectShare >= 1:
		return r, invalid("FleetSuspectShare", "must be in [0, 1)")
	case c.ReclassifyInterval < time.Minute:
		return r, invalid("ReclassifyInterval", "must be at least 1m")
	case c.TuneInterval < time.Minute:
		return r, invalid("TuneInterval", "must be at least 1m")
	case c.TuneWindow < time.Minute:
		return r, invalid("TuneWindow", "must be at least 1m")
	case c.TuneShadow < 10*time.Second:
		return r, invalid("TuneShadow", "must be at least 10s")
	}
	r.retention = retention.Config{Interval: c.PartitionInterval, Retention: c.Retention,
		PayloadRetention: c.PayloadRetention, HistoryRetention: c.HistoryRetention}
	if r.retention.PayloadRetention == 0 {
		r.retention.PayloadRetention = c.Retention
	}
	if err := r.retention.Validate(); err != nil {
		var re *retention.ConfigError
		if errors.As(err, &re) {
			return r, invalid(re.Field, "%s", re.Reason)
		}
		return r, err
	}
	if c.OperationalWebhookURL != "" {
		if r.opsSecret, err = delivery.ParseSecret(c.OperationalWebhookSecret); err != nil {
			return r, invalid("OperationalWebhookSecret", "%v (required with the operational webhook URL)", err)
		}
	}
	r.maxJobs = c.MaxJobs
	if r.maxJobs == 0 {
		r.maxJobs = JobsPerWorker * c.Workers
	}
	r.jobTimeout = c.RequestTimeout + delivery.JobTimeoutMargin
	r.rescueAfter = c.RescueStuckAfter
	if r.rescueAfter == 0 {
		r.rescueAfter = max(c.RequestTimeout, delivery.MaxEndpointTimeout) + 60*time.Second
	}
	if r.rescueAfter <= r.jobTimeout {
		return r, invalid("RescueStuckAfter", "must exceed the request timeout + %s (%s)", delivery.JobTimeoutMargin, r.jobTimeout)
	}
	return r, nil
}
