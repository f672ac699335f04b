package api

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/httprate"
)

// DefaultRateLimit is the default number of requests per second a token
// may make (the api's --rate-limit). A sequential client sends one request
// per round trip, and the api's fastest acceptance measured is 268 us a
// message in process (about 3,700 a second; the whole api accepts about
// 2,000 messages/s on two cores, docs/benchmarks.md): no sequential client
// reaches 10,000/s, while a parallel flood from one token is still cut to a
// few times what the api can serve.
const DefaultRateLimit = 10000

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
// client IP (an IPv6 client by its /64), as clientIP finds it.
func clientKey(r *http.Request, trusted []netip.Prefix) string {
	return "ip:" + httprate.CanonicalizeIP(clientIP(r, trusted).String())
}

// clientIP is the address a request came from. The peer is the client
// unless it is a trusted proxy (in one of trusted's prefixes): then the
// client is the right-most address of X-Forwarded-For that is not a trusted
// proxy, the one the nearest trusted proxy saw. Everything left of it may
// be forged by the client and is never read. A malformed entry where the
// client should be gives the address to its right (the proxy that added
// it); a chain of trusted proxies only gives its left-most.
func clientIP(r *http.Request, trusted []netip.Prefix) netip.Addr {
	peer := peerAddr(r.RemoteAddr)
	if !isTrusted(peer, trusted) {
		return peer
	}
	hops := r.Header.Values("X-Forwarded-For")
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		list := strings.Split(hops[i], ",")
		for j := len(list) - 1; j >= 0; j-- {
			a, ok := parseHop(list[j])
			if !ok {
				return client
			}
			client = a
			if !isTrusted(a, trusted) {
				return a
			}
		}
	}
	return client
}

// peerAddr parses a RemoteAddr ("host:port", or a bare host); an
// unparsable one is the unspecified address, one key for all of them.
func peerAddr(remote string) netip.Addr {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.IPv6Unspecified()
	}
	return a.Unmap()
}

// parseHop parses one X-Forwarded-For entry: an address, possibly with a
// port ("1.2.3.4:5", "[::1]:5") as some proxies write it.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	return netip.Addr{}, false
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ParseTrustedProxies parses a comma-separated list of CIDR prefixes (a
// bare address is its own /32 or /128); empty means none.
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("%q is not a CIDR prefix or an address", f)
			}
			a = a.Unmap()
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR prefix such as 10.0.0.0/8", f)
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
