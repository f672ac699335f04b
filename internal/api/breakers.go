package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/trafficclass"
)

// breakerResponse is an endpoint's breaker as operators see it.
type breakerResponse struct {
	EndpointID          string     `json:"endpoint_id"`
	State               string     `json:"state"`
	Generation          int64      `json:"generation"`
	OpenedAt            *time.Time `json:"opened_at"`
	OpenUntil           *time.Time `json:"open_until"`
	FailureRate         float64    `json:"failure_rate"`
	Observations        int        `json:"observations"`
	Failures            int        `json:"failures"`
	TrafficClass        string     `json:"traffic_class"`
	FailureThreshold    float64    `json:"failure_rate_threshold"`
	MinThroughput       int        `json:"min_throughput"`
	Window              string     `json:"window"`
	TrialSuccesses      int        `json:"trial_successes"`
	HalfOpenTrials      int        `json:"half_open_trials"`
	TrialInFlight       bool       `json:"trial_in_flight"`
	ConsecutiveFailures int        `json:"consecutive_failures"`
	Trips               int64      `json:"trips"`
	TripsLast24h        int        `json:"trips_last_24h"`
	Enforce             bool       `json:"enforce"`
	UpdatedAt           time.Time  `json:"updated_at"`
	// Now is the database time the figures were read at, so a client can
	// count down to open_until without trusting its own clock.
	Now time.Time `json:"now"`
	// Endpoint fields, for lists and the dashboard.
	TenantID string `json:"tenant_id"`
	// URL is an http endpoint's; Type and Destination say what any other
	// delivers to (its destination without credentials; null for http).
	URL            string          `json:"url"`
	Type           string          `json:"type"`
	Destination    json.RawMessage `json:"destination"`
	EndpointStatus string          `json:"endpoint_status"`
	DisabledReason *string         `json:"disabled_reason"`
	// Tripped is the trip that took a breaker that is not closed out of
	// closed, with the window that tripped it; null when closed.
	Tripped *tripResponse `json:"tripped"`
	// Transitions are the latest transitions, newest first (detail only).
	Transitions []transitionResponse `json:"transitions,omitempty"`
}

// transitionResponse is one breaker transition with the window's figures
// at that moment and who made it: an open whose window rate sits near the
// threshold in normal operation is a false trip.
type transitionResponse struct {
	ID           int64      `json:"id"`
	From         string     `json:"from"`
	To           string     `json:"to"`
	At           time.Time  `json:"at"`
	Reason       string     `json:"reason"`
	FailureRate  float64    `json:"failure_rate"`
	Observations int        `json:"observations"`
	Failures     int        `json:"failures"`
	OpenUntil    *time.Time `json:"open_until"`
	Actor        string     `json:"actor"`
	Note         string     `json:"note"`
	Shadow       bool       `json:"shadow"`
}

// tripResponse is the window's figures at the trip of a breaker that is
// not closed: its own window starts empty on each open, so these are the
// figures that tripped it.
type tripResponse struct {
	At           time.Time `json:"at"`
	Reason       string    `json:"reason"`
	FailureRate  float64   `json:"failure_rate"`
	Observations int       `json:"observations"`
	Failures     int       `json:"failures"`
	Consecutive  int       `json:"consecutive_failures"`
}

func toTransition(r store.TransitionRecord) transitionResponse {
	out := transitionResponse{
		ID: r.ID, From: r.Transition.From.String(), To: r.Transition.To.String(), At: r.Transition.At,
		Reason: r.Transition.Reason, FailureRate: r.Transition.FailureRate, Observations: r.Transition.Observations,
		Failures: r.Transition.Failures, Actor: r.Actor, Note: r.Note, Shadow: r.Shadow,
	}
	if !r.Transition.OpenUntil.IsZero() {
		out.OpenUntil = &r.Transition.OpenUntil
	}
	return out
}

func toBreaker(sum store.BreakerSummary, class trafficclass.Class) breakerResponse {
	st, c, e := sum.Status, class.Breaker, sum.Endpoint
	b := st.Breaker
	out := breakerResponse{
		TrafficClass:   class.Name,
		HalfOpenTrials: c.HalfOpenTrials,
		TrialInFlight:  sum.TrialInFlight,
		TripsLast24h:   sum.TripsLast24h,
		Enforce:        class.Enforce,
		Now:            st.Now,
		TenantID:       e.TenantID,
		URL:            e.URL,
		Type:           endpointTypeOf(e),
		Destination:    destinationResponse(e),
		EndpointStatus: e.Status,
		DisabledReason: e.DisabledReason,
		EndpointID:     st.EndpointID,
		// Half-open is derived from the clock: an open breaker whose
		// open_until has passed admits a probe now.
		State:               b.EffectiveState(st.Now).String(),
		Generation:          b.Generation,
		Observations:        st.Observations,
		Failures:            st.Failures,
		FailureThreshold:    c.FailureRateThreshold,
		MinThroughput:       c.MinThroughput,
		Window:              trafficclass.FormatDuration(c.Window),
		TrialSuccesses:      b.TrialSuccesses,
		ConsecutiveFailures: b.Consecutive,
		Trips:               b.Trips,
		UpdatedAt:           st.UpdatedAt,
	}
	if st.Observations > 0 {
		out.FailureRate = float64(st.Failures) / float64(st.Observations)
	}
	if !b.OpenedAt.IsZero() {
		out.OpenedAt = &b.OpenedAt
	}
	if t := sum.Tripped; t != nil && b.State != breaker.StateClosed {
		out.Tripped = &tripResponse{At: t.At, Reason: t.Reason, FailureRate: t.FailureRate, Observations: t.Observations,
			Failures: t.Failures, Consecutive: t.Consecutive}
	}
	if !b.OpenUntil.IsZero() {
		out.OpenUntil = &b.OpenUntil
	}
	return out
}

func handleGetBreaker(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, err := breakerDetail(r.Context(), d, chi.URLParam(r, "id"))
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, out)
	})
}

// breakerDetail loads one endpoint's breaker with its latest transitions.
func breakerDetail(ctx context.Context, d Deps, id string) (breakerResponse, error) {
	e, err := d.Store.GetEndpoint(ctx, id)
	if err != nil {
		return breakerResponse{}, err
	}
	class, err := d.classOf(ctx, e)
	if err != nil {
		return breakerResponse{}, err
	}
	sum, err := d.Store.BreakerDetails(ctx, e.ID, class.Breaker)
	if err != nil {
		return breakerResponse{}, err
	}
	sum.Endpoint = e
	out := toBreaker(sum, class)
	trs, err := d.Store.ListTransitions(ctx, e.ID, nil, 20)
	if err != nil {
		return breakerResponse{}, err
	}
	out.Transitions = make([]transitionResponse, len(trs))
	for i, tr := range trs {
		out.Transitions[i] = toTransition(tr)
	}
	return out, nil
}

var breakerStates = map[string]bool{"": true, "closed": true, "open": true, "half_open": true, "isolated": true}

func handleListBreakers(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		var fe fieldErrors
		state := q.Get("state")
		if !breakerStates[state] {
			fe.add("state", "must be one of closed, open, half_open, isolated")
		}
		tenant := q.Get("tenant_id")
		if tenant != "" {
			validateTenantID(&fe, "tenant_id", tenant)
		}
		page := parsePage(&fe, q)
		if err := fe.err(); err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		classes, err := d.Store.ListClasses(r.Context())
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		byName := map[string]trafficclass.Class{}
		for _, c := range classes {
			byName[c.Name] = c
		}
		classFor := func(e store.Endpoint) trafficclass.Class {
			if c, ok := byName[e.EffectiveClass()]; ok {
				return c
			}
			if c, ok := byName[trafficclass.DefaultClass]; ok {
				return c
			}
			c, _ := trafficclass.Builtin(trafficclass.DefaultClass)
			return c
		}
		list, err := d.Store.ListBreakers(r.Context(), store.BreakerFilter{State: state, Tenants: requestTenants(r), Page: store.Page{After: page.After, Limit: page.Limit + 1}},
			func(e store.Endpoint) breaker.Config { return classFor(e).Breaker })
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, pageOf(list, page.Limit, func(sum store.BreakerSummary) string { return sum.Endpoint.ID },
			func(sum store.BreakerSummary) breakerResponse { return toBreaker(sum, classFor(sum.Endpoint)) }))
	})
}

type operateBreakerRequest struct {
	Reason string `json:"reason"`
}

func (o operateBreakerRequest) validate() error {
	if len([]rune(o.Reason)) > 500 {
		return invalid("reason", "must be at most 500 characters")
	}
	return nil
}

// handleOperateBreaker resets or isolates a breaker, recording who and why.
func handleOperateBreaker(d Deps, action string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req operateBreakerRequest
		if r.ContentLength != 0 {
			var err error
			if req, err = decode[operateBreakerRequest](r, maxRequestBytes); err != nil {
				writeProblem(w, r, d.Logger, err)
				return
			}
		}
		e, err := d.Store.GetEndpoint(r.Context(), chi.URLParam(r, "id"))
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		class, err := d.classOf(r.Context(), e)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		actor := actorOf(r)
		t, err := d.Store.OperateBreaker(r.Context(), e.ID, action, class.Breaker, store.TransitionMeta{Actor: actor, Note: req.Reason})
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		d.Logger.InfoContext(r.Context(), transitionLogNames[t.To],
			slog.String("endpoint", e.ID), slog.String("from", t.From.String()), slog.String("reason", t.Reason),
			slog.String("actor", actor), slog.String("note", req.Reason))
		out, err := breakerDetail(r.Context(), d, e.ID)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, out)
	})
}

var transitionLogNames = map[breaker.State]string{
	breaker.StateClosed:   "breaker_closed",
	breaker.StateIsolated: "breaker_isolated",
}

// classOf returns the traffic class an endpoint runs under; a class
// deleted under a racing update falls back to the default class as the
// dispatcher does.
func (d Deps) classOf(ctx context.Context, e store.Endpoint) (trafficclass.Class, error) {
	c, err := d.Store.GetClass(ctx, e.EffectiveClass())
	if errors.Is(err, store.ErrNotFound) {
		c, err = d.Store.GetClass(ctx, trafficclass.DefaultClass)
	}
	if errors.Is(err, store.ErrNotFound) {
		c, _ = trafficclass.Builtin(trafficclass.DefaultClass)
		return c, nil
	}
	return c, err
}
