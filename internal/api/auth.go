package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/hookd/hookd/internal/store"
)

var (
	_ Authenticator = (*TokenAuth)(nil)
	_ tokenChecker  = (*TokenAuth)(nil)
	_ liveChecker   = (*TokenAuth)(nil)
	_ knownChecker  = (*TokenAuth)(nil)
)

// tokenChecker is an Authenticator that can tell a bad token from a check
// that could not be made (the database is unavailable), so /v1 can answer
// 503 rather than 401 then.
type tokenChecker interface {
	// Check returns who the token acts as, ErrBadToken for a missing,
	// unknown, revoked or expired token, or another error when the check
	// failed.
	Check(ctx context.Context, token string) (Principal, error)
}

// liveChecker is an Authenticator that can tell whether the token a
// dashboard session was opened with is still live: sessions carry the
// token's id, so a revoke must end them too.
type liveChecker interface {
	// Live reports whether the token of id is live, writable and an
	// admin's.
	Live(ctx context.Context, tokenID string) (bool, error)
}

// knownChecker is an Authenticator that can tell, without a database
// lookup, whether a token is one it verified recently. A client IP over its
// limit for bad tokens is refused before its token is checked, so a flood
// of guesses costs no lookups; a known token is checked all the same, so
// the flood never locks out a valid token in use from the same address.
type knownChecker interface {
	Known(token string) bool
}

// KnownTokenTTL is how long TokenAuth counts a verified token as known
// (knownChecker) after it last verified it.
const KnownTokenTTL = 24 * time.Hour

// ErrBadToken is a missing, unknown, revoked or expired token. Every such request
// gets the same 401 problem: nothing says which part was wrong.
var ErrBadToken = errUnauthorized

// TokenPrefix starts every stored API token.
const TokenPrefix = "hkd_"

// tokenBytes is how many random bytes a stored token carries (256 bits).
const tokenBytes = 32

// storedTokenPattern is the shape of every token NewToken makes: the prefix
// and 32 bytes in unpadded base64url.
var storedTokenPattern = regexp.MustCompile(`^hkd_[A-Za-z0-9_-]{43}$`)

// NewToken returns a new API token, "hkd_" and 32 bytes read from r
// (normally crypto/rand.Reader) in unpadded base64url, with its SHA-256:
// the sum is what is stored, the token is shown once.
func NewToken(r io.Reader) (token string, sum [32]byte, err error) {
	b := make([]byte, tokenBytes)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", sum, fmt.Errorf("generate token: %w", err)
	}
	token = TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	return token, sha256.Sum256([]byte(token)), nil
}

var tokenNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// ValidateTokenName checks a stored token's name: 1-64 letters, digits and
// . _ @ -, starting with a letter or digit, and not "bootstrap", which
// names the API_TOKEN in audit records.
func ValidateTokenName(name string) error {
	switch {
	case !tokenNamePattern.MatchString(name):
		return errors.New("must be 1-64 characters of letters, digits and . _ @ -, starting with a letter or digit")
	case strings.EqualFold(name, BootstrapTokenName):
		return fmt.Errorf("%q names the bootstrap API_TOKEN", BootstrapTokenName)
	}
	return nil
}

// TokenStore is what TokenAuth needs of the store.
type TokenStore interface {
	LookupAPIToken(ctx context.Context, sum [32]byte) (store.APIToken, []byte, error)
	LiveAdminToken(ctx context.Context, id string) (bool, error)
}

var _ TokenStore = (*store.Store)(nil)

// TokenCacheTTL is how long TokenAuth trusts a stored token it verified
// without asking the database again. A revoked or expired token is refused
// by every API process within this time.
const TokenCacheTTL = 10 * time.Second

// TokenAuth authenticates the bootstrap token and stored tokens.
//
// Timing: the presented token is hashed first, and the bootstrap token is
// compared by its SHA-256 with subtle.ConstantTimeCompare, so neither its
// length nor any prefix leaks. A stored token is found by the SHA-256 of
// the presented one (an index lookup in Postgres, or a map lookup in the
// cache), so what a lookup's timing could reveal is how the hash of the
// attacker's own guess compares with stored hashes, which does not help to
// find a token without a SHA-256 preimage of a 256-bit random value. The
// stored hash is then compared with subtle.ConstantTimeCompare all the
// same. Only strings shaped like a stored token ("hkd_" and 43 base64url
// characters) reach the database.
//
// Verified stored tokens are cached for TokenCacheTTL, so authentication is
// not a database round trip per request; concurrent lookups of one token
// share a single query; the store stamps last use at most once a minute.
// Live answers for dashboard sessions the same way: whether the session's
// token (by id) is still live, cached for TokenCacheTTL, so a revoke ends
// the sessions opened with the token within that time too.
type TokenAuth struct {
	bootstrap    [32]byte
	hasBootstrap bool
	store        TokenStore
	ttl          time.Duration
	now          func() time.Time

	lookups singleflight.Group
	mu      sync.Mutex
	cache   map[[32]byte]cachedToken
	// live caches Live's answers by token id.
	live map[string]cachedLive
	// known holds when each stored token was last verified, for Known. It
	// grows only with real tokens.
	known map[[32]byte]time.Time
}

type cachedLive struct {
	live  bool
	until time.Time
}

type cachedToken struct {
	p     Principal
	until time.Time
}

// NewTokenAuth returns a TokenAuth accepting bootstrap (when not empty)
// and the live tokens of st (when not nil). now is its clock; nil means
// time.Now.
func NewTokenAuth(bootstrap string, st TokenStore, now func() time.Time) *TokenAuth {
	if now == nil {
		now = time.Now
	}
	a := &TokenAuth{store: st, ttl: TokenCacheTTL, now: now, cache: map[[32]byte]cachedToken{}, live: map[string]cachedLive{}, known: map[[32]byte]time.Time{}}
	if bootstrap != "" {
		a.bootstrap, a.hasBootstrap = sha256.Sum256([]byte(bootstrap)), true
	}
	return a
}

// Authenticate implements Authenticator: the token's name and true, or
// false for a bad token or a check that could not be made.
func (a *TokenAuth) Authenticate(ctx context.Context, token string) (string, bool) {
	p, err := a.Check(ctx, token)
	return p.Name, err == nil
}

// Check implements tokenChecker. The bootstrap token is an admin.
func (a *TokenAuth) Check(ctx context.Context, token string) (Principal, error) {
	if token == "" {
		return Principal{}, ErrBadToken
	}
	sum := sha256.Sum256([]byte(token))
	if a.hasBootstrap && subtle.ConstantTimeCompare(sum[:], a.bootstrap[:]) == 1 {
		return adminPrincipal(BootstrapTokenName, BootstrapTokenName), nil
	}
	if a.store == nil || !storedTokenPattern.MatchString(token) {
		return Principal{}, ErrBadToken
	}
	now := a.now()
	a.mu.Lock()
	c, ok := a.cache[sum]
	a.mu.Unlock()
	if ok && now.Before(c.until) {
		return c.p, nil
	}
	v, err, _ := a.lookups.Do(string(sum[:]), func() (any, error) {
		// Shared by every request presenting this token meanwhile, so no
		// one request's cancellation may cut it short.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		t, stored, err := a.store.LookupAPIToken(lctx, sum)
		switch {
		case errors.Is(err, store.ErrNotFound):
			a.forget(sum)
			return Principal{}, ErrBadToken
		case err != nil:
			return Principal{}, fmt.Errorf("authenticate: %w", err)
		case subtle.ConstantTimeCompare(stored, sum[:]) != 1:
			a.forget(sum)
			return Principal{}, ErrBadToken
		}
		p := principalOf(t)
		a.remember(sum, p, now)
		return p, nil
	})
	if err != nil {
		return Principal{}, err
	}
	return v.(Principal), nil
}

// remember caches a verified token, first dropping expired entries when the
// cache has grown (it holds at most the live tokens in use).
func (a *TokenAuth) remember(sum [32]byte, p Principal, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.cache) >= 64 {
		for k, c := range a.cache {
			if !now.Before(c.until) {
				delete(a.cache, k)
			}
		}
	}
	a.cache[sum] = cachedToken{p: p, until: now.Add(a.ttl)}
	if len(a.known) >= 1024 {
		for k, at := range a.known {
			if now.Sub(at) > KnownTokenTTL {
				delete(a.known, k)
			}
		}
	}
	a.known[sum] = now
}

// forget drops a token that no longer verifies (revoked, expired) from
// the known ones.
func (a *TokenAuth) forget(sum [32]byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.known, sum)
}

// Known implements knownChecker: the bootstrap token, or a stored token
// verified within KnownTokenTTL and not refused since.
func (a *TokenAuth) Known(token string) bool {
	if token == "" {
		return false
	}
	sum := sha256.Sum256([]byte(token))
	if a.hasBootstrap && subtle.ConstantTimeCompare(sum[:], a.bootstrap[:]) == 1 {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.known[sum]
	return ok && a.now().Sub(at) <= KnownTokenTTL
}

// Live implements liveChecker: the bootstrap token (id "bootstrap") is
// live while an API_TOKEN is configured, a stored one while it is live,
// writable and an admin's.
func (a *TokenAuth) Live(ctx context.Context, tokenID string) (bool, error) {
	if tokenID == BootstrapTokenName {
		return a.hasBootstrap, nil
	}
	if a.store == nil {
		return false, nil
	}
	now := a.now()
	a.mu.Lock()
	c, ok := a.live[tokenID]
	a.mu.Unlock()
	if ok && now.Before(c.until) {
		return c.live, nil
	}
	v, err, _ := a.lookups.Do("live:"+tokenID, func() (any, error) {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		live, err := a.store.LiveAdminToken(lctx, tokenID)
		if err != nil {
			return false, fmt.Errorf("check session token: %w", err)
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if len(a.live) >= 64 {
			for k, c := range a.live {
				if !now.Before(c.until) {
					delete(a.live, k)
				}
			}
		}
		a.live[tokenID] = cachedLive{live: live, until: now.Add(a.ttl)}
		return live, nil
	})
	if err != nil {
		return false, err
	}
	return v.(bool), nil
}
