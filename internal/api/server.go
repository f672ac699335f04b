// Package api owns hookd's HTTP surface: the /v1 REST API, health and
// readiness probes, the OpenAPI document and the operator dashboard. Every
// route is registered in routes.go; handlers are built by handleX(deps)
// functions; errors are RFC 9457 problem+json.
package api

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/telemetry"
)

// Deps are the server's collaborators.
type Deps struct {
	Store    *store.Store
	Enqueuer store.Enqueuer
	// Messages stores accepted messages; nil means a
	// store.MessageCommitter over Store and Enqueuer (group commit).
	Messages MessageCreator
	Logger   *slog.Logger
	// Token is the bootstrap admin token (API_TOKEN); empty disables it.
	Token string
	// Auth checks bearer tokens on /v1 and the dashboard login's token; nil
	// means NewTokenAuth(Token, Store, Now): the bootstrap token and the
	// store's live tokens.
	Auth Authenticator
	// RateLimit is how many requests per second one token may make,
	// averaged over RateWindow (requests without a valid token are counted
	// per client IP); zero or less disables the limit.
	RateLimit int
	// RateWindow is the sliding window of the rate limit; zero means 1s.
	RateWindow time.Duration
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names
	// the client a request without a valid token is counted against
	// (clientIP); none means the peer is the client.
	TrustedProxies []netip.Prefix
	// AllowPrivateTargets lets endpoints point at loopback, private and
	// other non-public addresses (development and tests); otherwise
	// registration refuses them (the SSRF guard).
	AllowPrivateTargets bool
	// Resolver resolves endpoint hosts for the SSRF guard; nil means
	// net.DefaultResolver.
	Resolver delivery.Resolver
	// MaxPayloadBytes caps a message payload.
	MaxPayloadBytes int64
	// Now is the API's clock.
	Now func() time.Time
	// Rand is the source of generated endpoint secrets; nil means
	// crypto/rand.Reader.
	Rand io.Reader
	// Ready reports whether migrations are current; nil skips the check.
	Ready func(ctx context.Context) error
	// MaxRecoverWindow is how far back POST /v1/endpoints/{id}/recover
	// may reach; zero means DefaultMaxRecoverWindow.
	MaxRecoverWindow time.Duration
	// Retention is the dispatchers' --retention: an endpoint's retry
	// schedule must end within it. Zero means retention.DefaultRetention.
	Retention time.Duration
	// RiverUI, when not nil, is River's UI (NewRiverUI), served under
	// /riverui to admin dashboard sessions only; nil answers 404 there.
	RiverUI http.Handler
	// SessionKey is the secret the session cookie and CSRF keys are
	// derived from (SESSION_KEY, or SECRET_KEY when that is unset), shared
	// by every replica; empty means a random one per process.
	SessionKey []byte
	// StrictEventTypes refuses (422) messages of an event type the
	// catalogue does not hold, or holds archived, and payloads that do not
	// match their type's schema.
	StrictEventTypes bool
	// CatalogueRefresh is how long strict mode trusts its copy of the
	// catalogue; zero means DefaultCatalogueRefresh.
	CatalogueRefresh time.Duration
	// PortalFrameAncestors is the tenant portal's CSP frame-ancestors
	// source list (PORTAL_FRAME_ANCESTORS); empty means 'none'.
	PortalFrameAncestors string
	// Tracing makes a span per request and per message commit; nil (or
	// tracing off) makes none.
	Tracing *telemetry.Tracing

	sessions  *sessions
	catalogue *eventCatalogue
	limiter   *rateLimiter
}

// MessageCreator stores an accepted message with its deliveries and their
// jobs, or answers the first message of a used idempotency key with
// created false.
type MessageCreator interface {
	CreateMessage(ctx context.Context, in store.NewMessage) (m store.Message, created bool, err error)
}

var _ MessageCreator = (*store.MessageCommitter)(nil)

// NewServer returns the API's handler.
func NewServer(d Deps) http.Handler {
	return traced(newRouter(d), d)
}

// newRouter fills in d's defaults and builds the router holding every route;
// tests walk it to check the OpenAPI document covers each one.
func newRouter(d Deps) chi.Router {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Messages == nil {
		d.Messages = store.NewMessageCommitter(d.Store, d.Enqueuer, store.MessageCommitterConfig{})
	}
	if d.Rand == nil {
		d.Rand = rand.Reader
	}
	if d.MaxPayloadBytes <= 0 {
		d.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if d.Auth == nil {
		var st TokenStore
		if d.Store != nil {
			st = d.Store
		}
		d.Auth = NewTokenAuth(d.Token, st, d.Now)
	}
	if strings.TrimSpace(d.PortalFrameAncestors) == "" {
		d.PortalFrameAncestors = DefaultPortalFrameAncestors
	}
	d.sessions = newSessions(d.SessionKey, d.Now)
	var loader catalogueLoader
	if d.Store != nil {
		loader = d.Store
	}
	d.catalogue = newEventCatalogue(loader, d.Now, d.CatalogueRefresh)
	d.limiter = newRateLimiter(d.RateLimit, d.RateWindow)
	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, d.Logger, errRouteNotFound)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, d.Logger, errMethodNotAllowed)
	})
	addRoutes(r, d, nil)
	return r
}

// DefaultMaxPayloadBytes is the default cap on a message payload: 1 MiB.
const DefaultMaxPayloadBytes = 1 << 20
