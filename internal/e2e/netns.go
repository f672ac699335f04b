package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Net is a private network for one test: a bridge in the test's own
// network namespace carrying the address the servers (PostgreSQL, the
// receiver) listen on, and hosts, each a network namespace of its own
// joined to the bridge by a veth pair. A process started on a host
// reaches the servers only through its link, so cutting the link cuts
// the host off as a failed switch port or cable would: its packets are
// dropped, no connection is reset, and both ends learn of it only from
// their own timeouts.
//
// The subnet is a random /24 of 198.18.0.0/15 (RFC 2544's benchmarking
// range, which no real network should route) not on any interface of the
// machine, and the names carry a random suffix, so parallel runs never
// clash. Everything is removed when the test ends, failed or not; only
// the interfaces Net created are touched. A run killed before its
// cleanups ran (go test's timeout) leaves them behind: the next StartNet
// removes those of test binaries that are gone (their links carry the
// owner's pid in their alias, their namespaces in their name).
type Net struct {
	// Addr is the bridge's address: servers for the hosts listen on it.
	Addr netip.Addr
	// Prefix is the subnet of the bridge and the hosts.
	Prefix netip.Prefix
	// Hosts are the namespaces, in order.
	Hosts []*Host

	ip     string // path of iproute2's ip
	bridge string
}

// Host is one network namespace of a Net.
type Host struct {
	// Name is the namespace's name (ip netns).
	Name string
	// Addr is the host's address on the bridge: the source address of
	// every connection its processes open to the servers.
	Addr netip.Addr

	ip   string
	link string // the veth end on the bridge, in the test's namespace
}

// netOwnerPrefix marks what Net creates, followed by the owner's pid:
// namespaces by name, links by alias.
const netOwnerPrefix = "hookd-e2e-"

// RequireNetAdmin returns the path of iproute2's ip after checking that
// this process may create network namespaces. Not root, it skips the test
// and says why (CI runs as root, where the test runs); as root, a missing
// ip or a refused namespace fails the test.
func RequireNetAdmin(t testing.TB) string {
	t.Helper()
	if uid := os.Geteuid(); uid != 0 {
		t.Skipf("e2e: network namespaces need root (CI runs the end-to-end tests as root); skipped as uid %d", uid)
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Fatalf("e2e: network namespaces need iproute2's ip (apt-get install iproute2): %v", err)
	}
	return ip
}

// StartNet creates a Net of n hosts for t and registers its removal with
// t.Cleanup.
func StartNet(t testing.TB, n int) *Net {
	t.Helper()
	nw := &Net{ip: RequireNetAdmin(t)}
	reapNets(t, nw.ip)
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	tag := hex.EncodeToString(suffix)
	owner := netOwnerPrefix + strconv.Itoa(os.Getpid())

	prefix, err := nw.freeSubnet()
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	nw.Prefix = prefix
	nw.Addr = prefix.Addr().Next()

	// Interface names are at most 15 bytes: "hkb" or "hkv" + 6 hex + ...
	nw.bridge = "hkb" + tag
	nw.run(t, "link", "add", nw.bridge, "type", "bridge")
	t.Cleanup(func() { nw.remove(t, "link", "del", nw.bridge) })
	nw.run(t, "link", "set", nw.bridge, "alias", owner)
	nw.run(t, "addr", "add", netip.PrefixFrom(nw.Addr, prefix.Bits()).String(), "dev", nw.bridge)
	nw.run(t, "link", "set", nw.bridge, "up")

	addr := nw.Addr
	for i := range n {
		addr = addr.Next()
		h := &Host{Name: fmt.Sprintf("%s%d-%s-%d", netOwnerPrefix, os.Getpid(), tag, i), Addr: addr, ip: nw.ip,
			link: fmt.Sprintf("hkv%s%d", tag, i)}
		inner := fmt.Sprintf("hkv%sn%d", tag, i)
		nw.run(t, "netns", "add", h.Name)
		t.Cleanup(func() { nw.remove(t, "netns", "del", h.Name) })
		nw.run(t, "link", "add", h.link, "type", "veth", "peer", "name", inner, "netns", h.Name)
		// Deleting one end deletes the pair; the namespace's deletion does
		// it too, but only once no process is left in it.
		t.Cleanup(func() { nw.remove(t, "link", "del", h.link) })
		nw.run(t, "link", "set", h.link, "alias", owner)
		nw.run(t, "link", "set", h.link, "master", nw.bridge)
		nw.run(t, "link", "set", h.link, "up")
		nw.run(t, "-n", h.Name, "addr", "add", netip.PrefixFrom(addr, prefix.Bits()).String(), "dev", inner)
		nw.run(t, "-n", h.Name, "link", "set", inner, "up")
		// Processes on the host listen on its loopback (metrics).
		nw.run(t, "-n", h.Name, "link", "set", "lo", "up")
		nw.Hosts = append(nw.Hosts, h)
	}
	return nw
}

// freeSubnet picks a random /24 of 198.18.0.0/15 that no interface of
// this namespace has an address in.
func (nw *Net) freeSubnet() (netip.Prefix, error) {
	out, err := exec.Command(nw.ip, "-o", "-4", "addr", "show").CombinedOutput()
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("ip addr show: %w\n%s", err, out)
	}
	var used []netip.Prefix
	for _, f := range strings.Fields(string(out)) {
		if p, err := netip.ParsePrefix(f); err == nil {
			used = append(used, p.Masked())
		}
	}
	for range 64 {
		b := make([]byte, 2)
		_, _ = rand.Read(b)
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18 + b[0]&1, b[1], 0}), 24)
		if !overlapsAny(p, used) {
			return p, nil
		}
	}
	return netip.Prefix{}, errors.New("no free /24 in 198.18.0.0/15 for a test network")
}

func overlapsAny(p netip.Prefix, used []netip.Prefix) bool {
	for _, u := range used {
		if u.Overlaps(p) {
			return true
		}
	}
	return false
}

// Exec is the command prefix that runs a program on h.
func (h *Host) Exec() []string { return []string{h.ip, "netns", "exec", h.Name} }

// Cut takes h's link down: from now on every packet between h and the
// bridge is dropped, in both directions.
func (h *Host) Cut(t testing.TB) {
	t.Helper()
	if out, err := exec.Command(h.ip, "link", "set", h.link, "down").CombinedOutput(); err != nil {
		t.Fatalf("e2e: cut %s: %v\n%s", h.Name, err, out)
	}
}

// Restore brings h's link up again.
func (h *Host) Restore(t testing.TB) {
	t.Helper()
	if out, err := exec.Command(h.ip, "link", "set", h.link, "up").CombinedOutput(); err != nil {
		t.Fatalf("e2e: restore %s: %v\n%s", h.Name, err, out)
	}
}

// run runs ip with args and fails the test on error.
func (nw *Net) run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(nw.ip, args...).CombinedOutput(); err != nil {
		t.Fatalf("e2e: ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// remove runs a cleanup's ip command: what is already gone (a veth pair
// goes with its namespace) is no error.
func (nw *Net) remove(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.Command(nw.ip, args...).CombinedOutput()
	if err != nil && !gone(string(out)) {
		t.Errorf("e2e: ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func gone(out string) bool {
	return strings.Contains(out, "Cannot find device") || strings.Contains(out, "No such file") ||
		strings.Contains(out, "does not exist")
}

var (
	ownedLinkRE  = regexp.MustCompile(`^\d+: ([^:@\s]+)[@:].*\balias ` + netOwnerPrefix + `(\d+)`)
	ownedNetnsRE = regexp.MustCompile(`^(` + netOwnerPrefix + `(\d+)-\S+)`)
)

// reapNets removes the links and namespaces of test binaries that are no
// longer running.
func reapNets(t testing.TB, ip string) {
	t.Helper()
	if out, err := exec.Command(ip, "-o", "link", "show").CombinedOutput(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if m := ownedLinkRE.FindStringSubmatch(line); m != nil && !alive(m[2]) {
				_ = exec.Command(ip, "link", "del", m[1]).Run()
			}
		}
	}
	if out, err := exec.Command(ip, "netns", "list").CombinedOutput(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if m := ownedNetnsRE.FindStringSubmatch(line); m != nil && !alive(m[2]) {
				_ = exec.Command(ip, "netns", "del", m[1]).Run()
			}
		}
	}
}

// alive reports whether the process pid exists.
func alive(pid string) bool {
	n, err := strconv.Atoi(pid)
	if err != nil {
		return true
	}
	err = syscall.Kill(n, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
