package api

import (
	"context"
	"crypto/subtle"
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

// requireToken admits requests bearing the admin token.
func requireToken(d Deps) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token, ok := bearer(r)
			if !ok || d.Token == "" || subtle.ConstantTimeCompare([]byte(token), []byte(d.Token)) != 1 {
				writeProblem(w, r, d.Logger, errUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// actorOf names who made a request, for audit records: the token's name
// when the request carries a stored token, else "api".
func actorOf(r *http.Request) string {
	if a, ok := r.Context().Value(actorKey{}).(string); ok && a != "" {
		return a
	}
	return "api"
}

type actorKey struct{}
