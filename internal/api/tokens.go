package api

import (
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/hookd/hookd/internal/store"
)

// Bounds of a token's expires_in.
const (
	minTokenExpiry = time.Minute
	maxTokenExpiry = 10 * 365 * 24 * time.Hour
)

// tokenIDPattern is the shape of a token id (store.NewID): "tok_" and a
// ULID.
var tokenIDPattern = regexp.MustCompile(`^tok_[0-7][0-9A-HJKMNP-TV-Z]{25}$`)

// tokenResponse is a stored token as listed: never the token, nor its hash.
type tokenResponse struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Scope      string     `json:"scope"`
	TenantID   *string    `json:"tenant_id"`
	ReadOnly   bool       `json:"read_only"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
}

func toToken(t store.APIToken) tokenResponse {
	out := tokenResponse{
		ID: t.ID, Name: t.Name, Scope: t.Scope, ReadOnly: t.ReadOnly,
		CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, LastUsedAt: t.LastUsedAt, RevokedAt: t.RevokedAt,
	}
	if t.Scope == store.ScopeTenant {
		out.TenantID = &t.TenantID
	}
	return out
}

// createdTokenResponse is a new token with the token itself, shown once.
type createdTokenResponse struct {
	tokenResponse
	Token string `json:"token"`
}

type createTokenRequest struct {
	Name      string  `json:"name"`
	TenantID  *string `json:"tenant_id"`
	ExpiresIn *string `json:"expires_in"`
	ReadOnly  bool    `json:"read_only"`
}

func (r createTokenRequest) validate() error {
	var fe fieldErrors
	if err := ValidateTokenName(r.Name); err != nil {
		fe.add("name", err.Error())
	}
	switch {
	case r.TenantID != nil && *r.TenantID == "":
		fe.add("tenant_id", "must not be empty: leave it out for an admin token")
	case r.TenantID != nil:
		validateTenantID(&fe, "tenant_id", *r.TenantID)
	}
	if r.ExpiresIn != nil {
		if _, err := ParseTokenExpiry(*r.ExpiresIn); err != nil {
			fe.add("expires_in", err.Error())
		}
	}
	return fe.err()
}

// ParseTokenExpiry reads a token lifetime such as "720h" or "90m": a Go
// duration from a minute to ten years.
func ParseTokenExpiry(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("must be a duration such as 720h or 90m")
	}
	if d < minTokenExpiry || d > maxTokenExpiry {
		return 0, fmt.Errorf("must be from %s to %s", minTokenExpiry, maxTokenExpiry)
	}
	return d, nil
}

func handleCreateToken(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := decode[createTokenRequest](r, maxRequestBytes)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		in := store.NewAPIToken{Scope: store.ScopeAdmin, Name: req.Name, ReadOnly: req.ReadOnly}
		if req.TenantID != nil {
			in.Scope, in.TenantID = store.ScopeTenant, *req.TenantID
		}
		if req.ExpiresIn != nil {
			in.ExpiresIn, _ = ParseTokenExpiry(*req.ExpiresIn)
		}
		token, sum, err := NewToken(d.Rand)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		in.Sum = sum
		t, err := d.Store.CreateAPIToken(r.Context(), in)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		d.Logger.InfoContext(r.Context(), "token_created", slog.String("id", t.ID), slog.String("name", t.Name),
			slog.String("scope", t.Scope), slog.String("tenant", t.TenantID), slog.Bool("read_only", t.ReadOnly),
			slog.String("actor", actorOf(r)))
		w.Header().Set("Cache-Control", "no-store")
		encode(w, http.StatusCreated, createdTokenResponse{tokenResponse: toToken(t), Token: token})
	})
}

func handleListTokens(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var fe fieldErrors
		page := parsePageAfter(&fe, r.URL.Query(), tokenIDPattern)
		if err := fe.err(); err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		list, err := d.Store.ListAPITokens(r.Context(), store.Page{After: page.After, Limit: page.Limit + 1})
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		encode(w, http.StatusOK, pageOf(list, page.Limit, func(t store.APIToken) string { return t.ID },
			toToken))
	})
}

// handleRevokeToken revokes a token; every API process refuses it within
// TokenCacheTTL.
func handleRevokeToken(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "id")
		if !tokenIDPattern.MatchString(id) {
			writeProblem(w, r, d.Logger, store.ErrNotFound)
			return
		}
		t, err := d.Store.RevokeAPIToken(r.Context(), store.TokenRef{ID: id})
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		d.Logger.InfoContext(r.Context(), "token_revoked", slog.String("id", t.ID), slog.String("name", t.Name),
			slog.String("actor", actorOf(r)))
		w.WriteHeader(http.StatusNoContent)
	})
}
