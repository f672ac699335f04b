package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/store"
)

type eventTypeJSON struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Archived    bool            `json:"archived"`
	CreatedAt   time.Time       `json:"created_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
}

var invoiceSchema = map[string]any{
	"type":     "object",
	"required": []string{"invoice", "amount"},
	"properties": map[string]any{
		"invoice": map[string]any{"type": "string"},
		"amount":  map[string]any{"type": "integer", "minimum": 0},
		"lines": map[string]any{"type": "array", "items": map[string]any{
			"type": "object", "properties": map[string]any{"sku/id": map[string]any{"type": "string"}},
		}},
	},
}

// TestEventTypeCRUD: register, read, list in pages, change and remove
// schemas, archive.
func TestEventTypeCRUD(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	r := b.do(t, "POST", "/v1/event-types", map[string]any{"name": "invoice.paid", "description": "paid", "schema": invoiceSchema})
	requireStatus(t, http.StatusCreated, r)
	require.Equal(t, "/v1/event-types/invoice.paid", r.Header.Get("Location"))
	created := decodeJSON[eventTypeJSON](t, r)
	require.Equal(t, "paid", created.Description)
	require.False(t, created.Archived)
	require.JSONEq(t, mustJSON(t, invoiceSchema), string(created.Schema))

	got := decodeJSON[eventTypeJSON](t, b.do(t, "GET", "/v1/event-types/invoice.paid", nil))
	require.Equal(t, created, got)

	for i := range 4 {
		requireStatus(t, http.StatusCreated, b.do(t, "POST", "/v1/event-types", map[string]any{"name": fmt.Sprintf("user.e%d", i)}))
	}
	var names []string
	after := ""
	for range 10 {
		r := b.do(t, "GET", "/v1/event-types?limit=2"+after, nil)
		requireStatus(t, http.StatusOK, r)
		page := decodeJSON[listJSON[eventTypeJSON]](t, r)
		for _, e := range page.Data {
			names = append(names, e.Name)
		}
		if page.NextCursor == nil {
			break
		}
		after = "&after=" + *page.NextCursor
	}
	require.Equal(t, []string{"invoice.paid", "user.e0", "user.e1", "user.e2", "user.e3"}, names)

	r = b.do(t, "PATCH", "/v1/event-types/invoice.paid", map[string]any{"description": "paid in full"})
	requireStatus(t, http.StatusOK, r)
	patched := decodeJSON[eventTypeJSON](t, r)
	require.Equal(t, "paid in full", patched.Description)
	require.JSONEq(t, mustJSON(t, invoiceSchema), string(patched.Schema), "a PATCH without schema keeps it")
	r = b.do(t, "PATCH", "/v1/event-types/invoice.paid", map[string]any{"schema": nil, "archived": true})
	requireStatus(t, http.StatusOK, r)
	patched = decodeJSON[eventTypeJSON](t, r)
	require.Equal(t, "null", string(patched.Schema))
	require.True(t, patched.Archived)

	requireStatus(t, http.StatusNoContent, b.do(t, "DELETE", "/v1/event-types/user.e0", nil))
	requireProblem(t, http.StatusNotFound, b.do(t, "GET", "/v1/event-types/user.e0", nil))
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// TestEventTypeBadInput: every refusal names its field, and nothing is
// stored.
func TestEventTypeBadInput(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	requireStatus(t, http.StatusCreated, b.do(t, "POST", "/v1/event-types", map[string]any{"name": "a.b"}))
	schemaBlind := docBlind("the document does not compile JSON Schemas")
	for _, tc := range []struct {
		name  string
		body  any
		field string
		opts  []callOpt
	}{
		{"no name", map[string]any{}, "name", nil},
		{"bad name", map[string]any{"name": "a..b"}, "name", nil},
		{"wildcard name", map[string]any{"name": "invoice.*"}, "name", nil},
		{"schema of wrong keyword type", map[string]any{"name": "x.y", "schema": map[string]any{"type": 12}}, "schema", []callOpt{schemaBlind}},
		{"schema not an object", map[string]any{"name": "x.y", "schema": "string"}, "schema", nil},
		{"schema with a bad pattern", map[string]any{"name": "x.y", "schema": map[string]any{"pattern": "("}}, "schema", []callOpt{schemaBlind}},
		{"schema naming a file", map[string]any{"name": "x.y", "schema": map[string]any{"$ref": "file:///etc/passwd"}}, "schema", []callOpt{schemaBlind}},
		{"schema naming a URL", map[string]any{"name": "x.y", "schema": map[string]any{"$ref": "https://example.com/s.json"}}, "schema", []callOpt{schemaBlind}},
		{"description too long", map[string]any{"name": "x.y", "description": string(make([]rune, 1025))}, "description", nil},
		{"unknown field", map[string]any{"name": "x.y", "Schema": map[string]any{}}, "Schema", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireFieldError(t, http.StatusBadRequest, b.do(t, "POST", "/v1/event-types", tc.body, tc.opts...), tc.field)
		})
	}
	requireFieldError(t, http.StatusBadRequest, b.do(t, "PATCH", "/v1/event-types/a.b", map[string]any{"schema": map[string]any{"minimum": "x"}}, schemaBlind), "schema")
	requireFieldError(t, http.StatusBadRequest, b.do(t, "PATCH", "/v1/event-types/a.b", map[string]any{"archived": 1}), "archived")
	requireFieldError(t, http.StatusBadRequest, b.do(t, "GET", "/v1/event-types?after=a..b", nil), "after")
	requireProblem(t, http.StatusConflict, b.do(t, "POST", "/v1/event-types", map[string]any{"name": "a.b"}))
	list := decodeJSON[listJSON[eventTypeJSON]](t, b.do(t, "GET", "/v1/event-types", nil))
	require.Len(t, list.Data, 1)
	require.Equal(t, "null", string(list.Data[0].Schema), "no refused PATCH changed it")
}

// TestEventTypeDeleteArchivesWhenReferenced: a type messages name is
// archived, not deleted, and the answer says so.
func TestEventTypeDeleteArchivesWhenReferenced(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	requireStatus(t, http.StatusCreated, b.do(t, "POST", "/v1/event-types", map[string]any{"name": "invoice.paid"}))
	b.sendMessage(t, "acme", "invoice.paid")
	r := b.do(t, "DELETE", "/v1/event-types/invoice.paid", nil)
	requireStatus(t, http.StatusOK, r)
	require.True(t, decodeJSON[eventTypeJSON](t, r).Archived)
	require.True(t, decodeJSON[eventTypeJSON](t, b.do(t, "GET", "/v1/event-types/invoice.paid", nil)).Archived)
}

// TestEventTypeTenantTokens: tenant tokens read the catalogue and change
// nothing in it.
func TestEventTypeTenantTokens(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	requireStatus(t, http.StatusCreated, b.do(t, "POST", "/v1/event-types", map[string]any{"name": "invoice.paid"}))
	tok, _ := b.scopedToken(t, store.NewAPIToken{Scope: store.ScopeTenant, Name: "acme", TenantID: "acme"})
	as := withHeader("Authorization", "Bearer "+tok)
	requireStatus(t, http.StatusOK, b.do(t, "GET", "/v1/event-types", nil, as))
	requireStatus(t, http.StatusOK, b.do(t, "GET", "/v1/event-types/invoice.paid", nil, as))
	requireProblem(t, http.StatusForbidden, b.do(t, "POST", "/v1/event-types", map[string]any{"name": "mine"}, as))
	requireProblem(t, http.StatusForbidden, b.do(t, "PATCH", "/v1/event-types/invoice.paid", map[string]any{"archived": true}, as))
	requireProblem(t, http.StatusForbidden, b.do(t, "DELETE", "/v1/event-types/invoice.paid", nil, as))
}

// TestStrictEventTypes: with strict mode on, unknown and archived types
// are refused naming event_type, a payload breaking its schema is refused
// naming the JSON pointer of the first violation, and a conforming
// message is accepted. Catalogue changes apply to the next message.
func TestStrictEventTypes(t *testing.T) {
	t.Parallel()
	_, b := setup(t, func(d *api.Deps) { d.StrictEventTypes = true })
	blind := docBlind("the catalogue's contents are not in the document")
	send := func(eventType string, payload any) *response {
		return b.do(t, "POST", "/v1/messages", map[string]any{"tenant_id": "acme", "event_type": eventType, "payload": payload}, blind)
	}
	refused := func(r *response, field string) {
		t.Helper()
		p := requireFieldError(t, http.StatusUnprocessableEntity, r, field)
		require.Len(t, p.Errors, 1)
	}
	b.createEndpoint(t, "acme")
	refused(send("invoice.paid", map[string]any{}), "event_type")

	requireStatus(t, http.StatusCreated, b.do(t, "POST", "/v1/event-types", map[string]any{"name": "invoice.paid", "schema": invoiceSchema}))
	requireStatus(t, http.StatusAccepted, send("invoice.paid", map[string]any{"invoice": "in_1", "amount": 4200}))
	refused(send("invoice.paid", map[string]any{"invoice": "in_1", "amount": "4200"}), "/payload/amount")
	refused(send("invoice.paid", map[string]any{"invoice": "in_1", "amount": -1}), "/payload/amount")
	refused(send("invoice.paid", map[string]any{"invoice": "in_1"}), "/payload")
	refused(send("invoice.paid", []int{1}), "/payload")
	refused(send("invoice.paid", map[string]any{"invoice": "in_1", "amount": 1, "lines": []any{map[string]any{"sku/id": "a"}, map[string]any{"sku/id": 7}}}), "/payload/lines/1/sku~1id")

	// Schemas change at once in this process.
	requireStatus(t, http.StatusOK, b.do(t, "PATCH", "/v1/event-types/invoice.paid", map[string]any{"schema": nil}))
	requireStatus(t, http.StatusAccepted, send("invoice.paid", "anything"))
	requireStatus(t, http.StatusOK, b.do(t, "PATCH", "/v1/event-types/invoice.paid", map[string]any{"archived": true}))
	refused(send("invoice.paid", map[string]any{}), "event_type")
	requireStatus(t, http.StatusOK, b.do(t, "PATCH", "/v1/event-types/invoice.paid", map[string]any{"archived": false}))
	requireStatus(t, http.StatusAccepted, send("invoice.paid", 1))
	require.Equal(t, 3, b.counts(t)["messages"], "no refused message was stored")
}

// TestStrictModeSeesOtherProcessesChanges: a catalogue change made by
// another api process shows once the copy is older than the refresh.
func TestStrictModeSeesOtherProcessesChanges(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	_, b := setup(t, func(d *api.Deps) { d.StrictEventTypes, d.Now, d.CatalogueRefresh = true, now, time.Minute })
	blind := docBlind("the catalogue's contents are not in the document")
	body := map[string]any{"tenant_id": "acme", "event_type": "order.created", "payload": 1}
	requireFieldError(t, http.StatusUnprocessableEntity, b.do(t, "POST", "/v1/messages", body, blind), "event_type")
	// Another process registers the type: straight into the store.
	_, err := b.store.CreateEventType(t.Context(), store.EventType{Name: "order.created"})
	require.NoError(t, err)
	requireFieldError(t, http.StatusUnprocessableEntity, b.do(t, "POST", "/v1/messages", body, blind), "event_type")
	offset.Store(int64(time.Minute))
	requireStatus(t, http.StatusAccepted, b.do(t, "POST", "/v1/messages", body))
}

// TestNonStrictAcceptsAnything: without strict mode, unknown types,
// archived types and payloads breaking a schema are accepted as before.
func TestNonStrictAcceptsAnything(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	requireStatus(t, http.StatusCreated, b.do(t, "POST", "/v1/event-types", map[string]any{"name": "invoice.paid", "schema": invoiceSchema, "archived": true}))
	for _, body := range []map[string]any{
		{"tenant_id": "acme", "event_type": "never.registered", "payload": 1},
		{"tenant_id": "acme", "event_type": "invoice.paid", "payload": map[string]any{"amount": "x"}},
	} {
		requireStatus(t, http.StatusAccepted, b.do(t, "POST", "/v1/messages", body))
	}
}
