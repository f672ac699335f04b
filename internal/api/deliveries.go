package api

import (
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/hookd/hookd/internal/store"
)

type deliveryResponse struct {
	ID               string     `json:"id"`
	MessageID        string     `json:"message_id"`
	EndpointID       string     `json:"endpoint_id"`
	TenantID         string     `json:"tenant_id"`
	Status           string     `json:"status"`
	AttemptCount     int        `json:"attempt_count"`
	Series           int        `json:"series"`
	LastAttemptAt    *time.Time `json:"last_attempt_at"`
	NextAttemptAt    *time.Time `json:"next_attempt_at"`
	LastStatusCode   *int       `json:"last_status_code"`
	LastError        *string    `json:"last_error"`
	BreakerOpenUntil *time.Time `json:"breaker_open_until"`
	DeliveredAt      *time.Time `json:"delivered_at"`
	CreatedAt        time.Time  `json:"created_at"`
	UpdatedAt        time.Time  `json:"updated_at"`
}

func toDelivery(d store.Delivery) deliveryResponse {
	return deliveryResponse{
		ID: d.ID, MessageID: d.MessageID, EndpointID: d.EndpointID, TenantID: d.TenantID, Status: d.Status,
		AttemptCount: d.AttemptCount, Series: d.Series, LastAttemptAt: d.LastAttemptAt, NextAttemptAt: d.NextAttemptAt,
		LastStatusCode: d.LastStatusCode, LastError: d.LastError, BreakerOpenUntil: d.BreakerOpenUntil,
		DeliveredAt: d.DeliveredAt, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt,
	}
}

type attemptResponse struct {
	ID              int64     `json:"id"`
	DeliveryID      string    `json:"delivery_id"`
	MessageID       string    `json:"message_id"`
	EndpointID      string    `json:"endpoint_id"`
	AttemptNumber   int       `json:"attempt_number"`
	AttemptedAt     time.Time `json:"attempted_at"`
	DurationMS      float64   `json:"duration_ms"`
	StatusCode      *int      `json:"status_code"`
	ErrorClass      *string   `json:"error_class"`
	Classification  string    `json:"classification"`
	ResponseExcerpt string    `json:"response_excerpt"`
	Trial           bool      `json:"trial"`
	// TimeoutMS is the timeout the attempt was given; null for attempts
	// logged before the log recorded it.
	TimeoutMS *int64 `json:"timeout_ms"`
}

func toAttempt(a store.Attempt) attemptResponse {
	out := attemptResponse{
		ID: a.ID, DeliveryID: a.DeliveryID, MessageID: a.MessageID, EndpointID: a.EndpointID,
		AttemptNumber: a.AttemptNumber, AttemptedAt: a.AttemptedAt,
		DurationMS: float64(a.Duration) / float64(time.Millisecond), StatusCode: a.StatusCode,
		Classification: a.Classification, ResponseExcerpt: a.ResponseExcerpt, Trial: a.Trial,
	}
	if a.ErrorClass != "" {
		out.ErrorClass = &a.ErrorClass
	}
	if a.Timeout > 0 {
		ms := a.Timeout.Milliseconds()
		out.TimeoutMS = &ms
	}
	return out
}

func handleGetDelivery(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		del, err := d.Store.GetDelivery(r.Context(), chi.URLParam(r, "id"))
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, toDelivery(del))
	})
}

func handleRetryDelivery(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		del, err := d.Store.RetryDelivery(r.Context(), chi.URLParam(r, "id"), d.Enqueuer)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusAccepted, toDelivery(del))
	})
}

// handleSkipDelivery lets a FIFO queue that the delivery blocks go on
// without it (the endpoint's on_exhausted is block).
func handleSkipDelivery(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		del, err := d.Store.SkipDelivery(r.Context(), chi.URLParam(r, "id"), actorOf(r), d.Enqueuer)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, toDelivery(del))
	})
}

func handleListDeliveryAttempts(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "id")
		if _, err := d.Store.GetDelivery(r.Context(), id); err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		listAttempts(w, r, d, store.AttemptFilter{DeliveryID: id})
	})
}

func handleListEndpointAttempts(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "id")
		if _, err := d.Store.GetEndpoint(r.Context(), id); err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		listAttempts(w, r, d, store.AttemptFilter{EndpointID: id})
	})
}

var classifications = map[string]bool{"success": true, "failure": true, "ignore": true, "auth_failure": true, "blocked": true}

// listAttempts serves a newest-first page of attempts, filtered by outcome
// and time range from the query string.
func listAttempts(w http.ResponseWriter, r *http.Request, d Deps, f store.AttemptFilter) {
	q := r.URL.Query()
	var fe fieldErrors
	page := parsePage(&fe, q)
	if page.After != "" {
		k, ok := store.ParseAttemptCursor(page.After)
		if !ok {
			fe.add("after", "must be a cursor from a previous page")
		}
		f.After = k
	}
	f.Limit = page.Limit + 1
	if o := q.Get("outcome"); o != "" {
		if !classifications[o] {
			fe.add("outcome", "must be one of success, failure, ignore, auth_failure, blocked")
		}
		f.Classification = o
	}
	f.Since = parseTime(&fe, q, "since")
	f.Until = parseTime(&fe, q, "until")
	if err := fe.err(); err != nil {
		writeProblem(w, r, d.Logger, err)
		return
	}
	list, err := d.Store.ListAttempts(r.Context(), f)
	if err != nil {
		writeProblem(w, r, d.Logger, err)
		return
	}
	encode(w, http.StatusOK, pageOf(list, page.Limit, func(a store.Attempt) string { return store.AttemptKey{At: a.AttemptedAt, ID: a.ID}.Cursor() },
		toAttempt))
}

// parsePage reads limit and after.
func parsePage(fe *fieldErrors, q url.Values) store.Page {
	p := store.Page{Limit: defaultPageLimit, After: q.Get("after")}
	if !storable(p.After) {
		fe.add("after", "must be the next_cursor of a previous page")
		p.After = ""
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxPageLimit {
			fe.add("limit", "must be an integer from 1 to "+strconv.Itoa(maxPageLimit))
		} else {
			p.Limit = n
		}
	}
	return p
}

// parsePageAfter reads limit and after, where after is the key of a list
// ordered by keys that match pattern (an id or a name).
func parsePageAfter(fe *fieldErrors, q url.Values, pattern *regexp.Regexp) store.Page {
	p := parsePage(fe, q)
	if p.After != "" && !pattern.MatchString(p.After) {
		fe.add("after", "must be the next_cursor of a previous page")
	}
	return p
}

func parseTime(fe *fieldErrors, q url.Values, name string) *time.Time {
	s := q.Get(name)
	if s == "" {
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		fe.add(name, "must be an RFC 3339 timestamp such as 2026-11-30T12:00:00Z")
		return nil
	}
	return &t
}
