package delivery

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The SSRF guard. Endpoint URLs are typed in by customers, so without a guard
// the dispatcher would POST wherever they point: the cloud metadata service,
// the database, an admin port on loopback. BlockedAddr is the one address
// policy; it is applied twice:
//
//   - at registration (the API resolves the URL's host with CheckHost and
//     answers 400 naming the address and why), so a mistake is seen at once;
//   - on every dialed IP at delivery time (GuardDial, a net.Dialer Control
//     func), after DNS resolution, so a name that resolves to a public
//     address at registration and to 10.0.0.5 later (DNS rebinding) is still
//     refused. This check is the one that enforces; the first is a courtesy.
//
// A dial the guard refuses fails with an error wrapping ErrBlockedTarget,
// which the classifier maps to ErrBlocked and ClassBlocked: the attempt is
// recorded, retried on the schedule like any failure, and never counted by
// the circuit breaker.

// BlockedAddr reports whether a webhook must not be sent to ip and, when so,
// why, as a noun phrase ("a private address"). It refuses loopback, private
// (RFC 1918 and IPv6 unique local), link-local (169.254.0.0/16, including the
// cloud metadata address 169.254.169.254, and fe80::/10), multicast,
// unspecified, carrier-grade NAT (100.64.0.0/10), 0.0.0.0/8, broadcast and
// the other special-purpose ranges no webhook receiver lives in
// (documentation, benchmarking, reserved). An IPv4 address written as IPv6
// (IPv4-mapped ::ffff:a.b.c.d, or embedded in NAT64 64:ff9b::/96 or 6to4
// 2002::/16) gets the verdict of the IPv4 address it carries; zones are
// ignored. The invalid zero Addr is blocked.
func BlockedAddr(ip netip.Addr) (reason string, blocked bool) {
	if !ip.IsValid() {
		return "not a valid address", true
	}
	ip = ip.WithZone("")
	if ip.Is4In6() {
		ip = ip.Unmap()
	}
	if ip.Is4() {
		return blockedIPv4(ip)
	}
	return blockedIPv6(ip)
}

// addrRange is one refused range and what to call an address in it.
type addrRange struct {
	prefix netip.Prefix
	reason string
}

// ipv4Blocked is checked in order; the first match names the address.
var ipv4Blocked = []addrRange{
	{netip.MustParsePrefix("0.0.0.0/32"), "an unspecified address"},
	{netip.MustParsePrefix("0.0.0.0/8"), `in 0.0.0.0/8 ("this network")`},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a carrier-grade NAT address"},
	{netip.MustParsePrefix("169.254.169.254/32"), "a link-local address (cloud metadata)"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("255.255.255.255/32"), "the broadcast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "a reserved address (IETF protocol assignments)"},
	{netip.MustParsePrefix("192.0.2.0/24"), "a documentation address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "a documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "a documentation address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("192.88.99.0/24"), "a reserved address (6to4 relay anycast)"},
}

// ipv6Blocked is checked in order, after the forms carrying an IPv4 address.
var ipv6Blocked = []addrRange{
	{netip.MustParsePrefix("::/128"), "an unspecified address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("::/96"), "an IPv4-compatible address (deprecated)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local-use NAT64 address"},
	{netip.MustParsePrefix("100::/64"), "a discard-only address"},
	{netip.MustParsePrefix("2001::/32"), "a Teredo tunnel address"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation address"},
	{netip.MustParsePrefix("fc00::/7"), "a private address (unique local)"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fec0::/10"), "a private address (site-local)"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
}

var (
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

func blockedIPv4(ip netip.Addr) (string, bool) {
	for _, r := range ipv4Blocked {
		if r.prefix.Contains(ip) {
			return r.reason, true
		}
	}
	return "", false
}

func blockedIPv6(ip netip.Addr) (string, bool) {
	b := ip.As16()
	switch {
	case nat64Prefix.Contains(ip):
		v4 := netip.AddrFrom4([4]byte(b[12:16]))
		if reason, blocked := blockedIPv4(v4); blocked {
			return fmt.Sprintf("a NAT64 address of %s, %s", v4, reason), true
		}
		return "", false
	case sixToFour.Contains(ip):
		v4 := netip.AddrFrom4([4]byte(b[2:6]))
		if reason, blocked := blockedIPv4(v4); blocked {
			return fmt.Sprintf("a 6to4 address of %s, %s", v4, reason), true
		}
		return "", false
	}
	for _, r := range ipv6Blocked {
		if r.prefix.Contains(ip) {
			return r.reason, true
		}
	}
	if !ip.IsGlobalUnicast() {
		return "not a global unicast address", true
	}
	return "", false
}

// BlockedError is a target the guard refused: the address, why, and the
// host name that resolved to it (empty for an IP literal or a dialed
// address). It matches ErrBlockedTarget with errors.Is.
type BlockedError struct {
	Host   string
	Addr   netip.Addr
	Reason string
}

func (e *BlockedError) Error() string { return ErrBlockedTarget.Error() + ": " + e.Explain() }

// Is makes errors.Is(err, ErrBlockedTarget) true.
func (e *BlockedError) Is(target error) bool { return target == ErrBlockedTarget }

// Explain says what is wrong in words for the person who typed the URL:
// "resolves to 10.0.0.5, a private address" or "127.0.0.1 is a loopback
// address".
func (e *BlockedError) Explain() string {
	if e.Host != "" {
		return fmt.Sprintf("resolves to %s, %s", e.Addr, e.Reason)
	}
	return fmt.Sprintf("%s is %s", e.Addr, e.Reason)
}

// GuardDial is a net.Dialer Control func (SenderConfig.DialControl) that
// refuses to connect to an address BlockedAddr blocks. It runs after DNS
// resolution, on the very address being connected to.
func GuardDial(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: dialed address %q is not an IP address and port", ErrBlockedTarget, address)
	}
	if reason, blocked := BlockedAddr(ap.Addr()); blocked {
		return &BlockedError{Addr: ap.Addr().WithZone(""), Reason: reason}
	}
	return nil
}

// Resolver looks up the addresses of a host; *net.Resolver is one, and
// tests pass a fake.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

var _ Resolver = (*net.Resolver)(nil)

// resolveTimeout bounds the lookup CheckHost makes.
const resolveTimeout = 2 * time.Second

// CheckHost applies the guard to the host of an endpoint URL at
// registration: an IP literal (including the legacy numeric forms such as
// 2130706433 or 0x7f.1 that some resolvers accept) is checked directly, a
// name is resolved with r and refused when any of its addresses is blocked.
// It returns a *BlockedError, or nil.
//
// A name that does not resolve (or whose lookup fails or takes longer than
// two seconds) is accepted: DNS may be set up after the endpoint is, and
// the delivery-time check (GuardDial) is the one that enforces.
func CheckHost(ctx context.Context, r Resolver, host string) error {
	if host == "" {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if reason, blocked := BlockedAddr(ip); blocked {
			return &BlockedError{Addr: ip.WithZone(""), Reason: reason}
		}
		return nil
	}
	if ip, ok := ParseLegacyIPv4(host); ok {
		if reason, blocked := BlockedAddr(ip); blocked {
			return &BlockedError{Host: host, Addr: ip, Reason: reason}
		}
		return nil
	}
	if r == nil {
		r = net.DefaultResolver
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for _, ip := range addrs {
		if reason, blocked := BlockedAddr(ip); blocked {
			return &BlockedError{Host: host, Addr: ip.Unmap().WithZone(""), Reason: reason}
		}
	}
	return nil
}

// ParseLegacyIPv4 parses the IPv4 forms inet_aton accepts beyond the dotted
// quad: one to four parts separated by dots, each decimal, octal (leading
// 0) or hexadecimal (0x), the last part filling the remaining bytes
// ("127.1", "2130706433", "0x7f000001", "0177.0.0.1"). Go's resolver does
// not read these as addresses, but a C resolver may, so the guard treats a
// host written this way as the address it spells.
func ParseLegacyIPv4(host string) (netip.Addr, bool) {
	host = strings.TrimSuffix(host, ".")
	parts := strings.Split(host, ".")
	if host == "" || len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		v, ok := parseAtonPart(p)
		if !ok {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	// Every part but the last is one byte; the last fills the rest.
	last := vals[len(vals)-1]
	if last >= 1<<(8*(5-len(vals))) {
		return netip.Addr{}, false
	}
	var n uint64
	for _, v := range vals[:len(vals)-1] {
		if v > 0xff {
			return netip.Addr{}, false
		}
		n = n<<8 | v
	}
	n = n<<(8*(5-len(vals))) | last
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}

func parseAtonPart(p string) (uint64, bool) {
	base := 10
	switch {
	case p == "":
		return 0, false
	case len(p) > 1 && (p[:2] == "0x" || p[:2] == "0X"):
		base, p = 16, p[2:]
		if p == "" {
			// inet_aton reads a bare "0x" as zero.
			return 0, true
		}
	case len(p) > 1 && p[0] == '0':
		base, p = 8, p[1:]
	}
	v, err := strconv.ParseUint(p, base, 32)
	if err != nil {
		return 0, false
	}
	return v, true
}
