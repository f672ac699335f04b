package api

import (
	"context"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hookd/hookd/internal/store"
)

// Authenticator checks an API token and names it. The dashboard's login
// uses it; sessions carry the name, never the token.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (name string, ok bool)
}

// BootstrapTokenName is the name BootstrapToken gives the API_TOKEN.
const BootstrapTokenName = "bootstrap"

// BootstrapToken is the Authenticator of the bootstrap admin token
// (API_TOKEN), compared in constant time. An empty one admits nobody.
type BootstrapToken string

// Authenticate implements Authenticator.
func (b BootstrapToken) Authenticate(_ context.Context, token string) (string, bool) {
	if b == "" || token == "" || subtle.ConstantTimeCompare([]byte(token), []byte(b)) != 1 {
		return "", false
	}
	return BootstrapTokenName, true
}

// Session cookie and CSRF header names.
const (
	SessionCookie = "hookd_session"
	CSRFHeader    = "X-CSRF-Token"
	// SessionTTL is how long a dashboard session lasts.
	SessionTTL = 12 * time.Hour
	// MinSessionKeyBytes is the shortest accepted configured session key.
	MinSessionKeyBytes = 32
)

// errCSRF is a cookie-authenticated change without the session's CSRF
// token, or a login posted from another origin.
var errCSRF = errors.New("cross-site request check failed: a change made with the session cookie needs the X-CSRF-Token header of the dashboard page, and a login must come from this origin")

// sessions signs and checks dashboard sessions: an HMAC-SHA256 over the
// token's name and id, the expiry and a random session id. Each session is
// also a row of the store (dashboard_sessions), which a logout ends;
// whether a row is live is cached for TokenCacheTTL.
//
// Its two keys, one signing session cookies and one making CSRF tokens (the
// dashboard's and the portal's), are derived with HKDF-SHA256 under
// distinct labels from one configured secret (SESSION_KEY, or SECRET_KEY
// when that is unset), so every replica given it shares sessions; from a
// random one per process when none is.
type sessions struct {
	sessionKey []byte
	csrfKey    []byte
	now        func() time.Time

	mu sync.Mutex
	// live caches whether a session's row is live, by session id.
	live map[string]cachedLive
}

// session is a signed cookie's payload.
type session struct {
	Name string `json:"n"`
	// TokenID is the id of the token the session was opened with
	// (Principal.TokenID).
	TokenID string `json:"t,omitempty"`
	Expires int64  `json:"e"` // Unix seconds
	ID      string `json:"i"` // 128 random bits, base64url
}

// HKDF labels of the keys derived from the session secret.
const (
	sessionKeyLabel = "hookd dashboard session cookie v1"
	csrfKeyLabel    = "hookd csrf token v1"
)

// newSessions derives its keys from secret, or from a random secret
// (sessions then last as long as the process, on it alone) when secret is
// empty.
func newSessions(secret []byte, now func() time.Time) *sessions {
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret) // never fails (crypto/rand, Go 1.24+)
	}
	return &sessions{sessionKey: deriveKey(secret, sessionKeyLabel), csrfKey: deriveKey(secret, csrfKeyLabel), now: now,
		live: map[string]cachedLive{}}
}

// deriveKey derives a 32-byte key from secret for the use label names.
func deriveKey(secret []byte, label string) []byte {
	k, err := hkdf.Key(sha256.New, secret, nil, label, 32)
	if err != nil {
		// Only a length beyond 255 hash blocks fails.
		panic("derive session key: " + err.Error())
	}
	return k
}

func mac(key []byte, purpose, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(purpose))
	h.Write([]byte{0})
	h.Write([]byte(msg))
	return h.Sum(nil)
}

var b64 = base64.RawURLEncoding

// issue returns a signed cookie value for the token name of id tokenID,
// expiring SessionTTL from now.
func (s *sessions) issue(name, tokenID string) (string, session, error) {
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	sess := session{Name: name, TokenID: tokenID, Expires: s.now().Add(SessionTTL).Unix(), ID: b64.EncodeToString(id)}
	raw, err := json.Marshal(sess)
	if err != nil {
		return "", session{}, fmt.Errorf("session: %w", err)
	}
	payload := b64.EncodeToString(raw)
	return payload + "." + b64.EncodeToString(mac(s.sessionKey, "hookd-session", payload)), sess, nil
}

// parse checks a cookie value's signature and expiry.
func (s *sessions) parse(value string) (session, bool) {
	payload, sig, ok := strings.Cut(value, ".")
	if !ok {
		return session{}, false
	}
	got, err := b64.DecodeString(sig)
	if err != nil || !hmac.Equal(got, mac(s.sessionKey, "hookd-session", payload)) {
		return session{}, false
	}
	raw, err := b64.DecodeString(payload)
	if err != nil {
		return session{}, false
	}
	var sess session
	if err := json.Unmarshal(raw, &sess); err != nil || sess.Name == "" || sess.ID == "" {
		return session{}, false
	}
	if !s.now().Before(time.Unix(sess.Expires, 0)) {
		return session{}, false
	}
	return sess, true
}

// fromRequest returns the request's valid session, if any.
func (s *sessions) fromRequest(r *http.Request) (session, bool) {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return session{}, false
	}
	return s.parse(c.Value)
}

// csrfToken is the session's CSRF token: derived from the session id, so
// nothing is stored, and useless without the session cookie it belongs to.
func (s *sessions) csrfToken(sess session) string {
	return b64.EncodeToString(mac(s.csrfKey, "hookd-csrf", sess.ID))
}

func (s *sessions) validCSRF(sess session, token string) bool {
	got, err := b64.DecodeString(token)
	return err == nil && token != "" && hmac.Equal(got, mac(s.csrfKey, "hookd-csrf", sess.ID))
}

// cookie returns the session cookie: HttpOnly, SameSite=Strict, Secure
// when the request came over TLS (directly, or per a proxy's
// X-Forwarded-Proto: trusting it can only add Secure).
func sessionCookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: SessionCookie, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https"),
	}
}

// safeMethod reports whether a method changes nothing.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// liveSession returns the request's valid session, if any, and only while
// its row is live (no logout ended it) and the token it was opened with is
// live (when d.Auth can tell): a logout ends the session at once on this
// process, and a logout elsewhere or a revoke of its token within
// TokenCacheTTL. An error means the check could not be made.
func (d Deps) liveSession(r *http.Request) (session, bool, error) {
	sess, ok := d.sessions.fromRequest(r)
	if !ok {
		return session{}, false, nil
	}
	if d.Store != nil {
		live, err := d.sessions.rowLive(r.Context(), d.Store, sess.ID)
		if err != nil || !live {
			return session{}, false, err
		}
	}
	if lc, can := d.Auth.(liveChecker); can && sess.TokenID != "" {
		live, err := lc.Live(r.Context(), sess.TokenID)
		if err != nil || !live {
			return session{}, false, err
		}
	}
	return sess, true, nil
}

// dashboardSessionStore is what sessions need of the store.
type dashboardSessionStore interface {
	LiveDashboardSession(ctx context.Context, id string) (bool, error)
}

var _ dashboardSessionStore = (*store.Store)(nil)

// rowLive reports whether the session id's row is live, asking st at most
// once per TokenCacheTTL.
func (s *sessions) rowLive(ctx context.Context, st dashboardSessionStore, id string) (bool, error) {
	now := s.now()
	s.mu.Lock()
	c, ok := s.live[id]
	s.mu.Unlock()
	if ok && now.Before(c.until) {
		return c.live, nil
	}
	live, err := st.LiveDashboardSession(ctx, id)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.live) >= 256 {
		for k, c := range s.live {
			if !now.Before(c.until) {
				delete(s.live, k)
			}
		}
	}
	s.live[id] = cachedLive{live: live, until: now.Add(TokenCacheTTL)}
	return live, nil
}

// forget drops the cached answer for the session id (its logout).
func (s *sessions) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.live, id)
}

// sessionOrToken admits a /v1 request by the dashboard's session cookie,
// or else hands it to token, the bearer token check. A request with an
// Authorization header always goes to token (and needs no CSRF token:
// a browser never adds that header on its own); one admitted by the cookie
// must carry the session's CSRF token in X-CSRF-Token unless its method
// is safe, and counts against its token's rate limit. The session's name
// becomes the request's actor.
func sessionOrToken(d Deps, token func(http.Handler) http.Handler) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		byToken := token(next)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if len(r.Header.Values("Authorization")) > 0 {
				byToken.ServeHTTP(w, r)
				return
			}
			sess, ok, err := d.liveSession(r)
			if err != nil {
				writeProblem(w, r, d.Logger, err)
				return
			}
			if !ok {
				byPortal(d, byToken, next).ServeHTTP(w, r)
				return
			}
			if !safeMethod(r.Method) && !d.sessions.validCSRF(sess, r.Header.Get(CSRFHeader)) {
				writeProblem(w, r, d.Logger, errCSRF)
				return
			}
			if !d.limiter.take(w, r, tokenKey(sess.Name)) {
				writeProblem(w, r, d.Logger, errRateLimited)
				return
			}
			// Only writable admin tokens open sessions (handleLogin), and
			// liveSession checks the token still is one.
			next.ServeHTTP(w, withPrincipal(r, adminPrincipal(sess.Name, sess.TokenID)))
		})
	}
}

// byPortal admits a /v1 request by the tenant portal's cookie, or else
// hands it to token. The session acts as a tenant token of its tenant
// (read-only when it is), so scope.go's rules apply to it unchanged; a
// change needs the session's CSRF token, as the dashboard's does.
func byPortal(d Deps, token, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ps, ok, err := d.portalSession(r.Context(), r)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		if !ok {
			token.ServeHTTP(w, r)
			return
		}
		if !safeMethod(r.Method) && !hmac.Equal([]byte(r.Header.Get(CSRFHeader)), []byte(d.portalCSRF(ps.ID))) {
			writeProblem(w, r, d.Logger, errCSRF)
			return
		}
		p := portalPrincipal(ps)
		if !d.limiter.take(w, r, tokenKey(p.Name)) {
			writeProblem(w, r, d.Logger, errRateLimited)
			return
		}
		next.ServeHTTP(w, withPrincipal(r, p))
	})
}
