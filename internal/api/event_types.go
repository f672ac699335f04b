package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/hookd/hookd/internal/store"
)

// eventTypeResponse is a catalogue entry as the API shows it.
type eventTypeResponse struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Archived    bool            `json:"archived"`
	CreatedAt   time.Time       `json:"created_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
}

func toEventType(e store.EventType) eventTypeResponse {
	out := eventTypeResponse{Name: e.Name, Description: e.Description, Schema: e.Schema, Archived: e.Archived,
		CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt}
	if len(out.Schema) == 0 {
		out.Schema = json.RawMessage("null")
	}
	return out
}

// isNull reports whether a raw JSON member is absent or null.
func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// validateSchema refuses a schema that does not compile.
func validateSchema(fe *fieldErrors, field, name string, raw json.RawMessage) {
	if isNull(raw) {
		return
	}
	if _, err := compileSchema(name, raw); err != nil {
		msg := err.Error()
		if len(msg) > 300 {
			msg = msg[:300] + "..."
		}
		fe.add(field, "is not a valid JSON Schema (draft 2020-12): "+msg)
	}
}

type createEventTypeRequest struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Archived    bool            `json:"archived"`
}

func (r createEventTypeRequest) validate() error {
	var fe fieldErrors
	validateEventType(&fe, "name", r.Name)
	validateDescription(&fe, "description", r.Description)
	validateSchema(&fe, "schema", r.Name, r.Schema)
	return fe.err()
}

type updateEventTypeRequest struct {
	Description *string         `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Archived    *bool           `json:"archived"`
}

func (r updateEventTypeRequest) validate() error {
	var fe fieldErrors
	if r.Description != nil {
		validateDescription(&fe, "description", *r.Description)
	}
	validateSchema(&fe, "schema", "patch", r.Schema)
	return fe.err()
}

// compactSchema stores a schema without insignificant whitespace.
func compactSchema(raw json.RawMessage) json.RawMessage {
	if isNull(raw) {
		return nil
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return raw
	}
	return buf.Bytes()
}

func handleCreateEventType(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := decode[createEventTypeRequest](r, maxRequestBytes)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		e, err := d.Store.CreateEventType(r.Context(), store.EventType{
			Name: req.Name, Description: req.Description, Schema: compactSchema(req.Schema), Archived: req.Archived,
		})
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		d.catalogue.invalidate()
		w.Header().Set("Location", "/v1/event-types/"+e.Name)
		encode(w, http.StatusCreated, toEventType(e))
	})
}

func handleListEventTypes(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var fe fieldErrors
		page := parsePageAfter(&fe, r.URL.Query(), eventTypePattern)
		if err := fe.err(); err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		list, err := d.Store.ListEventTypes(r.Context(), store.Page{After: page.After, Limit: page.Limit + 1})
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, pageOf(list, page.Limit, func(e store.EventType) string { return e.Name },
			toEventType))
	})
}

func handleGetEventType(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e, err := d.Store.GetEventType(r.Context(), chi.URLParam(r, "name"))
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, toEventType(e))
	})
}

func handleUpdateEventType(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := decode[updateEventTypeRequest](r, maxRequestBytes)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		e, err := d.Store.UpdateEventType(r.Context(), chi.URLParam(r, "name"), store.EventTypePatch{
			Description: req.Description, Archived: req.Archived,
			Schema: compactSchema(req.Schema), ClearSchema: req.Schema != nil && isNull(req.Schema),
		})
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		d.catalogue.invalidate()
		encode(w, http.StatusOK, toEventType(e))
	})
}

// handleDeleteEventType deletes an event type no message names (204), or
// archives one that messages name and answers it (200, archived true).
func handleDeleteEventType(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e, archived, err := d.Store.DeleteEventType(r.Context(), chi.URLParam(r, "name"))
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		d.catalogue.invalidate()
		if archived {
			encode(w, http.StatusOK, toEventType(e))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
