package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"riverqueue.com/riverui"
)

// RiverUIPrefix is where River's own UI (riverqueue.com/riverui) is
// mounted when the api's --riverui is on.
const RiverUIPrefix = "/riverui"

// NewRiverUI returns River's UI and its JSON API for client's database,
// served under RiverUIPrefix, with its background services started until
// ctx ends. Mount it with Deps.RiverUI: it is then reachable only with an
// admin dashboard session.
func NewRiverUI(ctx context.Context, client *river.Client[pgx.Tx], logger *slog.Logger) (http.Handler, error) {
	h, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(client, nil),
		Logger:    logger,
		Prefix:    RiverUIPrefix,
	})
	if err != nil {
		return nil, fmt.Errorf("river ui: %w", err)
	}
	if err := h.Start(ctx); err != nil {
		return nil, fmt.Errorf("start river ui: %w", err)
	}
	return h, nil
}

// requireAdminSession admits only requests with a live dashboard session
// (only writable admin tokens open one). A browser without one is sent to
// the dashboard's login, an API call answered 401. River's UI cannot send
// the dashboard's CSRF token, so a change (a job cancelled, retried or
// deleted) must come from this origin instead; the cookie is SameSite
// Strict too. Requests count against the session token's rate limit.
func requireAdminSession(d Deps) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sess, ok, err := d.liveSession(r)
			switch {
			case err != nil:
				writeProblem(w, r, d.Logger, err)
				return
			case !ok && safeMethod(r.Method) && !strings.HasPrefix(r.URL.Path, RiverUIPrefix+"/api/"):
				http.Redirect(w, r, "/dashboard/login?next="+RiverUIPrefix, http.StatusSeeOther)
				return
			case !ok:
				writeProblem(w, r, d.Logger, errUnauthorized)
				return
			case !safeMethod(r.Method) && !sameOrigin(r):
				writeProblem(w, r, d.Logger, errCSRF)
				return
			}
			if !d.limiter.take(w, r, tokenKey(sess.Name)) {
				writeProblem(w, r, d.Logger, errRateLimited)
				return
			}
			w.Header().Set("Cache-Control", "no-store")
			next.ServeHTTP(w, withPrincipal(r, adminPrincipal(sess.Name, sess.TokenID)))
		})
	}
}
