package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/hookd/hookd/internal/store"
)

// DefaultCatalogueRefresh is how long the api trusts its copy of the
// event type catalogue before reading it again.
const DefaultCatalogueRefresh = 5 * time.Second

// schemaPrinter renders the validator's messages.
var schemaPrinter = message.NewPrinter(language.English)

// errNoRemoteSchemas refuses every $ref outside the schema itself: a
// schema may not make the api read a file or a URL.
var errNoRemoteSchemas = errors.New("only references within the schema are allowed")

type refuseLoader struct{}

func (refuseLoader) Load(string) (any, error) { return nil, errNoRemoteSchemas }

// compileSchema compiles a JSON Schema (draft 2020-12 unless it names
// another draft with $schema) for the event type name.
func compileSchema(name string, raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("is not valid JSON: %w", err)
	}
	switch doc.(type) {
	case map[string]any, bool:
	default:
		return nil, errors.New("must be a JSON object or a boolean")
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refuseLoader{})
	url := "urn:hookd:event-type:" + name
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// catalogueEntry is what strict mode needs of one event type.
type catalogueEntry struct {
	archived bool
	schema   *jsonschema.Schema // nil: any payload
}

// catalogueLoader reads the whole catalogue.
type catalogueLoader interface {
	ListEventTypes(ctx context.Context, p store.Page) ([]store.EventType, error)
}

var _ catalogueLoader = (*store.Store)(nil)

// eventCatalogue is the api's copy of the event type catalogue, schemas
// compiled, so strict mode checks a message without a statement of its
// own. The copy is read again when it is older than refresh (the
// catalogue changes rarely; other api processes' changes show within that
// time) and at once after this process changed the catalogue.
type eventCatalogue struct {
	loader  catalogueLoader
	now     func() time.Time
	refresh time.Duration

	loadMu sync.Mutex // one load at a time

	mu       sync.RWMutex
	types    map[string]catalogueEntry
	loadedAt time.Time
	valid    bool
	// epoch counts invalidations; a load that raced with one is not kept.
	epoch uint64
}

func newEventCatalogue(loader catalogueLoader, now func() time.Time, refresh time.Duration) *eventCatalogue {
	if refresh <= 0 {
		refresh = DefaultCatalogueRefresh
	}
	return &eventCatalogue{loader: loader, now: now, refresh: refresh}
}

// current returns the catalogue, reading it when the copy is stale.
func (c *eventCatalogue) current(ctx context.Context) (map[string]catalogueEntry, error) {
	if types, ok := c.fresh(); ok {
		return types, nil
	}
	c.loadMu.Lock()
	defer c.loadMu.Unlock()
	if types, ok := c.fresh(); ok {
		return types, nil
	}
	c.mu.RLock()
	epoch := c.epoch
	c.mu.RUnlock()
	at := c.now()
	list, err := c.loader.ListEventTypes(ctx, store.Page{})
	if err != nil {
		return nil, fmt.Errorf("load event type catalogue: %w", err)
	}
	types := make(map[string]catalogueEntry, len(list))
	for _, e := range list {
		entry := catalogueEntry{archived: e.Archived}
		if len(e.Schema) > 0 {
			// Every stored schema compiled when it was written.
			if entry.schema, err = compileSchema(e.Name, e.Schema); err != nil {
				return nil, fmt.Errorf("compile schema of event type %s: %w", e.Name, err)
			}
		}
		types[e.Name] = entry
	}
	c.mu.Lock()
	if c.epoch == epoch {
		c.types, c.loadedAt, c.valid = types, at, true
	}
	c.mu.Unlock()
	return types, nil
}

func (c *eventCatalogue) fresh() (map[string]catalogueEntry, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.types, c.valid && c.now().Sub(c.loadedAt) < c.refresh
}

// invalidate makes the next check read the catalogue again.
func (c *eventCatalogue) invalidate() {
	c.mu.Lock()
	c.valid = false
	c.epoch++
	c.mu.Unlock()
}

// unprocessableError is a request that is well-formed but breaks a rule of
// the data it names: strict mode's unknown types and schema violations.
type unprocessableError struct {
	field, message string
}

func (e *unprocessableError) Error() string { return e.field + ": " + e.message }

// check applies strict mode to a message: its type is registered and not
// archived, and its payload matches the type's schema. A violation is
// named by the JSON pointer of the first failing value in the request
// body, such as /payload/amount.
func (c *eventCatalogue) check(ctx context.Context, eventType string, payload []byte) error {
	types, err := c.current(ctx)
	if err != nil {
		return err
	}
	entry, ok := types[eventType]
	switch {
	case !ok:
		return &unprocessableError{field: "event_type", message: "is not a registered event type (strict mode: register it with POST /v1/event-types)"}
	case entry.archived:
		return &unprocessableError{field: "event_type", message: "is archived: strict mode accepts no new messages of it"}
	case entry.schema == nil:
		return nil
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return invalid("payload", "is not valid JSON")
	}
	err = entry.schema.Validate(inst)
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		leaf := firstViolation(ve)
		return &unprocessableError{field: payloadPointer(leaf.InstanceLocation), message: leaf.ErrorKind.LocalizedString(schemaPrinter)}
	}
	return err
}

// firstViolation descends to the first leaf of a validation error tree:
// the innermost keyword that failed.
func firstViolation(ve *jsonschema.ValidationError) *jsonschema.ValidationError {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	return ve
}

// payloadPointer is the RFC 6901 JSON pointer, in the request body, of a
// location in the payload.
func payloadPointer(location []string) string {
	var b strings.Builder
	b.WriteString("/payload")
	esc := strings.NewReplacer("~", "~0", "/", "~1")
	for _, tok := range location {
		b.WriteByte('/')
		b.WriteString(esc.Replace(tok))
	}
	return b.String()
}
