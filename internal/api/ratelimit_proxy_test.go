package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
)

// rawVia sends a request as raw does, with X-Forwarded-For set to xff
// (none when empty).
func (b *testBundle) rawVia(t *testing.T, xff, method, path, auth string) rawAnswer {
	t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, http.NoBody)
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	res, err := b.srv.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	got, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return rawAnswer{status: res.StatusCode, header: res.Header, body: got}
}

// TestDefaultRateLimitNeverThrottlesASequentialClient: with the api's
// default limit and window, a client sending messages one after the other
// as fast as it can is never answered 429: 2,000 messages, or as many as
// 10 s allow (a window is 1 s: under the race detector on a loaded machine
// a sequential client sends tens a second, so more of them prove nothing
// more).
func TestDefaultRateLimitNeverThrottlesASequentialClient(t *testing.T) {
	t.Parallel()
	_, b := setup(t, func(d *api.Deps) { d.RateLimit, d.RateWindow = api.DefaultRateLimit, api.DefaultRateWindow })
	tok, _ := b.storedToken(t, "sequential")
	body := strings.NewReader("")
	start := time.Now()
	sent := 0
	for i := 0; i < 2000 && (i < 100 || time.Since(start) < 10*time.Second); i++ {
		sent++
		body.Reset(`{"tenant_id": "acme", "event_type": "invoice.paid", "payload": {"n": ` + strconv.Itoa(i) + `}}`)
		req, err := http.NewRequest("POST", b.srv.URL+"/v1/messages", body)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		res, err := b.srv.Client().Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusAccepted, res.StatusCode, "message %d", i+1)
	}
	t.Logf("%d sequential messages in %s", sent, time.Since(start).Round(time.Millisecond))
}

// TestRateLimitPerIPFollowsForwardedForOnlyFromTrustedProxies: behind a
// trusted proxy, requests without a valid token count against the client
// X-Forwarded-For names (its right-most untrusted entry: what a client
// writes to its left is ignored); from a peer that is not trusted, the
// header is ignored and the peer is the client.
func TestRateLimitPerIPFollowsForwardedForOnlyFromTrustedProxies(t *testing.T) {
	t.Parallel()
	const window = 30 * time.Second
	loopback := netip.MustParsePrefix("127.0.0.0/8")
	inFirstWindow(t, window, func() func() {
		_, proxied := setup(t, func(d *api.Deps) {
			d.RateLimit, d.RateWindow, d.TrustedProxies = 1, window, []netip.Prefix{loopback}
		})
		for i := range 30 {
			// The client forges addresses to the left: they are not its key.
			xff := "198.51.100." + strconv.Itoa(i) + ", 203.0.113.5"
			require.Equal(t, http.StatusUnauthorized, proxied.rawVia(t, xff, "GET", "/v1/endpoints", "Bearer wrong").status, "guess %d", i+1)
		}
		over := proxied.rawVia(t, "203.0.113.5", "GET", "/v1/endpoints", "Bearer wrong")
		// Another client behind the same proxy has its own budget.
		require.Equal(t, http.StatusUnauthorized, proxied.rawVia(t, "203.0.113.6", "GET", "/v1/endpoints", "Bearer wrong").status)
		// A chain of trusted proxies is skipped to the client.
		chained := proxied.rawVia(t, "203.0.113.5, 127.0.0.9", "GET", "/v1/endpoints", "Bearer wrong")
		return func() {
			requireRateLimited(t, over, 30)
			requireRateLimited(t, chained, 30)
		}
	})
	inFirstWindow(t, window, func() func() {
		_, direct := setup(t, func(d *api.Deps) { d.RateLimit, d.RateWindow = 1, window })
		for i := range 30 {
			xff := "203.0.113." + strconv.Itoa(i)
			require.Equal(t, http.StatusUnauthorized, direct.rawVia(t, xff, "GET", "/v1/endpoints", "Bearer wrong").status, "guess %d", i+1)
		}
		// Without trusted proxies every one of those was the peer's.
		over := direct.rawVia(t, "203.0.113.200", "GET", "/v1/endpoints", "Bearer wrong")
		return func() { requireRateLimited(t, over, 30) }
	})
}

// TestBadTokensDoNotThrottleAValidToken: a flood of bad tokens from the
// valid token's own address is refused, and counted against the address
// only: the valid token keeps its whole budget and is never refused.
func TestBadTokensDoNotThrottleAValidToken(t *testing.T) {
	t.Parallel()
	const window = time.Minute
	inFirstWindow(t, window, func() func() {
		_, b := setup(t, func(d *api.Deps) { d.RateLimit, d.RateWindow = 1, window })
		alice, _ := b.storedToken(t, "alice")
		first := b.raw(t, "GET", "/v1/endpoints", "Bearer "+alice, nil)
		for range 200 {
			s := b.raw(t, "GET", "/v1/endpoints", "Bearer hkd_"+strings.Repeat("x", 43), nil).status
			require.Contains(t, []int{http.StatusUnauthorized, http.StatusTooManyRequests}, s)
		}
		over := b.raw(t, "GET", "/v1/endpoints", "Bearer wrong", nil)
		var after []rawAnswer
		for range 10 {
			after = append(after, b.raw(t, "GET", "/v1/endpoints", "Bearer "+alice, nil))
		}
		return func() {
			require.Equal(t, http.StatusOK, first.status)
			require.Equal(t, "59", first.header.Get("X-RateLimit-Remaining"))
			requireRateLimited(t, over, 60)
			for i, a := range after {
				require.Equal(t, http.StatusOK, a.status, "%s", a.body)
				require.Equal(t, strconv.Itoa(58-i), a.header.Get("X-RateLimit-Remaining"), "bad tokens took nothing from alice's budget")
			}
		}
	})
}

// TestClientIP: the client a request is counted as, by its peer,
// X-Forwarded-For and the trusted proxies.
func TestClientIP(t *testing.T) {
	t.Parallel()
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	for _, tc := range []struct {
		name, peer string
		xff        []string
		want       string
	}{
		{"no proxy", "198.51.100.7:4000", nil, "198.51.100.7"},
		{"untrusted peer's header is ignored", "198.51.100.7:4000", []string{"203.0.113.1"}, "198.51.100.7"},
		{"trusted peer without header", "10.1.2.3:4000", nil, "10.1.2.3"},
		{"trusted peer", "10.1.2.3:4000", []string{"203.0.113.1"}, "203.0.113.1"},
		{"forged entries left of the client", "10.1.2.3:4000", []string{"1.1.1.1, 2.2.2.2, 203.0.113.1"}, "203.0.113.1"},
		{"a chain of trusted proxies", "10.1.2.3:4000", []string{"203.0.113.1, 10.9.9.9", "10.8.8.8"}, "203.0.113.1"},
		{"several header lines", "10.1.2.3:4000", []string{"1.1.1.1", "203.0.113.1"}, "203.0.113.1"},
		{"entry with a port", "10.1.2.3:4000", []string{"203.0.113.1:5555"}, "203.0.113.1"},
		{"IPv6 entry with a port", "[fd00::1]:4000", []string{"[2001:db8::1]:5555"}, "2001:db8::1"},
		{"mapped IPv4 peer", "[::ffff:10.1.2.3]:4000", []string{"203.0.113.1"}, "203.0.113.1"},
		{"malformed client entry", "10.1.2.3:4000", []string{"203.0.113.1, bogus, 10.9.9.9"}, "10.9.9.9"},
		{"only trusted entries", "10.1.2.3:4000", []string{"10.7.7.7, 10.9.9.9"}, "10.7.7.7"},
		{"empty entries", "10.1.2.3:4000", []string{""}, "10.1.2.3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("GET", "/v1/endpoints", nil)
			r.RemoteAddr = tc.peer
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			require.Equal(t, tc.want, api.ClientIP(r, trusted).String())
		})
	}
}

func TestParseTrustedProxies(t *testing.T) {
	t.Parallel()
	got, err := api.ParseTrustedProxies(" 10.0.0.0/8, 192.168.1.7 ,fd00::/8,::ffff:172.16.0.0/108, 10.1.2.3/8")
	require.NoError(t, err)
	var s []string
	for _, p := range got {
		s = append(s, p.String())
	}
	require.Equal(t, []string{"10.0.0.0/8", "192.168.1.7/32", "fd00::/8", "172.16.0.0/12", "10.0.0.0/8"}, s)
	none, err := api.ParseTrustedProxies("")
	require.NoError(t, err)
	require.Empty(t, none)
	for _, bad := range []string{"10.0.0.0/33", "nope", "10.0.0.0/8/8", "fd00::/129"} {
		_, err := api.ParseTrustedProxies(bad)
		require.Error(t, err, bad)
	}
}
