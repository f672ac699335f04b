package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/api/openapitest"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
	"github.com/hookd/hookd/internal/tuning"
)

const testToken = "hookd-test-token-5f1c0e"

// testBundle holds a test's server and the helpers to drive and inspect it.
type testBundle struct {
	db    *storetest.DB
	store *store.Store
	enq   *delivery.Enqueuer
	srv   *httptest.Server
	doc   *openapi3.T
	// router finds the documented operation of a request.
	router routers.Router
	// schemas validates bodies against the document's schemas.
	schemas *openapitest.Schemas

	mu sync.Mutex
	// seen records every (operationId, status) answered, for the coverage
	// check of the OpenAPI document.
	seen map[string]bool
}

// setup starts the API on a fresh database, with a real River insert-only
// client as its enqueuer. opts adjust the dependencies before the server is
// built.
func setup(t *testing.T, opts ...func(*api.Deps)) (*httptest.Server, *testBundle) {
	t.Helper()
	db := storetest.New(t)
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	require.NoError(t, err)
	enq := &delivery.Enqueuer{Client: rc}
	s := store.New(db.Pool, nil, store.WithOperationalEvents(store.OperationalEventsConfig{Enqueuer: enq}))
	deps := api.Deps{
		Store:    s,
		Enqueuer: enq,
		Token:    testToken,
		Rand:     rand.Reader,
		// No test depends on the machine's DNS: names resolve only when
		// a test says so (the SSRF guard resolves endpoint hosts).
		Resolver: hosts{},
	}
	for _, o := range opts {
		o(&deps)
	}
	srv := httptest.NewServer(api.NewServer(deps))
	t.Cleanup(srv.Close)
	doc, router := loadDocument(t)
	return srv, &testBundle{db: db, store: s, enq: enq, srv: srv, doc: doc, router: router, schemas: documentSchemas, seen: map[string]bool{}}
}

// document is the embedded OpenAPI document, loaded, validated and routed
// once per test binary: every check only reads it.
var (
	documentOnce    sync.Once
	documentDoc     *openapi3.T
	documentRouter  routers.Router
	documentSchemas *openapitest.Schemas
	documentErr     error
)

// loadDocument returns the embedded OpenAPI document, validated (which
// checks every example against its schema), and its router.
func loadDocument(t *testing.T) (*openapi3.T, routers.Router) {
	t.Helper()
	documentOnce.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(api.OpenAPIDocument())
		if err != nil {
			documentErr = fmt.Errorf("load: %w", err)
			return
		}
		if err := doc.Validate(loader.Context); err != nil {
			documentErr = fmt.Errorf("validate: %w", err)
			return
		}
		router, err := legacy.NewRouter(doc)
		if err != nil {
			documentErr = fmt.Errorf("route: %w", err)
			return
		}
		schemas, err := openapitest.New(api.OpenAPIDocument(), doc)
		if err != nil {
			documentErr = fmt.Errorf("schemas: %w", err)
			return
		}
		documentDoc, documentRouter, documentSchemas = doc, router, schemas
	})
	require.NoError(t, documentErr)
	return documentDoc, documentRouter
}

// filterOptions are the openapi3filter options every check uses: an
// undocumented status is an error, a request is checked as sent (without
// it kin-openapi puts a member's documented default in place of a null and
// accepts what the server refuses), and the security requirement is met by
// any well-formed bearer token (the document cannot know the real one).
func filterOptions() *openapi3filter.Options {
	return &openapi3filter.Options{
		IncludeResponseStatus: true,
		SkipSettingDefaults:   true,
		MultiError:            false,
		AuthenticationFunc: func(_ context.Context, in *openapi3filter.AuthenticationInput) error {
			if in.SecuritySchemeName != "bearerAuth" {
				return fmt.Errorf("unknown security scheme %q", in.SecuritySchemeName)
			}
			scheme, token, ok := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
				return errors.New("no bearer token")
			}
			return nil
		},
	}
}

// call is how one request deviates from a well-formed authorized JSON one.
type call struct {
	header      http.Header
	noAuth      bool
	contentType *string
	// docBlind names why a rejected request's fault cannot be caught by
	// checking the request against the document (a size limit has no
	// schema; kin-openapi reads only the first JSON value of a body), so the
	// document is not expected to reject it too.
	docBlind string
	// lenient marks a request the server accepts although the document is
	// stricter (a missing Content-Type, read as JSON).
	lenient bool
}

type callOpt func(*call)

func withHeader(k, v string) callOpt { return func(c *call) { c.header.Add(k, v) } }
func withoutAuth() callOpt           { return func(c *call) { c.noAuth = true } }
func withContentType(ct string) callOpt {
	return func(c *call) { c.contentType = &ct }
}
func docBlind(why string) callOpt { return func(c *call) { c.docBlind = why } }
func lenient() callOpt            { return func(c *call) { c.lenient = true } }

// response is a server answer, read in full.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// do sends one request to the server and checks it against the OpenAPI
// document both ways:
//   - the response must be documented for the operation (status, headers,
//     content type, body schema), whatever it is;
//   - a request the document accepts must not be answered 400 or 415, and a
//     request the server accepts (2xx) must be one the document accepts;
//   - a request answered 400 or 415 must be one the document rejects too,
//     unless the check cannot see its fault (docBlind).
//
// body is sent as is when it is a []byte or string, as JSON otherwise; nil
// sends no body.
func (b *testBundle) do(t *testing.T, method, path string, body any, opts ...callOpt) *response {
	t.Helper()
	c := call{header: http.Header{}}
	for _, o := range opts {
		o(&c)
	}
	var raw []byte
	switch v := body.(type) {
	case nil:
	case []byte:
		raw = v
	case string:
		raw = []byte(v)
	default:
		var err error
		raw, err = json.Marshal(v)
		require.NoError(t, err)
	}
	newRequest := func() *http.Request {
		var r io.Reader = http.NoBody
		if body != nil {
			r = bytes.NewReader(raw)
		}
		req, err := http.NewRequest(method, b.srv.URL+path, r)
		require.NoError(t, err)
		req.Header = c.header.Clone()
		if !c.noAuth && len(req.Header.Values("Authorization")) == 0 {
			req.Header.Set("Authorization", "Bearer "+testToken)
		}
		switch {
		case c.contentType != nil:
			if *c.contentType != "" {
				req.Header.Set("Content-Type", *c.contentType)
			}
		case body != nil:
			req.Header.Set("Content-Type", "application/json")
		}
		return req
	}

	// What the document says of the request.
	vreq := newRequest()
	route, params, routeErr := b.router.FindRoute(vreq)
	for _, v := range params {
		// kin-openapi's legacy router matches GET /v1/messages to
		// GET /v1/messages/{id} with an empty id; there is no such route.
		if v == "" {
			route, routeErr = nil, routers.ErrPathNotFound
		}
	}
	// The bodies are checked against schemas compiled once (b.schemas);
	// kin-openapi checks everything else.
	fopts := filterOptions()
	fopts.ExcludeRequestBody, fopts.ExcludeResponseBody = true, true
	var input *openapi3filter.RequestValidationInput
	reqErr := routeErr
	if routeErr == nil {
		input = &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: fopts}
		if reqErr = openapi3filter.ValidateRequest(context.Background(), input); reqErr == nil {
			reqErr = b.requestBodyError(route.Operation, vreq.Header.Get("Content-Type"), raw, body != nil)
		}
	}

	res, err := b.srv.Client().Do(newRequest())
	require.NoError(t, err)
	defer res.Body.Close()
	got, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	out := &response{Status: res.StatusCode, Header: res.Header, Body: got}

	if routeErr != nil {
		// No such operation: the answer is a problem all the same.
		require.Containsf(t, []int{http.StatusNotFound, http.StatusMethodNotAllowed}, out.Status,
			"%s %s is not in the document but was answered %d: %s", method, path, out.Status, got)
		b.requireSchema(t, "Problem", out.Body)
		return out
	}
	rin := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: input, Status: out.Status, Header: out.Header, Options: fopts,
	}
	rin.SetBodyBytes(got)
	require.NoErrorf(t, openapi3filter.ValidateResponse(context.Background(), rin),
		"%s %s: the %d response does not match the document: %s", method, path, out.Status, got)
	require.NoErrorf(t, b.responseBodyError(route.Operation, out),
		"%s %s: the %d response does not match the document: %s", method, path, out.Status, got)

	rejected := out.Status == http.StatusBadRequest || out.Status == http.StatusUnsupportedMediaType
	switch {
	case out.Status < 300 && !c.lenient:
		require.NoErrorf(t, reqErr, "%s %s was accepted (%d) but the document rejects the request", method, path, out.Status)
	case rejected && c.docBlind == "":
		require.Errorf(t, reqErr, "%s %s was rejected (%d: %s) but the document accepts the request", method, path, out.Status, got)
	}
	if reqErr == nil && c.docBlind == "" {
		require.Falsef(t, rejected, "the document accepts %s %s but the server answered %d: %s", method, path, out.Status, got)
	}
	b.mu.Lock()
	b.seen[fmt.Sprintf("%s %d", route.Operation.OperationID, out.Status)] = true
	b.mu.Unlock()
	return out
}

// requestBodyError is what the document says of a request's body, as
// openapi3filter.ValidateRequestBody says it, with the schema compiled once.
func (b *testBundle) requestBodyError(op *openapi3.Operation, contentType string, raw []byte, sent bool) error {
	if op.RequestBody == nil || op.RequestBody.Value == nil {
		return nil
	}
	rb := op.RequestBody.Value
	if !sent || len(raw) == 0 {
		if rb.Required {
			return errors.New("request body is required")
		}
		return nil
	}
	mt := rb.Content.Get(contentType)
	if mt == nil {
		return fmt.Errorf("request body has an undocumented content type %q", contentType)
	}
	if mt.Schema == nil {
		return nil
	}
	return b.schemas.ValidateJSON(mt.Schema.Value, raw)
}

// responseBodyError is what the document says of a response's body, as
// openapi3filter.ValidateResponse says it, with the schema compiled once.
func (b *testBundle) responseBodyError(op *openapi3.Operation, r *response) error {
	ct := r.Header.Get("Content-Type")
	schema, ok := openapitest.ResponseSchema(op, r.Status, ct)
	switch {
	case !ok:
		return fmt.Errorf("status %d with content type %q is not documented", r.Status, ct)
	case schema == nil:
		return nil
	}
	return b.schemas.ValidateJSON(schema, r.Body)
}

// requireSchema checks body against a component schema of the document.
func (b *testBundle) requireSchema(t *testing.T, name string, body []byte) {
	t.Helper()
	ref := b.doc.Components.Schemas[name]
	require.NotNilf(t, ref, "no schema %s", name)
	var v any
	require.NoError(t, json.Unmarshal(body, &v))
	require.NoErrorf(t, b.schemas.Validate(ref.Value, v), "%s: %s", name, body)
}

// decodeJSON decodes a response body strictly into T.
func decodeJSON[T any](t *testing.T, r *response) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.DisallowUnknownFields()
	require.NoErrorf(t, dec.Decode(&v), "decode %T from %s", v, r.Body)
	return v
}

// requireStatus fails unless r has the status.
func requireStatus(t *testing.T, want int, r *response) {
	t.Helper()
	require.Equalf(t, want, r.Status, "body: %s", r.Body)
}

// requireProblem checks r is a problem+json answer of status and returns it.
func requireProblem(t *testing.T, status int, r *response) api.Problem {
	t.Helper()
	requireStatus(t, status, r)
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
	p := decodeJSON[api.Problem](t, r)
	require.Equal(t, status, p.Status)
	return p
}

// requireFieldError checks r is a 4xx problem naming field.
func requireFieldError(t *testing.T, status int, r *response, field string) api.Problem {
	t.Helper()
	p := requireProblem(t, status, r)
	var fields []string
	for _, f := range p.Errors {
		fields = append(fields, f.Field)
	}
	require.Containsf(t, fields, field, "problem: %s", r.Body)
	return p
}

// Response shapes, mirrored from the handlers' JSON on purpose: decoding
// into the handlers' own types would let a renamed or retyped field pass
// unnoticed, where these copies are the wire contract the tests hold.
type (
	endpointJSON struct {
		ID             string            `json:"id"`
		TenantID       string            `json:"tenant_id"`
		URL            string            `json:"url"`
		Description    string            `json:"description"`
		EventTypes     []string          `json:"event_types"`
		TrafficClass   string            `json:"traffic_class"`
		Metadata       map[string]string `json:"metadata"`
		HeaderNames    []string          `json:"header_names"`
		Signing        string            `json:"signing"`
		Status         string            `json:"status"`
		DisabledReason *string           `json:"disabled_reason"`
		RateLimit      *int              `json:"rate_limit"`
		Type           string            `json:"type"`
		Destination    json.RawMessage   `json:"destination"`
		Ordering       string            `json:"ordering"`
		OnExhausted    string            `json:"on_exhausted"`
		Filter         json.RawMessage   `json:"filter"`
		RetrySchedule  []string          `json:"retry_schedule"`
		Timeout        *string           `json:"timeout"`
		BlockedBy      *string           `json:"blocked_by"`
		CreatedAt      time.Time         `json:"created_at"`
		UpdatedAt      time.Time         `json:"updated_at"`
	}
	listJSON[T any] struct {
		Data       []T     `json:"data"`
		NextCursor *string `json:"next_cursor"`
	}
	secretJSON struct {
		Signing                 string     `json:"signing"`
		Secret                  string     `json:"secret"`
		PreviousSecret          *string    `json:"previous_secret"`
		PreviousSecretExpiresAt *time.Time `json:"previous_secret_expires_at"`
	}
	deliveryJSON struct {
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
	messageJSON struct {
		ID             string          `json:"id"`
		TenantID       string          `json:"tenant_id"`
		EventType      string          `json:"event_type"`
		Payload        json.RawMessage `json:"payload"`
		PayloadExpired *bool           `json:"payload_expired"`
		IdempotencyKey *string         `json:"idempotency_key"`
		CreatedAt      time.Time       `json:"created_at"`
		Deliveries     []deliveryJSON  `json:"deliveries"`
	}
	classJSON struct {
		Name                   string  `json:"name"`
		Trip                   string  `json:"trip"`
		FailureRateThreshold   float64 `json:"failure_rate_threshold"`
		Window                 string  `json:"window"`
		MinThroughput          int     `json:"min_throughput"`
		ConsecutiveFailures    int     `json:"consecutive_failures"`
		OpenDuration           string  `json:"open_duration"`
		OpenJitter             float64 `json:"open_jitter"`
		OpenBackoff            float64 `json:"open_backoff"`
		MaxOpenDuration        string  `json:"max_open_duration"`
		HalfOpenTrials         int     `json:"half_open_trials"`
		HalfOpenConcurrency    int     `json:"half_open_concurrency"`
		Enforce                bool    `json:"enforce"`
		AuthDisableAfter       int     `json:"auth_disable_after"`
		AuthDisableMinDuration string  `json:"auth_disable_min_duration"`
		TenantSelectable       bool    `json:"tenant_selectable"`
		AutoTune               string  `json:"auto_tune"`
		TuneMinThroughputFloor int     `json:"tune_min_throughput_floor"`
		TuneMinThroughputCeil  int     `json:"tune_min_throughput_ceiling"`
		TuneFailureRateFloor   float64 `json:"tune_failure_rate_floor"`
		TuneFailureRateCeil    float64 `json:"tune_failure_rate_ceiling"`
		Builtin                bool    `json:"builtin"`
	}
	transitionJSON struct {
		ID           int64      `json:"id"`
		From         string     `json:"from"`
		To           string     `json:"to"`
		At           time.Time  `json:"at"`
		Reason       string     `json:"reason"`
		FailureRate  float64    `json:"failure_rate"`
		Observations int        `json:"observations"`
		Failures     int        `json:"failures"`
		OpenUntil    *time.Time `json:"open_until"`
		Actor        string     `json:"actor"`
		Note         string     `json:"note"`
		Shadow       bool       `json:"shadow"`
	}
	breakerJSON struct {
		EndpointID           string          `json:"endpoint_id"`
		State                string          `json:"state"`
		Generation           int64           `json:"generation"`
		OpenedAt             *time.Time      `json:"opened_at"`
		OpenUntil            *time.Time      `json:"open_until"`
		FailureRate          float64         `json:"failure_rate"`
		Observations         int             `json:"observations"`
		Failures             int             `json:"failures"`
		TrafficClass         string          `json:"traffic_class"`
		FailureRateThreshold float64         `json:"failure_rate_threshold"`
		MinThroughput        int             `json:"min_throughput"`
		Window               string          `json:"window"`
		TrialSuccesses       int             `json:"trial_successes"`
		HalfOpenTrials       int             `json:"half_open_trials"`
		TrialInFlight        bool            `json:"trial_in_flight"`
		ConsecutiveFailures  int             `json:"consecutive_failures"`
		Trips                int64           `json:"trips"`
		TripsLast24h         int             `json:"trips_last_24h"`
		Enforce              bool            `json:"enforce"`
		UpdatedAt            time.Time       `json:"updated_at"`
		Now                  time.Time       `json:"now"`
		TenantID             string          `json:"tenant_id"`
		URL                  string          `json:"url"`
		Type                 string          `json:"type"`
		Destination          json.RawMessage `json:"destination"`
		EndpointStatus       string          `json:"endpoint_status"`
		DisabledReason       *string         `json:"disabled_reason"`
		Tripped              *struct {
			At           time.Time `json:"at"`
			Reason       string    `json:"reason"`
			FailureRate  float64   `json:"failure_rate"`
			Observations int       `json:"observations"`
			Failures     int       `json:"failures"`
			Consecutive  int       `json:"consecutive_failures"`
		} `json:"tripped"`
		Transitions []transitionJSON `json:"transitions"`
	}
	trafficJSON struct {
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
	attemptJSON struct {
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
		TimeoutMS       *int64    `json:"timeout_ms"`
	}
)

// createEndpoint registers an endpoint through the API.
func (b *testBundle) createEndpoint(t *testing.T, tenant string, eventTypes ...string) endpointJSON {
	t.Helper()
	req := map[string]any{"tenant_id": tenant, "url": "https://" + tenant + ".example/hook"}
	if eventTypes != nil {
		req["event_types"] = eventTypes
	}
	r := b.do(t, "POST", "/v1/endpoints", req)
	requireStatus(t, http.StatusCreated, r)
	return decodeJSON[endpointJSON](t, r)
}

// createEndpointIn registers an endpoint of the given traffic class.
func (b *testBundle) createEndpointIn(t *testing.T, tenant, class string) endpointJSON {
	t.Helper()
	r := b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": tenant, "url": "https://" + tenant + ".example/hook", "traffic_class": class})
	requireStatus(t, http.StatusCreated, r)
	return decodeJSON[endpointJSON](t, r)
}

// createClass creates a custom traffic class through the API.
func (b *testBundle) createClass(t *testing.T, body map[string]any) classJSON {
	t.Helper()
	r := b.do(t, "POST", "/v1/traffic-classes", body)
	requireStatus(t, http.StatusCreated, r)
	return decodeJSON[classJSON](t, r)
}

// propose stores a proposal for class, as a tuning pass would: its current
// config with the threshold raised to 0.7.
func (b *testBundle) propose(t *testing.T, class string) {
	t.Helper()
	ctx := context.Background()
	c, err := b.store.GetClass(ctx, class)
	require.NoError(t, err)
	cur, prop := tuning.ClassConfig(c.Breaker), tuning.ClassConfig(c.Breaker)
	prop.FailureRateThreshold = 0.7
	body, err := json.Marshal(tuning.Recommendation{Class: class, Status: tuning.StatusProposed, Current: &cur, Proposed: &prop, Reasons: []string{"proposed by the test"}})
	require.NoError(t, err)
	require.NoError(t, b.store.SaveRecommendation(ctx, store.Recommendation{Class: class, Status: "proposed", Body: body}, "", nil))
}

// queueTune queues a tuning pass of class, as POST .../tune does.
func (b *testBundle) queueTune(t *testing.T, class string) {
	t.Helper()
	now := time.Now()
	_, err := b.store.QueueTune(context.Background(), class, now.Add(-time.Hour), now)
	require.NoError(t, err)
}

// sendMessage posts a message through the API.
func (b *testBundle) sendMessage(t *testing.T, tenant, eventType string) messageJSON {
	t.Helper()
	r := b.do(t, "POST", "/v1/messages", map[string]any{
		"tenant_id": tenant, "event_type": eventType, "payload": map[string]any{"n": 1},
	})
	requireStatus(t, http.StatusAccepted, r)
	return decodeJSON[messageJSON](t, r)
}

// tables are the tables a write can touch.
var tables = []string{"endpoints", "messages", "message_payloads", "deliveries", "idempotency_keys", "river_job", "delivery_attempts",
	"traffic_classes", "class_changes", "breaker_transitions"}

// counts returns the row count of every table in tables.
func (b *testBundle) counts(t *testing.T) map[string]int {
	t.Helper()
	out := make(map[string]int, len(tables))
	for _, table := range tables {
		var n int
		require.NoError(t, b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
		out[table] = n
	}
	return out
}

// riverJob is one row of river_job.
type riverJob struct {
	ID    int64
	Kind  string
	Queue string
	State string
	// Args are a delivery job's; Message a message job's.
	Args    delivery.DeliverArgs
	Message delivery.MessageArgs
}

// jobs returns every River job, oldest first.
func (b *testBundle) jobs(t *testing.T) []riverJob {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `SELECT id, kind, queue, state::text, args FROM river_job ORDER BY id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (riverJob, error) {
		var j riverJob
		var args []byte
		if err := row.Scan(&j.ID, &j.Kind, &j.Queue, &j.State, &args); err != nil {
			return j, err
		}
		if j.Kind == (delivery.MessageArgs{}).Kind() {
			return j, json.Unmarshal(args, &j.Message)
		}
		return j, json.Unmarshal(args, &j.Args)
	})
	require.NoError(t, err)
	return out
}

// jobIDOf returns the job id stored on a delivery.
func (b *testBundle) jobIDOf(t *testing.T, deliveryID string) *int64 {
	t.Helper()
	var id *int64
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT job_id FROM deliveries WHERE id = $1`, deliveryID).Scan(&id))
	return id
}

// seedAttempts records attempts of a delivery through the ledger, in order.
func (b *testBundle) seedAttempts(t *testing.T, d deliveryJSON, attempts ...store.Attempt) {
	t.Helper()
	for i := range attempts {
		attempts[i].DeliveryID, attempts[i].MessageID, attempts[i].EndpointID = d.ID, d.MessageID, d.EndpointID
		if attempts[i].Classification == "" {
			attempts[i].Classification = "failure"
		}
	}
	require.NoError(t, b.store.RecordLedger(context.Background(), attempts, nil))
}

// markFailed ends a delivery's current series as failed, as the worker does
// when the retry schedule is exhausted.
func (b *testBundle) markFailed(t *testing.T, d deliveryJSON, series, attempts int) {
	t.Helper()
	now := time.Now()
	code := 503
	msg := "HTTP 503"
	require.NoError(t, b.store.RecordLedger(context.Background(), nil, []store.StatusUpdate{{
		DeliveryID: d.ID, Series: series, Status: store.DeliveryFailed, AttemptCount: attempts,
		LastAttemptAt: &now, LastStatusCode: &code, LastError: &msg,
	}}))
}

// blockedDelivery creates a FIFO endpoint of tenant that blocks on an
// exhausted head, sends it a message and fails the delivery as the ledger
// does when its retries run out: the delivery then blocks the queue. It
// returns the endpoint and the delivery.
func (b *testBundle) blockedDelivery(t *testing.T, tenant string) (endpointJSON, deliveryJSON) {
	t.Helper()
	r := b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": tenant, "url": "https://" + tenant + ".example/fifo",
		"ordering": "fifo", "on_exhausted": "block"})
	requireStatus(t, http.StatusCreated, r)
	ep := decodeJSON[endpointJSON](t, r)
	m := b.sendMessage(t, tenant, "invoice.paid")
	require.Len(t, m.Deliveries, 1)
	now := time.Now()
	_, err := b.store.RecordBatch(context.Background(), store.LedgerBatch{Updates: []store.StatusUpdate{{
		DeliveryID: m.Deliveries[0].ID, Series: 1, Status: store.DeliveryFailed, AttemptCount: 1, LastAttemptAt: &now, Ordered: true,
	}}, Queue: b.enq}, nil)
	require.NoError(t, err)
	return ep, m.Deliveries[0]
}

// missingID returns a well-formed id that names nothing.
func missingID(prefix string) string { return store.NewID(prefix, time.Now()) }
