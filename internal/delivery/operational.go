package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/hookd/hookd/internal/store"
)

// OperationalArgs is a job of the earlier operational webhook path, which
// sent endpoint.disabled straight to --operational-webhook-url. Operational
// events now travel as messages of store.OperationalTenant; the worker
// stays registered so jobs of this kind still queued in a database finish.
type OperationalArgs struct {
	// EventID is the endpoint_events row; it makes the webhook-id stable
	// across retries.
	EventID int64           `json:"event_id"`
	Type    string          `json:"type"`
	At      time.Time       `json:"at"`
	Data    json.RawMessage `json:"data"`
}

// Kind names the job kind.
func (OperationalArgs) Kind() string { return "operational_webhook" }

// InsertOpts retries an operational webhook like a delivery.
func (OperationalArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 12}
}

// OperationalWorker finishes queued jobs of the earlier kind: it POSTs each
// in the Standard Webhooks format to URL, signed with Secret; with no URL
// configured it drops them (nowhere to send them).
type OperationalWorker struct {
	river.WorkerDefaults[OperationalArgs]
	URL    string
	Secret Secret
	Sender *Sender
	Now    func() time.Time
}

// Work sends one event; a non-2xx answer is retried by River.
func (w *OperationalWorker) Work(ctx context.Context, job *river.Job[OperationalArgs]) error {
	if w.URL == "" {
		return nil
	}
	body, err := json.Marshal(map[string]any{"type": job.Args.Type, "timestamp": job.Args.At, "data": job.Args.Data})
	if err != nil {
		return fmt.Errorf("encode operational event: %w", err)
	}
	id := "evt_" + strconv.FormatInt(job.Args.EventID, 10)
	now := w.Now()
	resp := w.Sender.Send(ctx, Request{URL: w.URL, MessageID: id, Timestamp: now, Body: body, Signature: Sign(id, now, body, w.Secret)},
		func(s time.Time) time.Duration { return w.Now().Sub(s) }, now)
	if resp.Status/100 != 2 {
		return fmt.Errorf("operational webhook: %s", describe(resp))
	}
	return nil
}

// AutoDisables logs and counts, after the commit, the endpoints the ledger
// disabled for auth failures (the store emits their endpoint.disabled
// events inside the ledger's transaction).
type AutoDisables struct {
	Logger   *slog.Logger
	Disabled *prometheus.CounterVec
}

// DisabledAuthFailures is the reason an endpoint is disabled after a
// streak of 401/403 answers.
const DisabledAuthFailures = "auth_failures"

// NewAutoDisabledCounter creates and registers endpoint_auto_disabled_total;
// its auth_failures series exists from the start, at 0.
func NewAutoDisabledCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "endpoint_auto_disabled_total",
		Help: "Endpoints disabled automatically, by reason (auth_failures).",
	}, []string{"reason"})
	c.WithLabelValues(DisabledAuthFailures)
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}

// After logs and counts the disabled endpoints.
func (a *AutoDisables) After(disabled []store.AutoDisable) {
	for _, d := range disabled {
		if a.Disabled != nil {
			a.Disabled.WithLabelValues(DisabledAuthFailures).Inc()
		}
		if a.Logger != nil {
			a.Logger.Warn("endpoint_auto_disabled",
				slog.String("endpoint", d.EndpointID),
				slog.String("tenant", d.TenantID),
				slog.String("reason", DisabledAuthFailures),
				slog.Int("failures", d.Failures),
				slog.Time("first_failure_at", d.FirstAt),
				slog.Time("last_failure_at", d.LastAt))
		}
	}
}
