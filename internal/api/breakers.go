package api

import (
	"context"
	"errors"
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
	ConsecutiveFailures int        `json:"consecutive_failures"`
	Trips               int64      `json:"trips"`
	UpdatedAt           time.Time  `json:"updated_at"`
}

func toBreaker(st store.BreakerStatus, c breaker.Config) breakerResponse {
	b := st.Breaker
	out := breakerResponse{
		EndpointID: st.EndpointID,
		// Half-open is derived from the clock: an open breaker whose
		// open_until has passed admits a probe now.
		State:               b.EffectiveState(st.Now).String(),
		Generation:          b.Generation,
		Observations:        st.Observations,
		Failures:            st.Failures,
		FailureThreshold:    c.FailureRateThreshold,
		MinThroughput:       c.MinThroughput,
		Window:              c.Window.String(),
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
	if !b.OpenUntil.IsZero() {
		out.OpenUntil = &b.OpenUntil
	}
	return out
}

func handleGetBreaker(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		c := class.Breaker
		st, err := d.Store.GetBreakerStatus(r.Context(), e.ID, c)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		out := toBreaker(st, c)
		out.TrafficClass = class.Name
		encode(w, http.StatusOK, out)
	})
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
