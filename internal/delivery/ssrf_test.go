package delivery_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
)

func TestBlockedAddr(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr   string
		reason string // "" means allowed
	}{
		// Public addresses are allowed.
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"93.184.216.34", ""},
		{"172.15.255.255", ""},
		{"172.32.0.0", ""},
		{"192.167.255.255", ""},
		{"192.169.0.0", ""},
		{"100.63.255.255", ""},
		{"100.128.0.0", ""},
		{"169.253.255.255", ""},
		{"169.255.0.0", ""},
		{"11.0.0.1", ""},
		{"223.255.255.255", ""},
		{"2606:4700:4700::1111", ""},
		{"2001:4860:4860::8888", ""},
		{"::ffff:8.8.8.8", ""},
		{"64:ff9b::808:808", ""}, // NAT64 of 8.8.8.8
		{"2002:808:808::1", ""},  // 6to4 of 8.8.8.8
		{"2a00:1450:4001:82b::200e", ""},

		// Unspecified and "this network".
		{"0.0.0.0", "an unspecified address"},
		{"0.1.2.3", `in 0.0.0.0/8 ("this network")`},
		{"0.255.255.255", `in 0.0.0.0/8 ("this network")`},
		{"::", "an unspecified address"},
		{"::ffff:0.0.0.0", "an unspecified address"},

		// Loopback.
		{"127.0.0.1", "a loopback address"},
		{"127.255.255.254", "a loopback address"},
		{"127.1.2.3", "a loopback address"},
		{"::1", "a loopback address"},
		{"::ffff:127.0.0.1", "a loopback address"},

		// Private: RFC 1918 and ULA.
		{"10.0.0.5", "a private address"},
		{"10.255.255.255", "a private address"},
		{"172.16.0.1", "a private address"},
		{"172.31.255.255", "a private address"},
		{"192.168.0.1", "a private address"},
		{"192.168.255.255", "a private address"},
		{"::ffff:10.0.0.5", "a private address"},
		{"::ffff:192.168.1.1", "a private address"},
		{"::ffff:172.20.0.1", "a private address"},
		{"fc00::1", "a private address (unique local)"},
		{"fd12:3456:789a::1", "a private address (unique local)"},
		{"fec0::1", "a private address (site-local)"},

		// Carrier-grade NAT.
		{"100.64.0.0", "a carrier-grade NAT address"},
		{"100.127.255.255", "a carrier-grade NAT address"},
		{"::ffff:100.100.100.100", "a carrier-grade NAT address"},

		// Link-local, cloud metadata included.
		{"169.254.169.254", "a link-local address (cloud metadata)"},
		{"::ffff:169.254.169.254", "a link-local address (cloud metadata)"},
		{"169.254.0.1", "a link-local address"},
		{"169.254.255.255", "a link-local address"},
		{"fe80::1", "a link-local address"},
		{"fe80::1%eth0", "a link-local address"},
		{"febf:ffff::1", "a link-local address"},

		// Multicast and broadcast.
		{"224.0.0.1", "a multicast address"},
		{"239.255.255.250", "a multicast address"},
		{"::ffff:224.0.0.251", "a multicast address"},
		{"ff02::1", "a multicast address"},
		{"ff05::1:3", "a multicast address"},
		{"255.255.255.255", "the broadcast address"},
		{"::ffff:255.255.255.255", "the broadcast address"},

		// Other special-purpose ranges.
		{"240.0.0.1", "a reserved address"},
		{"192.0.0.8", "a reserved address (IETF protocol assignments)"},
		{"192.0.2.1", "a documentation address"},
		{"198.51.100.7", "a documentation address"},
		{"203.0.113.9", "a documentation address"},
		{"198.18.0.1", "a benchmarking address"},
		{"198.19.255.255", "a benchmarking address"},
		{"192.88.99.1", "a reserved address (6to4 relay anycast)"},
		{"2001:db8::1", "a documentation address"},
		{"100::1", "a discard-only address"},
		{"2001::1", "a Teredo tunnel address"},
		{"64:ff9b:1::a00:5", "a local-use NAT64 address"},

		// IPv4 carried in IPv6.
		{"::127.0.0.1", "an IPv4-compatible address (deprecated)"},
		{"::a00:5", "an IPv4-compatible address (deprecated)"},
		{"64:ff9b::7f00:1", "a NAT64 address of 127.0.0.1, a loopback address"},
		{"64:ff9b::a9fe:a9fe", "a NAT64 address of 169.254.169.254, a link-local address (cloud metadata)"},
		{"2002:a00:5::1", "a 6to4 address of 10.0.0.5, a private address"},
		{"2002:7f00:1::", "a 6to4 address of 127.0.0.1, a loopback address"},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			t.Parallel()
			ip := netip.MustParseAddr(tt.addr)
			reason, blocked := delivery.BlockedAddr(ip)
			require.Equal(t, tt.reason, reason)
			require.Equal(t, tt.reason != "", blocked)
		})
	}

	t.Run("the zero Addr", func(t *testing.T) {
		t.Parallel()
		_, blocked := delivery.BlockedAddr(netip.Addr{})
		require.True(t, blocked)
	})
}

func TestParseLegacyIPv4(t *testing.T) {
	t.Parallel()
	tests := []struct {
		host string
		want string // "" means not an address
	}{
		{"127.1", "127.0.0.1"},
		{"127.0.1", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"0x7f000001", "127.0.0.1"},
		{"0X7F.1", "127.0.0.1"},
		{"0177.0.0.1", "127.0.0.1"},
		{"017700000001", "127.0.0.1"},
		{"127.000.000.001", "127.0.0.1"},
		{"127.0.0.1.", "127.0.0.1"},
		{"10.0.0.5", "10.0.0.5"},
		{"167772165", "10.0.0.5"},
		{"0xa9.0xfe.0xa9.0xfe", "169.254.169.254"},
		{"0", "0.0.0.0"},
		{"0x", "0.0.0.0"},
		{"134744072", "8.8.8.8"},
		{"4294967295", "255.255.255.255"},
		{"4294967296", ""},
		{"256.1", ""},
		{"1.2.3.256", ""},
		{"1.2.65536", ""},
		{"1.2.3.4.5", ""},
		{"08.1", ""},
		{"0xg", ""},
		{"1..2", ""},
		{"", ""},
		{".", ""},
		{"example.com", ""},
		{"localhost", ""},
		{"-1", ""},
		{"+1", ""},
		{"1_000", ""},
		{"::1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			t.Parallel()
			ip, ok := delivery.ParseLegacyIPv4(tt.host)
			require.Equal(t, tt.want != "", ok)
			if ok {
				require.Equal(t, tt.want, ip.String())
			}
		})
	}
}

// fakeResolver answers from a map; an unknown name fails like NXDOMAIN.
type fakeResolver map[string][]string

var _ delivery.Resolver = fakeResolver(nil)

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	addrs, ok := f[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	out := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		out[i] = netip.MustParseAddr(a)
	}
	return out, nil
}

func TestCheckHost(t *testing.T) {
	t.Parallel()
	r := fakeResolver{
		"public.example":   {"93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"},
		"internal.example": {"10.0.0.5"},
		"mixed.example":    {"93.184.216.34", "127.0.0.1"},
		"metadata.example": {"169.254.169.254"},
		"mapped.example":   {"::ffff:192.168.1.1"},
		"ula.example":      {"fd00::1"},
		"empty.example":    {},
	}
	tests := []struct {
		host string
		want string // "" means accepted
	}{
		{"public.example", ""},
		{"internal.example", "resolves to 10.0.0.5, a private address"},
		{"mixed.example", "resolves to 127.0.0.1, a loopback address"},
		{"metadata.example", "resolves to 169.254.169.254, a link-local address (cloud metadata)"},
		{"mapped.example", "resolves to 192.168.1.1, a private address"},
		{"ula.example", "resolves to fd00::1, a private address (unique local)"},
		// Unresolvable names are accepted: delivery-time dialing enforces.
		{"nxdomain.example", ""},
		{"empty.example", ""},
		{"8.8.8.8", ""},
		{"127.0.0.1", "127.0.0.1 is a loopback address"},
		{"::1", "::1 is a loopback address"},
		{"::ffff:169.254.169.254", "::ffff:169.254.169.254 is a link-local address (cloud metadata)"},
		{"fe80::1%eth0", "fe80::1 is a link-local address"},
		{"0.0.0.0", "0.0.0.0 is an unspecified address"},
		{"2130706433", "resolves to 127.0.0.1, a loopback address"},
		{"0x7f.1", "resolves to 127.0.0.1, a loopback address"},
		{"134744072", ""},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			t.Parallel()
			err := delivery.CheckHost(context.Background(), r, tt.host)
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			var be *delivery.BlockedError
			require.ErrorAs(t, err, &be)
			require.Equal(t, tt.want, be.Explain())
			require.ErrorIs(t, err, delivery.ErrBlockedTarget)
		})
	}
}

func TestCheckHostGivesUpOnASlowResolver(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// A lookup cut short is a name that did not resolve: accepted.
	require.NoError(t, delivery.CheckHost(ctx, slowResolver{}, "slow.example"))
}

type slowResolver struct{}

func (slowResolver) LookupNetIP(ctx context.Context, _, _ string) ([]netip.Addr, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestGuardDial(t *testing.T) {
	t.Parallel()
	tests := []struct {
		address string
		blocked bool
	}{
		{"127.0.0.1:80", true},
		{"[::1]:443", true},
		{"10.1.2.3:8080", true},
		{"169.254.169.254:80", true},
		{"[::ffff:127.0.0.1]:80", true},
		{"[fe80::1%eth0]:80", true},
		{"8.8.8.8:443", false},
		{"[2606:4700:4700::1111]:443", false},
		{"not-an-address", true},
	}
	for _, tt := range tests {
		t.Run(tt.address, func(t *testing.T) {
			t.Parallel()
			err := delivery.GuardDial("tcp", tt.address, nil)
			if !tt.blocked {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, delivery.ErrBlockedTarget)
			require.Equal(t, delivery.ErrBlocked, delivery.ErrorClassOf(err))
		})
	}
}

// TestSenderWithGuardNeverConnects: a guarded sender's attempt to a
// loopback receiver fails as blocked, classifies as blocked, and the
// receiver sees nothing, whether the URL names the address or a name
// resolving to it.
func TestSenderWithGuardNeverConnects(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)

	s := delivery.NewSender(delivery.SenderConfig{Timeout: 5 * time.Second, DialControl: delivery.GuardDial})
	t.Cleanup(s.CloseIdle)
	for _, target := range []string{srv.URL, "http://localhost:" + u.Port()} {
		start := time.Now()
		resp := s.Send(context.Background(), delivery.Request{URL: target + "/hook", MessageID: "msg_1", Timestamp: start, Body: []byte(`{}`)}, time.Since, start)
		require.Equal(t, 0, resp.Status, target)
		require.Equal(t, delivery.ErrBlocked, resp.ErrorClass, "%s: %v", target, resp.Err)
		require.Equal(t, delivery.ClassBlocked, delivery.Classify(resp.Status, resp.ErrorClass))
		var be *delivery.BlockedError
		require.True(t, errors.As(resp.Err, &be), "%v", resp.Err)
		require.Equal(t, "a loopback address", be.Reason)
		_, ok := delivery.ClassBlocked.BreakerOutcome()
		require.False(t, ok, "a blocked attempt has no breaker outcome")
	}
	require.Zero(t, hits.Load())

	// The same sender without the guard reaches it.
	open := delivery.NewSender(delivery.SenderConfig{Timeout: 5 * time.Second})
	t.Cleanup(open.CloseIdle)
	start := time.Now()
	resp := open.Send(context.Background(), delivery.Request{URL: srv.URL, MessageID: "msg_1", Timestamp: start, Body: []byte(`{}`)}, time.Since, start)
	require.Equal(t, http.StatusOK, resp.Status, "%v", resp.Err)
}

// FuzzBlockedAddr checks the address policy on arbitrary 4- and 16-byte
// addresses: it never panics, a reason comes with every refusal, an IPv4
// address gets the same verdict in every IPv6 form that carries it, a zone
// changes nothing, and nothing the standard library calls loopback,
// private, link-local, multicast or unspecified is ever allowed.
func FuzzBlockedAddr(f *testing.F) {
	for _, s := range []string{"8.8.8.8", "127.0.0.1", "10.0.0.5", "169.254.169.254", "100.64.0.1", "0.0.0.0",
		"255.255.255.255", "::1", "::", "fe80::1", "fc00::1", "ff02::1", "::ffff:127.0.0.1", "64:ff9b::a00:5",
		"2002:a00:5::", "2606:4700:4700::1111"} {
		f.Add(netip.MustParseAddr(s).AsSlice())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ip, ok := netip.AddrFromSlice(b)
		if !ok {
			reason, blocked := delivery.BlockedAddr(ip)
			require.True(t, blocked)
			require.NotEmpty(t, reason)
			return
		}
		reason, blocked := delivery.BlockedAddr(ip)
		require.Equal(t, blocked, reason != "", "%s: %q", ip, reason)

		u := ip.Unmap()
		if u.IsLoopback() || u.IsPrivate() || u.IsLinkLocalUnicast() || u.IsLinkLocalMulticast() ||
			u.IsInterfaceLocalMulticast() || u.IsMulticast() || u.IsUnspecified() || !u.IsGlobalUnicast() {
			require.True(t, blocked, "%s must be blocked", ip)
		}
		if ip.Is6() {
			zr, zb := delivery.BlockedAddr(ip.WithZone("eth0"))
			require.Equal(t, reason, zr)
			require.Equal(t, blocked, zb)
		}
		if u.Is4() {
			v4 := u.As4()
			mapped := netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: v4[0], 13: v4[1], 14: v4[2], 15: v4[3]})
			mr, mb := delivery.BlockedAddr(mapped)
			r4, b4 := delivery.BlockedAddr(u)
			require.Equal(t, r4, mr)
			require.Equal(t, b4, mb)
			nat64 := netip.AddrFrom16([16]byte{0: 0, 1: 0x64, 2: 0xff, 3: 0x9b, 12: v4[0], 13: v4[1], 14: v4[2], 15: v4[3]})
			_, nb := delivery.BlockedAddr(nat64)
			require.Equal(t, b4, nb, "NAT64 of %s", u)
			sixto4 := netip.AddrFrom16([16]byte{0: 0x20, 1: 0x02, 2: v4[0], 3: v4[1], 4: v4[2], 5: v4[3], 15: 1})
			_, sb := delivery.BlockedAddr(sixto4)
			require.Equal(t, b4, sb, "6to4 of %s", u)
		}
		// The dial-time check agrees with the policy.
		err := delivery.GuardDial("tcp", netip.AddrPortFrom(ip, 443).String(), nil)
		require.Equal(t, blocked, err != nil, "%s: %v", ip, err)
	})
}

// FuzzParseLegacyIPv4 checks that the legacy-address parser never panics
// and agrees with the standard parser on dotted quads.
func FuzzParseLegacyIPv4(f *testing.F) {
	for _, s := range []string{"127.1", "2130706433", "0x7f000001", "0177.0.0.1", "1.2.3.4", "256.1", "example.com", "0x", "1..2", "4294967296"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		ip, ok := delivery.ParseLegacyIPv4(host)
		if std, err := netip.ParseAddr(host); err == nil && std.Is4() {
			require.True(t, ok, host)
			require.Equal(t, std, ip)
		}
		if ok {
			require.True(t, ip.Is4())
		}
	})
}
