package api

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/hookd/hookd/internal/store"
)

// The operator dashboard: one app page (the breaker list, one endpoint,
// the message search and the delivery search), a login page, and static CSS/JS, all embedded. The pages get
// their data from the /v1 API with the session cookie; see
// docs/dashboard.md.

//go:embed dashboard
var dashboardFiles embed.FS

var dashboardPages = template.Must(template.ParseFS(dashboardFiles, "dashboard/*.html"))

// asset is one embedded static file with its validator.
type asset struct {
	body        []byte
	etag        string
	contentType string
}

// dashboardAssets are the files under dashboard/assets by name.
var dashboardAssets = loadAssets(dashboardFiles, "dashboard/assets")

// loadAssets reads every file under dir of files, keyed by base name, with
// its ETag and content type; a file that cannot be read is a build defect.
func loadAssets(files embed.FS, dir string) map[string]asset {
	out := map[string]asset{}
	err := fs.WalkDir(files, dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ct := mime.TypeByExtension(path.Ext(p))
		if ct == "" {
			ct = "application/octet-stream"
		}
		out[path.Base(p)] = asset{body: b, etag: `"` + hex.EncodeToString(sum[:8]) + `"`, contentType: ct}
		return nil
	})
	if err != nil {
		panic(dir + ": " + err.Error())
	}
	return out
}

// contentSecurityPolicy allows only the dashboard's own scripts, styles,
// images and API calls: no inline script or style, no framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// dashboardHeaders sets the dashboard's security headers.
func dashboardHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

func handleDashboardAsset(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := dashboardAssets[chi.URLParam(r, "name")]
		if !ok {
			writeProblem(w, r, d.Logger, errRouteNotFound)
			return
		}
		w.Header().Set("Content-Type", a.contentType)
		w.Header().Set("ETag", a.etag)
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
	})
}

// pageData is what the pages' templates see.
type pageData struct {
	// CSRF is the session's token for X-CSRF-Token (app page only).
	CSRF string
	// Name is the session's token name.
	Name string
	// Next is where a login goes on success (login page only).
	Next string
}

func renderPage(w http.ResponseWriter, r *http.Request, d Deps, status int, name string, data pageData) {
	var buf bytes.Buffer
	if err := dashboardPages.ExecuteTemplate(&buf, name, data); err != nil {
		writeProblem(w, r, d.Logger, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// The app page holds the CSRF token: never stored by a cache.
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// nextRE is where a login may send the browser next: a dashboard page, or
// River's UI.
var nextRE = regexp.MustCompile(`^(/dashboard(/endpoints/[A-Za-z0-9_]{1,64}|/messages|/deliveries|/classes)?|/riverui)$`)

func safeNext(next string) string {
	if nextRE.MatchString(next) {
		return next
	}
	return "/dashboard"
}

// handleDashboardPage serves the app page (the breaker list and an
// endpoint's page; app.js reads which from the path), or sends a browser
// without a valid session to the login page.
func handleDashboardPage(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, ok, err := d.liveSession(r)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		if !ok {
			http.Redirect(w, r, "/dashboard/login?next="+url.QueryEscape(r.URL.Path), http.StatusSeeOther)
			return
		}
		renderPage(w, r, d, http.StatusOK, "index.html", pageData{CSRF: d.sessions.csrfToken(sess), Name: sess.Name})
	})
}

func handleLoginPage(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next := safeNext(r.URL.Query().Get("next"))
		// A session that ended (a logout, its token revoked) shows the form:
		// its pages would send the browser back here.
		_, ok, err := d.liveSession(r)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		if ok {
			http.Redirect(w, r, next, http.StatusSeeOther)
			return
		}
		renderPage(w, r, d, http.StatusOK, "login.html", pageData{Next: next})
	})
}

// sameOrigin reports whether a request was sent by a page of this server
// (or typed in): a cross-site form could otherwise log a browser in with
// the attacker's token.
func sameOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
		return true
	}
	return false
}

// maxLoginBytes caps a login form.
const maxLoginBytes = 4 << 10

// handleLogin checks a token from the login form (field token, and next)
// and sets the session cookie. A bad token is 401 with the same answer as
// the API's, whatever was wrong.
func handleLogin(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !sameOrigin(r) {
			writeProblem(w, r, d.Logger, errCSRF)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxLoginBytes)
		if err := r.ParseForm(); err != nil {
			writeProblem(w, r, d.Logger, invalid("body", "must be a form with a token field"))
			return
		}
		// Failed logins count against the client IP's rate limit, as bad
		// bearer tokens do; an IP over it is refused before checking an
		// unknown token.
		token := strings.TrimSpace(r.PostForm.Get("token"))
		if !knownToken(d.Auth, token) && d.limiter.over(w, clientKey(r, d.TrustedProxies)) {
			writeProblem(w, r, d.Logger, errRateLimited)
			return
		}
		p, err := checkToken(r.Context(), d.Auth, token)
		if err != nil && !errors.Is(err, ErrBadToken) {
			writeProblem(w, r, d.Logger, err)
			return
		}
		if err != nil {
			d.Logger.WarnContext(r.Context(), "dashboard_login_failed", slog.String("remote", r.RemoteAddr))
			if !d.limiter.take(w, r, clientKey(r, d.TrustedProxies)) {
				writeProblem(w, r, d.Logger, errRateLimited)
				return
			}
			writeProblem(w, r, d.Logger, errUnauthorized)
			return
		}
		if !p.Admin() || p.ReadOnly {
			// Sessions act as admins: a tenant or read-only token would
			// reach more through the dashboard than through the API.
			writeProblem(w, r, d.Logger, errDashboardAdmin)
			return
		}
		name := p.Name
		value, sess, err := d.sessions.issue(name, p.TokenID)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		if d.Store != nil {
			err := d.Store.CreateDashboardSession(r.Context(), store.NewDashboardSession{ID: sess.ID, TokenID: p.TokenID, Name: name, ExpiresIn: SessionTTL})
			if err != nil {
				writeProblem(w, r, d.Logger, err)
				return
			}
		}
		http.SetCookie(w, sessionCookie(r, value, int(SessionTTL/time.Second)))
		d.Logger.InfoContext(r.Context(), "dashboard_login", slog.String("name", name),
			slog.Time("expires", time.Unix(sess.Expires, 0).UTC()), slog.String("remote", r.RemoteAddr))
		w.Header().Set("Cache-Control", "no-store")
		http.Redirect(w, r, safeNext(r.PostForm.Get("next")), http.StatusSeeOther)
	})
}

// handleLogout ends the session server-side (a copy of its cookie is
// refused from then on) and clears the session cookie. With a valid
// session it needs the CSRF token, so another site cannot log an operator
// out.
func handleLogout(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sess, ok := d.sessions.fromRequest(r); ok {
			if !d.sessions.validCSRF(sess, r.Header.Get(CSRFHeader)) {
				writeProblem(w, r, d.Logger, errCSRF)
				return
			}
			if d.Store != nil {
				if err := d.Store.EndDashboardSession(r.Context(), sess.ID); err != nil {
					writeProblem(w, r, d.Logger, err)
					return
				}
			}
			d.sessions.forget(sess.ID)
			d.Logger.InfoContext(r.Context(), "dashboard_logout", slog.String("name", sess.Name))
		}
		http.SetCookie(w, sessionCookie(r, "", -1))
		w.Header().Set("Cache-Control", "no-store")
		http.Redirect(w, r, "/dashboard/login", http.StatusSeeOther)
	})
}
