package api

import (
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/hookd/hookd/internal/store"
)

// DefaultMaxRecoverWindow is how far back a recovery may reach by default
// (the api's --max-recover-window).
const DefaultMaxRecoverWindow = 14 * 24 * time.Hour

// recoverRequest is POST /v1/endpoints/{id}/recover's body: the creation
// time range [since, until) of the failed deliveries to send again.
type recoverRequest struct {
	Since string  `json:"since"`
	Until *string `json:"until"`

	since time.Time
	until *time.Time
}

const rfc3339Message = "must be an RFC 3339 timestamp such as 2026-11-30T12:00:00Z"

func (q *recoverRequest) parse() error {
	var fe fieldErrors
	if q.Since == "" {
		fe.add("since", "is required")
	} else if t, err := time.Parse(time.RFC3339Nano, q.Since); err != nil {
		fe.add("since", rfc3339Message)
	} else {
		q.since = t
	}
	if q.Until != nil {
		if t, err := time.Parse(time.RFC3339Nano, *q.Until); err != nil {
			fe.add("until", rfc3339Message)
		} else {
			q.until = &t
		}
	}
	if len(fe) == 0 && q.until != nil && !q.until.After(q.since) {
		fe.add("until", "must be after since")
	}
	return fe.err()
}

func (q recoverRequest) validate() error { return (&q).parse() }

type recoverResponse struct {
	Queued         int `json:"queued"`
	PayloadExpired int `json:"payload_expired"`
}

// handleRecoverEndpoint gives every failed delivery of the endpoint created
// in [since, until) a new attempt series. They are parked for the
// dispatcher's unparker, which releases them oldest first at the pace it
// releases a closed breaker's backlog; the answer says how many were queued
// and how many were left failed because their payload has expired.
func handleRecoverEndpoint(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := decode[recoverRequest](r, maxRequestBytes)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		_ = req.parse() // validate checked it; this keeps the parsed times
		window := d.MaxRecoverWindow
		if window <= 0 {
			window = DefaultMaxRecoverWindow
		}
		if req.since.Before(d.Now().Add(-window)) {
			writeProblem(w, r, d.Logger, invalid("since", "must be at most "+formatWindow(window)+" ago (the api's --max-recover-window)"))
			return
		}
		rec, err := d.Store.RecoverDeliveries(r.Context(), chi.URLParam(r, "id"), store.RecoverRange{Since: req.since, Until: req.until}, actorOf(r))
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		d.Logger.InfoContext(r.Context(), "endpoint_recovered", slog.String("endpoint", chi.URLParam(r, "id")), slog.String("actor", actorOf(r)),
			slog.Int("queued", rec.Queued), slog.Int("payload_expired", rec.PayloadExpired))
		encode(w, http.StatusAccepted, recoverResponse{Queued: rec.Queued, PayloadExpired: rec.PayloadExpired})
	})
}

// formatWindow says a duration in days when it is whole days.
func formatWindow(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		n := int(d / (24 * time.Hour))
		if n == 1 {
			return "1 day"
		}
		return strconv.Itoa(n) + " days"
	}
	return d.String()
}
