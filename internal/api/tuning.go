package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/tuning"
)

// MaxTuneRange is the longest range POST .../tune may read: a month, the
// most history retention normally keeps.
const MaxTuneRange = 31 * 24 * time.Hour

// tuneRequest is POST /v1/traffic-classes/{name}/tune's optional body: the
// range [since, until) of the log to read, by default the last
// tuning.DefaultWindow up to now.
type tuneRequest struct {
	Since *string `json:"since"`
	Until *string `json:"until"`

	since, until time.Time
}

func (q *tuneRequest) parse(now time.Time) error {
	var fe fieldErrors
	q.until = now
	if q.Until != nil {
		if t, err := time.Parse(time.RFC3339Nano, *q.Until); err != nil {
			fe.add("until", rfc3339Message)
		} else {
			q.until = t
		}
	}
	q.since = q.until.Add(-tuning.DefaultWindow)
	if q.Since != nil {
		if t, err := time.Parse(time.RFC3339Nano, *q.Since); err != nil {
			fe.add("since", rfc3339Message)
		} else {
			q.since = t
		}
	}
	if len(fe) == 0 {
		switch {
		case !q.until.After(q.since):
			fe.add("until", "must be after since")
		case q.until.Sub(q.since) > MaxTuneRange:
			fe.add("since", "must be at most 31 days before until")
		}
	}
	return fe.err()
}

// validate is decode's hook; parse, with the api's clock for the default
// range, checks every field.
func (q tuneRequest) validate() error { return nil }

// decodeTuneRequest reads the optional body; none means the defaults.
func decodeTuneRequest(r *http.Request, now time.Time) (tuneRequest, error) {
	var req tuneRequest
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxRequestBytes))
	if err != nil {
		return req, decodeError(err, maxRequestBytes)
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := checkJSONContentType(r); err != nil {
			return req, err
		}
		if req, err = decodeBytes[tuneRequest](body, maxRequestBytes); err != nil {
			return req, err
		}
	}
	return req, req.parse(now)
}

func handleGetRecommendation(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec, err := tuning.Get(r.Context(), d.Store, chi.URLParam(r, "name"))
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, rec)
	})
}

// tuneStatusJSON is an on-demand pass's request as POST and GET
// /v1/traffic-classes/{name}/tune answer it.
type tuneStatusJSON struct {
	ID          int64      `json:"id"`
	Class       string     `json:"class"`
	Status      string     `json:"status"`
	Since       time.Time  `json:"since"`
	Until       time.Time  `json:"until"`
	RequestedAt time.Time  `json:"requested_at"`
	StartedAt   *time.Time `json:"started_at"`
	FinishedAt  *time.Time `json:"finished_at"`
	Error       string     `json:"error"`
}

func tuneStatusOf(r store.TuneRequest) tuneStatusJSON {
	return tuneStatusJSON{ID: r.ID, Class: r.Class, Status: r.Status, Since: r.Since.UTC(), Until: r.Until.UTC(),
		RequestedAt: r.RequestedAt.UTC(), StartedAt: utcOrNil(r.StartedAt), FinishedAt: utcOrNil(r.FinishedAt), Error: r.Error}
}

func utcOrNil(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// handleTuneClass queues a tuning pass of the class for the fleet's tuning
// leader (the api never runs one) and answers 202 with the request, whose
// status GET .../tune gives; 409 while one of the class is queued or
// running.
func handleTuneClass(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := decodeTuneRequest(r, d.Now())
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		name := chi.URLParam(r, "name")
		if _, err := d.Store.GetClass(r.Context(), name); err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		queued, err := d.Store.QueueTune(r.Context(), name, req.since, req.until)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		w.Header().Set("Location", "/v1/traffic-classes/"+name+"/tune")
		encode(w, http.StatusAccepted, tuneStatusOf(queued))
	})
}

// handleGetClassTune answers the class's latest on-demand pass request and
// where it stands; 404 without one.
func handleGetClassTune(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := chi.URLParam(r, "name")
		if _, err := d.Store.GetClass(r.Context(), name); err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		latest, err := d.Store.LatestTune(r.Context(), name)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, tuneStatusOf(latest))
	})
}

func handleRejectRecommendation(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec, err := tuning.Reject(r.Context(), d.Store, chi.URLParam(r, "name"))
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, rec)
	})
}

// handleApplyRecommendation makes a proposal (proposed or shadowing) the
// class's config now, as the admin's call: history row, traffic_class.tuned
// event, status applied.
func handleApplyRecommendation(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := chi.URLParam(r, "name")
		rec, err := tuning.Get(r.Context(), d.Store, name)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		if rec.Status != tuning.StatusProposed && rec.Status != tuning.StatusShadowing {
			writeProblem(w, r, d.Logger, tuning.ErrNothingToApply)
			return
		}
		was := rec.Status
		rec.Reasons = append(rec.Reasons, "applied by "+actorOf(r))
		if _, err := tuning.Apply(r.Context(), d.Store, rec, actorOf(r), was); err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		rec, err = tuning.Get(r.Context(), d.Store, name)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, rec)
	})
}

// tuningResponse is one tuned change of a class's history.
type tuningResponse struct {
	ID        int64           `json:"id"`
	At        time.Time       `json:"at"`
	Actor     string          `json:"actor"`
	OldConfig json.RawMessage `json:"old_config"`
	NewConfig json.RawMessage `json:"new_config"`
	Figures   json.RawMessage `json:"figures"`
	Evidence  json.RawMessage `json:"evidence"`
	Reasons   json.RawMessage `json:"reasons"`
}

// maxTunings is how many changes the history route lists.
const maxTunings = 100

func handleListTunings(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := chi.URLParam(r, "name")
		if _, err := d.Store.GetClass(r.Context(), name); err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		list, err := d.Store.ListTunings(r.Context(), name, maxTunings)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		out := make([]tuningResponse, len(list))
		for i, t := range list {
			out[i] = tuningResponse{ID: t.ID, At: t.At, Actor: t.Actor, OldConfig: t.OldConfig, NewConfig: t.NewConfig,
				Figures: t.Figures, Evidence: tuning.StoredEvidence(t.Evidence), Reasons: t.Reasons}
		}
		encode(w, http.StatusOK, listResponse[tuningResponse]{Data: out})
	})
}
