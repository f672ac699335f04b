// Package hookd is the Go client of hookd, the webhook dispatch service.
//
//	client, err := hookd.New("https://hookd.example.com", token)
//	msg, err := client.Messages.Send(ctx, hookd.NewMessage{TenantID: "acme", EventType: "invoice.paid", Payload: invoice})
//
// Every call retries 429 and 503 answers, waiting as their Retry-After
// header asks, and transport errors of requests that are safe to repeat,
// with exponential backoff, until the call's context ends or its attempts
// run out. Messages.Send always carries an idempotency key (generated when
// the caller gives none), so its retries store one message. An error the
// API answers is an *Error with the problem's fields; lists are read page
// by page with iterators (Endpoints.All and the like).
//
// The types are those package api generates from hookd's OpenAPI
// document; Client.API reaches every operation directly. Package webhook
// verifies the webhooks hookd delivers.
package hookd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/hookd/hookd/sdk/go/api"
)

// Client calls one hookd API with one token. It is safe for concurrent
// use.
type Client struct {
	raw *api.ClientWithResponses

	// Endpoints registers and manages webhook endpoints.
	Endpoints *EndpointsService
	// Messages sends and finds messages.
	Messages *MessagesService
	// Deliveries finds deliveries, reads their attempts and retries them.
	Deliveries *DeliveriesService
	// PortalSessions opens tenant portal sessions.
	PortalSessions *PortalSessionsService
	// Breakers reads and operates the endpoints' circuit breakers.
	Breakers *BreakersService
	// TrafficClasses reads traffic classes and their tuning
	// recommendations (admin tokens only).
	TrafficClasses *TrafficClassesService
	// EventTypes reads and manages the event type catalogue.
	EventTypes *EventTypesService
	// Tokens lists, creates and revokes API tokens (admin tokens only).
	Tokens *TokensService
	// OperationalEndpoints lists the endpoints that receive hookd's own
	// operational events (admin tokens only).
	OperationalEndpoints *OperationalEndpointsService
}

// Option configures a Client.
type Option func(*settings)

type settings struct {
	httpClient *http.Client
	retry      RetryPolicy
	userAgent  string
}

// WithHTTPClient sends requests with hc instead of a client of its own
// (whose Timeout should then be zero or above the attempt timeout: the
// retry policy bounds each attempt).
func WithHTTPClient(hc *http.Client) Option {
	return func(s *settings) { s.httpClient = hc }
}

// WithRetryPolicy replaces DefaultRetryPolicy.
func WithRetryPolicy(p RetryPolicy) Option {
	return func(s *settings) { s.retry = p }
}

// WithUserAgent sets the User-Agent of every request.
func WithUserAgent(ua string) Option {
	return func(s *settings) { s.userAgent = ua }
}

// New returns a client of the API at baseURL (such as
// "http://127.0.0.1:8080") that authenticates with token, an admin or a
// tenant token.
func New(baseURL, token string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("hookd: base URL %q is not an http(s) URL", baseURL)
	}
	if token == "" {
		return nil, errors.New("hookd: the token is empty")
	}
	s := settings{httpClient: &http.Client{}, retry: DefaultRetryPolicy(), userAgent: "hookd-go"}
	for _, o := range opts {
		o(&s)
	}
	doer := &retryingDoer{client: s.httpClient, policy: s.retry.normalized(), sleep: sleepContext}
	raw, err := api.NewClientWithResponses(strings.TrimSuffix(baseURL, "/"),
		api.WithHTTPClient(doer),
		api.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("User-Agent", s.userAgent)
			return nil
		}))
	if err != nil {
		return nil, fmt.Errorf("hookd: new client: %w", err)
	}
	c := &Client{raw: raw}
	c.Endpoints = &EndpointsService{c: c}
	c.Messages = &MessagesService{c: c, newKey: newIdempotencyKey}
	c.Deliveries = &DeliveriesService{c: c}
	c.PortalSessions = &PortalSessionsService{c: c}
	c.Breakers = &BreakersService{c: c}
	c.TrafficClasses = &TrafficClassesService{c: c}
	c.EventTypes = &EventTypesService{c: c}
	c.Tokens = &TokensService{c: c}
	c.OperationalEndpoints = &OperationalEndpointsService{c: c}
	return c, nil
}

// API returns the generated client, with this client's token and retries:
// a method for every operation of the API, named by its operationId.
func (c *Client) API() *api.ClientWithResponses { return c.raw }

// Ptr returns a pointer to v: the generated request types take optional
// fields as pointers.
func Ptr[T any](v T) *T { return &v }
