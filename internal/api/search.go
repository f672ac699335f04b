package api

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hookd/hookd/internal/store"
)

var (
	messageIDPattern  = regexp.MustCompile(`^msg_[0-7][0-9A-HJKMNP-TV-Z]{25}$`)
	deliveryIDPattern = regexp.MustCompile(`^dlv_[0-7][0-9A-HJKMNP-TV-Z]{25}$`)
)

// deliveryStatuses are the statuses a delivery search filters on, as
// deliveries show them.
var deliveryStatuses = []string{
	store.DeliveryPending, store.DeliveryDelivering, store.DeliveryDelivered, store.DeliveryFailed,
	store.DeliveryWaiting, store.DeliveryHeld, store.DeliveryExpired,
}

// messageSummaryResponse is a message in a search: without its
// deliveries, and without its payload unless asked.
type messageSummaryResponse struct {
	ID             string          `json:"id"`
	TenantID       string          `json:"tenant_id"`
	EventType      string          `json:"event_type"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	PayloadExpired *bool           `json:"payload_expired,omitempty"`
	IdempotencyKey *string         `json:"idempotency_key"`
	CreatedAt      time.Time       `json:"created_at"`
}

func toMessageSummary(m store.Message, withPayload bool) messageSummaryResponse {
	full := toMessage(m, withPayload)
	return messageSummaryResponse{
		ID: full.ID, TenantID: full.TenantID, EventType: full.EventType, Payload: full.Payload,
		PayloadExpired: full.PayloadExpired, IdempotencyKey: full.IdempotencyKey, CreatedAt: full.CreatedAt,
	}
}

// parseTimeRange reads since and until; since after until is refused.
func parseTimeRange(fe *fieldErrors, q url.Values) (since, until *time.Time) {
	since, until = parseTime(fe, q, "since"), parseTime(fe, q, "until")
	if since != nil && until != nil && since.After(*until) {
		fe.add("since", "must not be after until")
	}
	return since, until
}

// parseIDFilter reads an optional id filter of the query that must match
// pattern.
func parseIDFilter(fe *fieldErrors, q url.Values, name string, pattern *regexp.Regexp, what string) string {
	v := q.Get(name)
	if v != "" && !pattern.MatchString(v) {
		fe.add(name, "must be "+what)
	}
	return v
}

func handleSearchMessages(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		var fe fieldErrors
		f := store.MessageSearch{Tenants: requestTenants(r), EventType: q.Get("event_type")}
		if t := q.Get("tenant_id"); t != "" {
			validateTenantID(&fe, "tenant_id", t)
		}
		if f.EventType != "" {
			validateEventType(&fe, "event_type", f.EventType)
		}
		switch q.Get("include") {
		case "":
		case "payload":
			f.WithPayload = true
		default:
			fe.add("include", `must be "payload"`)
		}
		f.Since, f.Until = parseTimeRange(&fe, q)
		page := parsePageAfter(&fe, q, messageIDPattern)
		if err := fe.err(); err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		f.After, f.Limit = page.After, page.Limit+1
		list, err := d.Store.SearchMessages(r.Context(), f)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, pageOf(list, page.Limit, func(m store.Message) string { return m.ID },
			func(m store.Message) messageSummaryResponse { return toMessageSummary(m, f.WithPayload) }))
	})
}

func handleSearchDeliveries(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		var fe fieldErrors
		f := store.DeliverySearch{Tenants: requestTenants(r)}
		if t := q.Get("tenant_id"); t != "" {
			validateTenantID(&fe, "tenant_id", t)
		}
		if s := q.Get("status"); s != "" {
			for _, st := range strings.Split(s, ",") {
				if !slices.Contains(deliveryStatuses, st) {
					fe.add("status", "must be one or more of "+strings.Join(deliveryStatuses, ", ")+", comma-separated")
					break
				}
				f.Statuses = append(f.Statuses, st)
			}
		}
		f.EndpointID = parseIDFilter(&fe, q, "endpoint_id", endpointIDPattern, "an endpoint id (ep_...)")
		f.MessageID = parseIDFilter(&fe, q, "message_id", messageIDPattern, "a message id (msg_...)")
		f.Since, f.Until = parseTimeRange(&fe, q)
		page := parsePageAfter(&fe, q, deliveryIDPattern)
		if err := fe.err(); err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		f.After, f.Limit = page.After, page.Limit+1
		list, err := d.Store.SearchDeliveries(r.Context(), f)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, pageOf(list, page.Limit, func(del store.Delivery) string { return del.ID },
			toDelivery))
	})
}
