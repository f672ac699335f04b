package api

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/hookd/hookd/internal/store"
)

// Bounds of a portal session's expires_in, and how long its one-time code
// waits for the exchange.
const (
	defaultPortalExpiry = time.Hour
	minPortalExpiry     = 5 * time.Minute
	maxPortalExpiry     = 24 * time.Hour
	PortalCodeTTL       = 5 * time.Minute
)

// portalTheme is how a portal session's pages look.
type portalTheme struct {
	// BrandColor is "#rrggbb"; the pages set it as a CSS custom property.
	BrandColor string `json:"brand_color,omitempty"`
	// LogoURL is an https URL of an image shown in the header.
	LogoURL string `json:"logo_url,omitempty"`
	// Name is the portal's title (the SaaS's product name).
	Name string `json:"name,omitempty"`
}

var brandColorPattern = regexp.MustCompile(`^#[0-9A-Fa-f]{6}$`)

func (t portalTheme) validate(fe *fieldErrors, field string) {
	if t.BrandColor != "" && !brandColorPattern.MatchString(t.BrandColor) {
		fe.add(field+".brand_color", `must be a colour as "#rrggbb"`)
	}
	if t.LogoURL != "" {
		u, err := url.Parse(t.LogoURL)
		switch {
		case len(t.LogoURL) > 2048:
			fe.add(field+".logo_url", "must be at most 2048 characters")
		case err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.Opaque != "":
			fe.add(field+".logo_url", "must be an https URL with a host and no user info")
		}
	}
	if n := utf8.RuneCountInString(t.Name); n > 64 || !utf8.ValidString(t.Name) || strings.ContainsAny(t.Name, "\x00\r\n") {
		fe.add(field+".name", "must be at most 64 characters on one line")
	}
}

type createPortalSessionRequest struct {
	ExpiresIn *string      `json:"expires_in"`
	ReadOnly  bool         `json:"read_only"`
	Theme     *portalTheme `json:"theme"`
}

func (r createPortalSessionRequest) validate() error {
	var fe fieldErrors
	if r.ExpiresIn != nil {
		if _, err := parsePortalExpiry(*r.ExpiresIn); err != nil {
			fe.add("expires_in", err.Error())
		}
	}
	if r.Theme != nil {
		r.Theme.validate(&fe, "theme")
	}
	return fe.err()
}

func parsePortalExpiry(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("must be a duration such as 1h or 30m")
	}
	if d < minPortalExpiry || d > maxPortalExpiry {
		return 0, fmt.Errorf("must be from %s to %s", minPortalExpiry, maxPortalExpiry)
	}
	return d, nil
}

type portalSessionResponse struct {
	ID            string    `json:"id"`
	TenantID      string    `json:"tenant_id"`
	ReadOnly      bool      `json:"read_only"`
	URL           string    `json:"url"`
	ExpiresAt     time.Time `json:"expires_at"`
	CodeExpiresAt time.Time `json:"code_expires_at"`
}

// newPortalCode returns a one-time code (32 random bytes, base64url) and
// its SHA-256, which is all that is stored.
func newPortalCode(r io.Reader) (string, [32]byte, error) {
	b := make([]byte, 32)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", [32]byte{}, fmt.Errorf("generate portal code: %w", err)
	}
	code := base64.RawURLEncoding.EncodeToString(b)
	return code, sha256.Sum256([]byte(code)), nil
}

// requestOrigin is the scheme and host the request was sent to, as the
// browser that follows a portal URL reaches this server.
func requestOrigin(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// handleCreatePortalSession opens a portal session for the path's tenant.
// The URL it answers carries the one-time code in its fragment, which
// browsers send to no server and put in no Referer.
func handleCreatePortalSession(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant := chi.URLParam(r, "tenant_id")
		var fe fieldErrors
		validateTenantID(&fe, "tenant_id", tenant)
		if err := fe.err(); err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		req, err := decode[createPortalSessionRequest](r, maxRequestBytes)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		expiry := defaultPortalExpiry
		if req.ExpiresIn != nil {
			expiry, _ = parsePortalExpiry(*req.ExpiresIn)
		}
		theme := portalTheme{}
		if req.Theme != nil {
			theme = *req.Theme
		}
		themeJSON, err := json.Marshal(theme)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		code, sum, err := newPortalCode(d.Rand)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		p, _ := principalFrom(r)
		ps, err := d.Store.CreatePortalSession(r.Context(), store.NewPortalSession{
			TenantID: tenant, ReadOnly: req.ReadOnly, Theme: themeJSON, CodeSum: sum,
			CodeTTL: PortalCodeTTL, ExpiresIn: expiry, CreatedBy: actorOf(r), CreatedByTokenID: p.TokenID,
		})
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		d.Logger.InfoContext(r.Context(), "portal_session_created", slog.String("id", ps.ID), slog.String("tenant", tenant),
			slog.Bool("read_only", ps.ReadOnly), slog.Time("expires", ps.ExpiresAt), slog.String("actor", actorOf(r)))
		w.Header().Set("Cache-Control", "no-store")
		encode(w, http.StatusCreated, portalSessionResponse{
			ID: ps.ID, TenantID: ps.TenantID, ReadOnly: ps.ReadOnly,
			URL:       requestOrigin(r) + "/portal#code=" + code,
			ExpiresAt: ps.ExpiresAt, CodeExpiresAt: ps.CodeExpiresAt,
		})
	})
}

// portalSessionIDPattern is the shape of a portal session id (store.NewID):
// "ps_" and a ULID.
var portalSessionIDPattern = regexp.MustCompile(`^ps_[0-7][0-9A-HJKMNP-TV-Z]{25}$`)

// Portal session statuses, as listed.
const (
	portalPending = "pending" // its code is not exchanged yet
	portalActive  = "active"  // a browser holds its cookie
	portalEnded   = "ended"   // logged out, ended by an admin or by its token's revoke
	portalExpired = "expired" // past its expiry, or its code's unused
)

// portalSessionListed is a portal session as listed: never its code nor
// its cookie, which only their holders have.
type portalSessionListed struct {
	ID            string     `json:"id"`
	TenantID      string     `json:"tenant_id"`
	ReadOnly      bool       `json:"read_only"`
	Status        string     `json:"status"`
	CreatedBy     string     `json:"created_by"`
	CreatedAt     time.Time  `json:"created_at"`
	ExpiresAt     time.Time  `json:"expires_at"`
	CodeExpiresAt time.Time  `json:"code_expires_at"`
	LoggedInAt    *time.Time `json:"logged_in_at"`
	EndedAt       *time.Time `json:"ended_at"`
}

func toPortalSessionListed(ps store.PortalSession, now time.Time) portalSessionListed {
	status := portalActive
	switch {
	case ps.EndedAt != nil:
		status = portalEnded
	case !now.Before(ps.ExpiresAt), ps.CodeUsedAt == nil && !now.Before(ps.CodeExpiresAt):
		status = portalExpired
	case ps.CodeUsedAt == nil:
		status = portalPending
	}
	return portalSessionListed{
		ID: ps.ID, TenantID: ps.TenantID, ReadOnly: ps.ReadOnly, Status: status, CreatedBy: ps.CreatedBy,
		CreatedAt: ps.CreatedAt, ExpiresAt: ps.ExpiresAt, CodeExpiresAt: ps.CodeExpiresAt, LoggedInAt: ps.CodeUsedAt, EndedAt: ps.EndedAt,
	}
}

// handleListPortalSessions lists the path's tenant's portal sessions in
// creation order: live ones and, for a day after their end, ended and
// expired ones.
func handleListPortalSessions(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant := chi.URLParam(r, "tenant_id")
		var fe fieldErrors
		validateTenantID(&fe, "tenant_id", tenant)
		page := parsePageAfter(&fe, r.URL.Query(), portalSessionIDPattern)
		if err := fe.err(); err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		list, err := d.Store.ListPortalSessions(r.Context(), tenant, store.Page{After: page.After, Limit: page.Limit + 1})
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		now := d.Now()
		encode(w, http.StatusOK, pageOf(list, page.Limit, func(ps store.PortalSession) string { return ps.ID },
			func(ps store.PortalSession) portalSessionListed { return toPortalSessionListed(ps, now) }))
	})
}

// handleEndPortalSession ends a live portal session at once: its cookie,
// and its code if unused, reach nothing from then.
func handleEndPortalSession(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "id")
		if !portalSessionIDPattern.MatchString(id) {
			writeProblem(w, r, d.Logger, store.ErrNotFound)
			return
		}
		ps, err := d.Store.EndPortalSession(r.Context(), id)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		d.Logger.InfoContext(r.Context(), "portal_session_ended", slog.String("id", ps.ID), slog.String("tenant", ps.TenantID),
			slog.String("reason", "admin"), slog.String("actor", actorOf(r)))
		w.WriteHeader(http.StatusNoContent)
	})
}
