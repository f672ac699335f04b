package api

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/hookd/hookd/internal/store"
)

// The tenant portal: one static page and its assets, embedded, with no
// build step. The page exchanges the one-time code of its URL's fragment
// for the portal cookie, then works through /v1 as the session's tenant
// (sessionOrToken admits the cookie; scope.go decides what it may do).
// See docs/portal.md.

//go:embed portal
var portalFiles embed.FS

// portalAssets are the portal's page and files by name.
var portalAssets = loadAssets(portalFiles, "portal")

// PortalCookie holds a portal session's token; only its SHA-256 is stored.
const PortalCookie = "hookd_portal"

// portalTokenPrefix starts every portal cookie token.
const portalTokenPrefix = "hkp_"

var portalTokenPattern = regexp.MustCompile(`^hkp_[A-Za-z0-9_-]{43}$`)

// DefaultPortalFrameAncestors lets no page frame the portal.
const DefaultPortalFrameAncestors = "'none'"

var frameSourcePattern = regexp.MustCompile(`^('self'|https?://(\*\.)?[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*(:[0-9]{1,5})?)$`)

// ValidateFrameAncestors checks a CSP frame-ancestors source list: 'none',
// or space-separated 'self' and origins such as https://app.example.com
// or https://*.example.com.
func ValidateFrameAncestors(v string) error {
	fields := strings.Fields(v)
	if len(fields) == 0 {
		return errors.New("must not be empty: 'none' forbids framing")
	}
	if len(fields) == 1 && fields[0] == "'none'" {
		return nil
	}
	for _, f := range fields {
		if !frameSourcePattern.MatchString(f) {
			return fmt.Errorf("%q is not 'self' or an origin such as https://app.example.com ('none' stands alone)", f)
		}
	}
	return nil
}

// embeddable reports whether another site may frame the portal: its
// cookie must then be SameSite=None (and so Secure) to be sent inside the
// frame.
func (d Deps) portalEmbeddable() bool {
	return strings.TrimSpace(d.PortalFrameAncestors) != DefaultPortalFrameAncestors
}

// portalHeaders sets the portal's security headers: the dashboard's, but
// framing by the configured ancestors and logos from any https origin.
func portalHeaders(d Deps) func(http.Handler) http.Handler {
	csp := "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' https:; " +
		"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors " + d.PortalFrameAncestors
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			h.Set("Content-Security-Policy", csp)
			h.Set("X-Content-Type-Options", "nosniff")
			if !d.portalEmbeddable() {
				h.Set("X-Frame-Options", "DENY")
			}
			// No Referer carries the page's address to a logo's host.
			h.Set("Referrer-Policy", "no-referrer")
			next.ServeHTTP(w, r)
		})
	}
}

func serveAsset(w http.ResponseWriter, r *http.Request, a asset) {
	w.Header().Set("Content-Type", a.contentType)
	w.Header().Set("ETag", a.etag)
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}

// handlePortalPage serves the portal page; it has no side effect (the code
// is exchanged by the page's POST).
func handlePortalPage() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serveAsset(w, r, portalAssets["index.html"])
	})
}

func handlePortalAsset(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := chi.URLParam(r, "name")
		a, ok := portalAssets[name]
		if !ok || name == "index.html" {
			writeProblem(w, r, d.Logger, errRouteNotFound)
			return
		}
		serveAsset(w, r, a)
	})
}

// portalCookie returns the portal cookie: HttpOnly; SameSite=Strict and
// Secure over TLS when the portal is not embeddable, SameSite=None and
// always Secure when it is (browsers send a cookie into a third-party
// frame only so, and only over https).
func (d Deps) portalCookie(r *http.Request, value string, maxAge int) *http.Cookie {
	c := &http.Cookie{
		Name: PortalCookie, Value: value, Path: "/", MaxAge: maxAge, HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
		Secure:   r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https"),
	}
	if d.portalEmbeddable() {
		c.SameSite, c.Secure = http.SameSiteNoneMode, true
	}
	return c
}

// portalInfo is what the page learns of its session.
type portalInfo struct {
	TenantID  string          `json:"tenant_id"`
	ReadOnly  bool            `json:"read_only"`
	Theme     json.RawMessage `json:"theme"`
	ExpiresAt time.Time       `json:"expires_at"`
	// CSRF goes in X-CSRF-Token on every change the page makes.
	CSRF string `json:"csrf"`
}

func (d Deps) portalCSRF(sessionID string) string {
	return b64.EncodeToString(mac(d.sessions.csrfKey, "hookd-portal-csrf", sessionID))
}

func (d Deps) portalInfo(ps store.PortalSession) portalInfo {
	return portalInfo{TenantID: ps.TenantID, ReadOnly: ps.ReadOnly, Theme: ps.Theme, ExpiresAt: ps.ExpiresAt, CSRF: d.portalCSRF(ps.ID)}
}

type portalExchangeRequest struct {
	Code string `json:"code"`
}

func (r portalExchangeRequest) validate() error {
	if r.Code == "" {
		return invalid("code", "is required")
	}
	if len(r.Code) != 43 {
		return invalid("code", "must be the code of a portal URL")
	}
	return nil
}

// errPortalCode is a code used before, expired, or never issued: the same
// answer for each.
var errPortalCode = errors.New("this portal link was used already or has expired: ask for a new one")

// handlePortalExchange consumes the one-time code (once: store
// ExchangePortalCode) and sets the portal cookie.
func handlePortalExchange(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !sameOrigin(r) {
			writeProblem(w, r, d.Logger, errCSRF)
			return
		}
		if d.limiter.over(w, clientKey(r, d.TrustedProxies)) {
			writeProblem(w, r, d.Logger, errRateLimited)
			return
		}
		req, err := decode[portalExchangeRequest](r, maxLoginBytes)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		token, tokenSum, err := NewToken(d.Rand)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		token = portalTokenPrefix + strings.TrimPrefix(token, TokenPrefix)
		tokenSum = sha256.Sum256([]byte(token))
		ps, err := d.Store.ExchangePortalCode(r.Context(), sha256.Sum256([]byte(req.Code)), tokenSum)
		if errors.Is(err, store.ErrNotFound) {
			d.Logger.WarnContext(r.Context(), "portal_code_refused", slog.String("remote", r.RemoteAddr))
			_ = d.limiter.take(w, r, clientKey(r, d.TrustedProxies))
			writeProblem(w, r, d.Logger, errPortalCode)
			return
		}
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		maxAge := int(time.Until(ps.ExpiresAt) / time.Second)
		http.SetCookie(w, d.portalCookie(r, token, max(maxAge, 1)))
		d.Logger.InfoContext(r.Context(), "portal_login", slog.String("id", ps.ID), slog.String("tenant", ps.TenantID),
			slog.Bool("read_only", ps.ReadOnly), slog.String("remote", r.RemoteAddr))
		w.Header().Set("Cache-Control", "no-store")
		encode(w, http.StatusOK, d.portalInfo(ps))
	})
}

// handlePortalLogout ends the request's portal session server-side (its
// cookie is refused from then on, a copy included) and clears the cookie.
// With a live session it needs the session's CSRF token, so another site
// cannot log a tenant out; without one it only clears the cookie.
func handlePortalLogout(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ps, ok, err := d.portalSession(r.Context(), r)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		if ok {
			if !hmac.Equal([]byte(r.Header.Get(CSRFHeader)), []byte(d.portalCSRF(ps.ID))) {
				writeProblem(w, r, d.Logger, errCSRF)
				return
			}
			_, err := d.Store.EndPortalSession(r.Context(), ps.ID)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				writeProblem(w, r, d.Logger, err)
				return
			}
			d.Logger.InfoContext(r.Context(), "portal_session_ended", slog.String("id", ps.ID), slog.String("tenant", ps.TenantID),
				slog.String("reason", "logout"))
		}
		http.SetCookie(w, d.portalCookie(r, "", -1))
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNoContent)
	})
}

// handlePortalSessionInfo tells a reloaded page its session (and CSRF
// token); 401 without a live portal cookie.
func handlePortalSessionInfo(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ps, ok, err := d.portalSession(r.Context(), r)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		if !ok {
			writeProblem(w, r, d.Logger, errUnauthorized)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		encode(w, http.StatusOK, d.portalInfo(ps))
	})
}

// portalSession returns the live portal session of the request's cookie.
func (d Deps) portalSession(ctx context.Context, r *http.Request) (store.PortalSession, bool, error) {
	c, err := r.Cookie(PortalCookie)
	if err != nil || !portalTokenPattern.MatchString(c.Value) || d.Store == nil {
		return store.PortalSession{}, false, nil
	}
	ps, err := d.Store.LookupPortalSession(ctx, sha256.Sum256([]byte(c.Value)))
	if errors.Is(err, store.ErrNotFound) {
		return store.PortalSession{}, false, nil
	}
	if err != nil {
		return store.PortalSession{}, false, err
	}
	return ps, true, nil
}

// portalPrincipal is who a portal session acts as: a tenant token of its
// tenant, read-only when the session is. It has no token id: it is no
// token.
func portalPrincipal(ps store.PortalSession) Principal {
	return Principal{Name: "portal:" + ps.ID, Scope: store.ScopeTenant, TenantID: ps.TenantID, ReadOnly: ps.ReadOnly}
}
