package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

func handleHealthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		encode(w, http.StatusOK, map[string]string{"status": "ok"})
	})
}

func handleReadyz(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := d.Store.Ping(ctx); err != nil {
			writeProblem(w, r, d.Logger, errDatabaseUnhealthy)
			return
		}
		if d.Ready != nil {
			if err := d.Ready(ctx); err != nil {
				writeProblem(w, r, d.Logger, fmt.Errorf("%w: %w", errNotReady, err))
				return
			}
		}
		encode(w, http.StatusOK, map[string]string{"status": "ready"})
	})
}

// requireToken admits requests bearing a valid token: the bootstrap
// API_TOKEN or a live stored token. It records who the token acts as (for
// authorize and actorOf) and applies the per-token rate limit. A request
// without a valid token counts against its client IP's limit, never a
// token's; an IP over it gets 429 before an unknown token is even checked,
// so a flood of guesses cannot turn into a flood of database lookups, while
// a token the api verified recently (knownToken) is still checked and
// admitted: bad tokens from an address never lock out a valid one.
func requireToken(d Deps) func(http.Handler) http.Handler {
	limiter := d.limiter
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token, hasToken := bearer(r)
			if !knownToken(d.Auth, token) && limiter.over(w, clientKey(r, d.TrustedProxies)) {
				writeProblem(w, r, d.Logger, errRateLimited)
				return
			}
			p, err := Principal{}, ErrBadToken
			if hasToken {
				p, err = checkToken(r.Context(), d.Auth, token)
			}
			switch {
			case errors.Is(err, ErrBadToken):
				if !limiter.take(w, r, clientKey(r, d.TrustedProxies)) {
					writeProblem(w, r, d.Logger, errRateLimited)
					return
				}
				writeProblem(w, r, d.Logger, errUnauthorized)
				return
			case err != nil:
				writeProblem(w, r, d.Logger, err)
				return
			}
			if !limiter.take(w, r, tokenKey(p.Name)) {
				writeProblem(w, r, d.Logger, errRateLimited)
				return
			}
			next.ServeHTTP(w, withPrincipal(r, p))
		})
	}
}

// knownToken reports whether auth verified token recently (knownChecker),
// so it may be checked even from a client IP over its limit.
func knownToken(auth Authenticator, token string) bool {
	k, ok := auth.(knownChecker)
	return ok && token != "" && k.Known(token)
}

// checkToken asks auth about token, telling a failed check from a bad
// token when auth can. An Authenticator that knows no scopes vouches for
// admins.
func checkToken(ctx context.Context, auth Authenticator, token string) (Principal, error) {
	if c, ok := auth.(tokenChecker); ok {
		return c.Check(ctx, token)
	}
	if name, ok := auth.Authenticate(ctx, token); ok {
		return adminPrincipal(name, ""), nil
	}
	return Principal{}, ErrBadToken
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// actorOf names who made a request, for audit records: the name of the
// token it authenticated with ("bootstrap" for the API_TOKEN), else "api".
func actorOf(r *http.Request) string {
	if p, ok := principalFrom(r); ok && p.Name != "" {
		return p.Name
	}
	return "api"
}
