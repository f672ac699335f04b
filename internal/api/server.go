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
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/hookd/hookd/internal/store"
)

// Deps are the server's collaborators.
type Deps struct {
	Store    *store.Store
	Enqueuer store.Enqueuer
	Logger   *slog.Logger
	// Token is the bootstrap admin token (API_TOKEN).
	Token string
	// MaxPayloadBytes caps a message payload.
	MaxPayloadBytes int64
	// Now is the API's clock.
	Now func() time.Time
	// Rand is the source of generated endpoint secrets; nil means
	// crypto/rand.Reader.
	Rand io.Reader
	// Ready reports whether migrations are current; nil skips the check.
	Ready func(ctx context.Context) error
}

// NewServer returns the API's handler.
func NewServer(d Deps) http.Handler {
	return newRouter(d)
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
	if d.Rand == nil {
		d.Rand = rand.Reader
	}
	if d.MaxPayloadBytes <= 0 {
		d.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, d.Logger, errRouteNotFound)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, d.Logger, errMethodNotAllowed)
	})
	addRoutes(r, d)
	return r
}

// DefaultMaxPayloadBytes is the default cap on a message payload: 1 MiB.
const DefaultMaxPayloadBytes = 1 << 20
