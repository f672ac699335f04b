package api_test

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/delivery"
)

// hosts is a resolver that knows only its own names; any other name does
// not resolve (as the .example names of these tests do not), so no test
// depends on the machine's DNS.
type hosts map[string][]string

var _ delivery.Resolver = hosts(nil)

func (h hosts) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	addrs, ok := h[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	out := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		out[i] = netip.MustParseAddr(a)
	}
	return out, nil
}

var ssrfHosts = hosts{
	"hooks.acme.example":    {"93.184.216.34"},
	"localhost":             {"127.0.0.1", "::1"},
	"intranet.acme.example": {"10.0.0.5"},
	"office.acme.example":   {"192.168.1.20"},
	"k8s.acme.example":      {"172.20.3.4"},
	"metadata.acme.example": {"169.254.169.254"},
	"cgnat.acme.example":    {"100.64.1.2"},
	"ula.acme.example":      {"fd00::5"},
	"ll6.acme.example":      {"fe80::1"},
	"mcast.acme.example":    {"239.1.2.3"},
	"zero.acme.example":     {"0.0.0.0"},
	"mapped.acme.example":   {"::ffff:10.0.0.5"},
	"rebind.acme.example":   {"93.184.216.34", "127.0.0.1"},
	"v6.acme.example":       {"2606:2800:220:1:248:1893:25c8:1946"},
}

// TestRegistrationRefusesNonPublicTargets: POST and PATCH refuse a URL
// whose host is, or resolves to, an address the dispatcher would not dial,
// with 400 on url naming the address and why; nothing is written.
func TestRegistrationRefusesNonPublicTargets(t *testing.T) {
	t.Parallel()
	_, b := setup(t, func(d *api.Deps) { d.Resolver = ssrfHosts })
	kept := b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://hooks.acme.example/ok"})
	requireStatus(t, http.StatusCreated, kept)
	ep := decodeJSON[endpointJSON](t, kept)
	before := b.counts(t)

	tests := []struct {
		url, message string
	}{
		{"http://127.0.0.1/hook", "127.0.0.1 is a loopback address"},
		{"http://127.0.0.1:8080/hook", "127.0.0.1 is a loopback address"},
		{"http://[::1]:8080/hook", "::1 is a loopback address"},
		{"http://localhost:9000/hook", "resolves to 127.0.0.1, a loopback address"},
		{"http://10.0.0.5/hook", "10.0.0.5 is a private address"},
		{"https://intranet.acme.example/hook", "resolves to 10.0.0.5, a private address"},
		{"https://office.acme.example/hook", "resolves to 192.168.1.20, a private address"},
		{"https://k8s.acme.example/hook", "resolves to 172.20.3.4, a private address"},
		{"http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address (cloud metadata)"},
		{"https://metadata.acme.example/", "resolves to 169.254.169.254, a link-local address (cloud metadata)"},
		{"http://[fe80::1]/hook", "fe80::1 is a link-local address"},
		{"https://ll6.acme.example/hook", "resolves to fe80::1, a link-local address"},
		{"http://100.64.1.2/hook", "100.64.1.2 is a carrier-grade NAT address"},
		{"https://cgnat.acme.example/hook", "resolves to 100.64.1.2, a carrier-grade NAT address"},
		{"http://[fd00::5]/hook", "fd00::5 is a private address (unique local)"},
		{"https://ula.acme.example/hook", "resolves to fd00::5, a private address (unique local)"},
		{"http://239.1.2.3/hook", "239.1.2.3 is a multicast address"},
		{"https://mcast.acme.example/hook", "resolves to 239.1.2.3, a multicast address"},
		{"http://[ff02::1]/hook", "ff02::1 is a multicast address"},
		{"http://0.0.0.0/hook", "0.0.0.0 is an unspecified address"},
		{"https://zero.acme.example/hook", "resolves to 0.0.0.0, an unspecified address"},
		{"http://[::]/hook", ":: is an unspecified address"},
		{"http://0.1.2.3/hook", `0.1.2.3 is in 0.0.0.0/8 ("this network")`},
		{"http://255.255.255.255/hook", "255.255.255.255 is the broadcast address"},
		{"http://[::ffff:127.0.0.1]/hook", "::ffff:127.0.0.1 is a loopback address"},
		{"http://[::ffff:169.254.169.254]/hook", "::ffff:169.254.169.254 is a link-local address (cloud metadata)"},
		{"https://mapped.acme.example/hook", "resolves to 10.0.0.5, a private address"},
		{"https://rebind.acme.example/hook", "resolves to 127.0.0.1, a loopback address"},
		{"http://2130706433/hook", "resolves to 127.0.0.1, a loopback address"},
		{"http://0x7f.1/hook", "resolves to 127.0.0.1, a loopback address"},
		{"http://127.1/hook", "resolves to 127.0.0.1, a loopback address"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			p := requireFieldError(t, http.StatusBadRequest, b.do(t, "POST", "/v1/endpoints",
				map[string]any{"tenant_id": "acme", "url": tt.url}, docBlind("where a URL points is not in its syntax")), "url")
			require.Len(t, p.Errors, 1)
			require.Equal(t, tt.message, p.Errors[0].Message)

			p = requireFieldError(t, http.StatusBadRequest, b.do(t, "PATCH", "/v1/endpoints/"+ep.ID,
				map[string]any{"url": tt.url}, docBlind("where a URL points is not in its syntax")), "url")
			require.Equal(t, tt.message, p.Errors[0].Message)
		})
	}
	require.Equal(t, before, b.counts(t), "nothing written")
	got := decodeJSON[endpointJSON](t, b.do(t, "GET", "/v1/endpoints/"+ep.ID, nil))
	require.Equal(t, "https://hooks.acme.example/ok", got.URL, "a refused PATCH changes nothing")

	// Public addresses, and names that do not resolve (yet), are accepted:
	// the dispatcher checks every dialed address again.
	for _, u := range []string{"https://hooks.acme.example/a", "https://v6.acme.example/a", "http://93.184.216.34:8080/a",
		"http://[2606:4700:4700::1111]/a", "https://not-yet.acme.example/a", "http://134744072/a"} {
		requireStatus(t, http.StatusCreated, b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": u}))
		requireStatus(t, http.StatusOK, b.do(t, "PATCH", "/v1/endpoints/"+ep.ID, map[string]any{"url": u}))
	}
	// A PATCH that leaves the URL alone does not look at it.
	requireStatus(t, http.StatusOK, b.do(t, "PATCH", "/v1/endpoints/"+ep.ID, map[string]any{"description": "x"}))
}

// TestAllowPrivateTargetsLiftsTheGuard: with AllowPrivateTargets (the
// api's --allow-private-targets) loopback and private URLs register.
func TestAllowPrivateTargetsLiftsTheGuard(t *testing.T) {
	t.Parallel()
	_, b := setup(t, func(d *api.Deps) { d.Resolver, d.AllowPrivateTargets = ssrfHosts, true })
	for _, u := range []string{"http://127.0.0.1:9000/hook", "http://localhost:9000/hook", "https://intranet.acme.example/hook", "http://[::1]/h"} {
		r := b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": u})
		requireStatus(t, http.StatusCreated, r)
		require.Equal(t, u, decodeJSON[endpointJSON](t, r).URL)
	}
}
