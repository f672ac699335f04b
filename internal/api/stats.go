package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/hookd/hookd/internal/store"
)

// Bounds of the stats range in minutes.
const (
	defaultStatsMinutes = 60
	maxStatsMinutes     = 1440
)

// statsMinuteResponse is one minute of an endpoint's attempts by outcome.
type statsMinuteResponse struct {
	Minute      time.Time `json:"minute"`
	Success     int       `json:"success"`
	Failure     int       `json:"failure"`
	Ignore      int       `json:"ignore"`
	AuthFailure int       `json:"auth_failure"`
	Blocked     int       `json:"blocked"`
}

// statsResponse is an endpoint's outcomes per minute and the breaker
// transitions in the same range: the dashboard's chart.
type statsResponse struct {
	EndpointID string `json:"endpoint_id"`
	// Now is the database time the figures were read at.
	Now         time.Time             `json:"now"`
	From        time.Time             `json:"from"`
	Minutes     []statsMinuteResponse `json:"minutes"`
	Transitions []transitionResponse  `json:"transitions"`
}

func handleGetEndpointStats(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		minutes := defaultStatsMinutes
		if s := r.URL.Query().Get("minutes"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > maxStatsMinutes {
				writeProblem(w, r, d.Logger, invalid("minutes", "must be an integer from 1 to "+strconv.Itoa(maxStatsMinutes)))
				return
			}
			minutes = n
		}
		e, err := d.Store.GetEndpoint(r.Context(), chi.URLParam(r, "id"))
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		st, err := d.Store.EndpointStats(r.Context(), e.ID, minutes)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, toStats(e.ID, st))
	})
}

func toStats(endpointID string, st store.EndpointStats) statsResponse {
	out := statsResponse{
		EndpointID:  endpointID,
		Now:         st.Now,
		From:        st.From,
		Minutes:     make([]statsMinuteResponse, len(st.Minutes)),
		Transitions: make([]transitionResponse, len(st.Transitions)),
	}
	for i, m := range st.Minutes {
		out.Minutes[i] = statsMinuteResponse{
			Minute: m.Minute, Success: m.Success, Failure: m.Failure, Ignore: m.Ignore,
			AuthFailure: m.AuthFailure, Blocked: m.Blocked,
		}
	}
	for i, tr := range st.Transitions {
		out.Transitions[i] = toTransition(tr)
	}
	return out
}
