package api

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/store"
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
		c := d.breakerConfig(e)
		st, err := d.Store.GetBreakerStatus(r.Context(), e.ID, c)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, toBreaker(st, c))
	})
}

// breakerConfig returns the breaker config an endpoint runs under.
func (d Deps) breakerConfig(e store.Endpoint) breaker.Config {
	if d.BreakerConfig != nil {
		return d.BreakerConfig(e)
	}
	return breaker.DefaultConfig()
}
