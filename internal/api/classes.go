package api

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/trafficclass"
)

// decodeClass reads a traffic class body with trafficclass's strict codec
// (omitted fields take the documented defaults) and validates it.
func decodeClass(r *http.Request, name string) (trafficclass.Class, error) {
	if err := checkJSONContentType(r); err != nil {
		return trafficclass.Class{}, err
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxRequestBytes))
	if err != nil {
		return trafficclass.Class{}, &tooLargeError{field: "body", limit: maxRequestBytes}
	}
	if name != "" {
		// PUT names the class in the path; a body may repeat it.
		if body, err = withName(body, name); err != nil {
			return trafficclass.Class{}, err
		}
	}
	c, err := trafficclass.Decode(body)
	if err != nil {
		return trafficclass.Class{}, classError(err)
	}
	if err := c.Validate(); err != nil {
		return trafficclass.Class{}, classError(err)
	}
	return c, nil
}

// withName sets "name" in a JSON object body. A body that has a "name"
// member (exactly so: names are case-sensitive) must give the same name.
func withName(body []byte, name string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		return nil, invalid("body", "must be a JSON object")
	}
	if given, ok := m["name"]; ok {
		var s string
		if json.Unmarshal(given, &s) != nil || s != name {
			return nil, invalid("name", "must match the name in the path")
		}
	}
	n, _ := json.Marshal(name)
	m["name"] = n
	return json.Marshal(m)
}

// classError turns the class codec's and validator's field errors into a
// ValidationError.
func classError(err error) error {
	var fes breaker.FieldErrors
	if errors.As(err, &fes) {
		out := make([]FieldError, len(fes))
		for i, f := range fes {
			out[i] = FieldError{Field: f.Field, Message: f.Message}
			if f.Field == "" {
				out[i] = FieldError{Field: "body", Message: `has a field named "", which is not a known field`}
			}
		}
		return &ValidationError{Fields: out}
	}
	return invalid("body", err.Error())
}

func handleListClasses(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		list, err := d.Store.ListClasses(r.Context())
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, listResponse[trafficclass.Class]{Data: list})
	})
}

func handleGetClass(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := d.Store.GetClass(r.Context(), chi.URLParam(r, "name"))
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, c)
	})
}

func handleCreateClass(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := decodeClass(r, "")
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		c, err = d.Store.CreateClass(r.Context(), c)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		w.Header().Set("Location", "/v1/traffic-classes/"+c.Name)
		encode(w, http.StatusCreated, c)
	})
}

func handlePutClass(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := decodeClass(r, chi.URLParam(r, "name"))
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		c, created, err := d.Store.PutClass(r.Context(), c)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		status := http.StatusOK
		if created {
			status = http.StatusCreated
		}
		encode(w, status, c)
	})
}

func handleDeleteClass(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := d.Store.DeleteClass(r.Context(), chi.URLParam(r, "name")); err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// trafficResponse is an endpoint's measured traffic and the class it implies.
type trafficResponse struct {
	EndpointID       string   `json:"endpoint_id"`
	TrafficClass     string   `json:"traffic_class"`
	CurrentClass     string   `json:"current_class"`
	QuietRPS         *float64 `json:"quiet_rps"`
	HealthyErrorRate *float64 `json:"healthy_error_rate"`
	HistoryMinutes   int      `json:"history_minutes"`
	ImpliedClass     string   `json:"implied_class"`
	Reason           string   `json:"reason"`
	Changed          bool     `json:"changed"`
}

func toTraffic(rc store.Reclassification, changed bool) trafficResponse {
	return trafficResponse{
		EndpointID: rc.EndpointID, TrafficClass: rc.TrafficClass, CurrentClass: rc.OldClass,
		QuietRPS: number(rc.Measurement.QuietRPS), HealthyErrorRate: number(rc.Measurement.HealthyErrorRate),
		HistoryMinutes: rc.Measurement.Minutes, ImpliedClass: rc.NewClass, Reason: rc.Reason, Changed: changed,
	}
}

// number maps NaN (no data) to null.
func number(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

func handleGetTraffic(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		classes, err := d.Store.ListClasses(r.Context())
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		rc, err := d.Store.Classify(r.Context(), chi.URLParam(r, "id"), classes)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, toTraffic(rc, false))
	})
}

func handleReclassify(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		classes, err := d.Store.ListClasses(r.Context())
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		rc, err := d.Store.Reclassify(r.Context(), chi.URLParam(r, "id"), classes)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		out := toTraffic(rc, rc.Changed)
		if rc.Changed {
			out.CurrentClass = rc.NewClass
			delivery.LogReclassified(r.Context(), d.Logger, rc)
		}
		encode(w, http.StatusOK, out)
	})
}
