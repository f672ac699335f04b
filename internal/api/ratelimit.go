package api

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/httprate"
)

// DefaultRateLimit is the default number of requests per second a token
// may make (the api's --rate-limit).
const DefaultRateLimit = 100

// DefaultRateWindow is the default window the rate is averaged over.
const DefaultRateWindow = time.Second

// rateLimiter limits requests per token and, for requests without a valid
// token, per client IP. It is httprate's sliding-window counter: a key may
// make limit x window requests in any window (the previous window's count
// weighted by how much of it still overlaps), so a longer window allows
// larger bursts at the same average rate. Counters live in this process:
// with several API processes the fleet-wide limit is their sum.
type rateLimiter struct {
	rl     *httprate.RateLimiter
	limit  int
	window time.Duration
}

// newRateLimiter returns a limiter allowing perSecond requests per second
// over window, or nil (no limit) when perSecond is zero or less.
func newRateLimiter(perSecond int, window time.Duration) *rateLimiter {
	if perSecond <= 0 {
		return nil
	}
	if window <= 0 {
		window = DefaultRateWindow
	}
	limit := max(int(math.Round(float64(perSecond)*window.Seconds())), 1)
	return &rateLimiter{
		rl: httprate.NewRateLimiter(limit, window,
			httprate.WithResponseHeaders(httprate.ResponseHeaders{
				Limit: "X-RateLimit-Limit", Remaining: "X-RateLimit-Remaining", Reset: "X-RateLimit-Reset",
			})),
		limit:  limit,
		window: window,
	}
}

// take counts one request against key and reports whether it is allowed.
// When it is not, Retry-After is set and the caller answers 429.
func (l *rateLimiter) take(w http.ResponseWriter, r *http.Request, key string) bool {
	if l == nil {
		return true
	}
	if l.rl.OnLimit(w, r, key) {
		l.setRetryAfter(w)
		return false
	}
	return true
}

// over reports whether key's next request would be refused, without
// counting one.
func (l *rateLimiter) over(w http.ResponseWriter, key string) bool {
	if l == nil {
		return false
	}
	_, rate, err := l.rl.Status(key)
	if err != nil || int(math.Round(rate))+1 <= l.limit {
		return false
	}
	l.setRetryAfter(w)
	return true
}

// setRetryAfter says to come back after a window, in whole seconds (at
// least one): by then the sliding count has dropped below the limit.
func (l *rateLimiter) setRetryAfter(w http.ResponseWriter) {
	w.Header().Set("Retry-After", strconv.Itoa(max(int(math.Ceil(l.window.Seconds())), 1)))
}

// tokenKey is the limiter key of an authenticated request.
func tokenKey(name string) string { return "token:" + name }

// clientKey is the limiter key of a request without a valid token: its
// client IP (an IPv6 client by its /64). X-Forwarded-For is not trusted.
func clientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "ip:" + httprate.CanonicalizeIP(host)
}
