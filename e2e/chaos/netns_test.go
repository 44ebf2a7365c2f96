package chaos

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// partitionPool holds the partition links' addresses: each run takes a
// /30 of it that no interface here holds, so that runs at once on one
// machine (CI jobs side by side as root) each have a link of their own.
var partitionPool = netip.MustParsePrefix("198.19.0.0/16")

// netNamePrefix starts the name of every namespace the tests make; the
// test process's id ends it, so that one left by a killed run is known.
const netNamePrefix = "ingestq-chaos-"

// netLink is a network namespace joined to this one by a veth pair. A
// process in it reaches this namespace's end of the link (hostAddr), where
// ZooKeeper and the depositor listen for the partition scenario; this
// namespace reaches it at nsAddr. Taking this end down cuts it off.
type netLink struct {
	ns               string // the namespace's name (ip netns)
	hostIf, nsIf     string // the two ends of the veth pair
	net              netip.Prefix
	hostAddr, nsAddr netip.Addr // the first two addresses of net
}

// bypassProxies adds partitionPool to NO_PROXY, for this process and the
// services it starts. Loopback is never proxied, but the partition's link
// is not loopback: with the machine's HTTPS_PROXY or HTTP_PROXY set, the
// tests' gRPC calls to a replica in the namespace, and the stack's metric
// scrapes, went to the proxy, which cannot reach the link. Call it before
// any HTTP or gRPC client is made (net/http reads the variables once).
func bypassProxies() {
	bypass := partitionPool.String()
	if old := cmp.Or(os.Getenv("NO_PROXY"), os.Getenv("no_proxy")); old != "" {
		bypass = old + "," + bypass
	}
	os.Setenv("NO_PROXY", bypass)
	os.Setenv("no_proxy", bypass)
}

// newNetLink makes the namespace and its link, and removes both when the
// test ends, failed or not. It skips the test when it cannot make
// namespaces here: not root, no `ip netns`, or root without the privilege
// to make one (a container's root lacks CAP_SYS_ADMIN and CAP_NET_ADMIN,
// or its security profile refuses the mount `ip netns add` makes).
func newNetLink(t *testing.T) *netLink {
	t.Helper()
	if uid := os.Geteuid(); uid != 0 {
		t.Skipf("the partition scenario makes a network namespace (ip netns), which takes root; running as uid %d", uid)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skipf("the partition scenario makes a network namespace with ip (iproute2), not found: %v", err)
	}
	if out, err := exec.Command("ip", "netns", "list").CombinedOutput(); err != nil {
		t.Skipf("the partition scenario needs ip netns, unavailable here: %v: %s", err, strings.TrimSpace(string(out)))
	}
	removeStaleNetLinks(t)
	pid := os.Getpid()
	linkNet, err := freeLinkNet(pid)
	if err != nil {
		t.Fatal(err)
	}
	l := &netLink{ns: netNamePrefix + strconv.Itoa(pid), hostIf: fmt.Sprintf("iqc%dh", pid), nsIf: fmt.Sprintf("iqc%dn", pid),
		net: linkNet, hostAddr: linkNet.Addr().Next(), nsAddr: linkNet.Addr().Next().Next()}
	// Making the namespace and its veth pair is where a machine that cannot
	// refuses: that skips; a step failing after them is a failure.
	if err := ip("netns", "add", l.ns); err != nil {
		t.Skipf("the partition scenario makes a network namespace, which this machine refuses: %v", err)
	}
	t.Cleanup(func() {
		if err := l.remove(); err != nil {
			t.Errorf("removing the partition's namespace: %v", err)
		}
	})
	if err := ip("link", "add", l.hostIf, "type", "veth", "peer", "name", l.nsIf, "netns", l.ns); err != nil {
		t.Skipf("the partition scenario links its namespace with a veth pair, which this machine refuses: %v", err)
	}
	bits := strconv.Itoa(l.net.Bits())
	for _, args := range [][]string{
		{"addr", "add", l.hostAddr.String() + "/" + bits, "dev", l.hostIf},
		{"link", "set", l.hostIf, "up"},
		{"-n", l.ns, "addr", "add", l.nsAddr.String() + "/" + bits, "dev", l.nsIf},
		{"-n", l.ns, "link", "set", l.nsIf, "up"},
		{"-n", l.ns, "link", "set", "lo", "up"},
	} {
		if err := ip(args...); err != nil {
			t.Fatalf("making the partition's namespace: %v", err)
		}
	}
	return l
}

// setUp takes this end of the link down (false), cutting the namespace off
// from everything here, or brings it up again (true).
func (l *netLink) setUp(up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return ip("link", "set", l.hostIf, state)
}

// remove deletes the link (both ends go together) and the namespace.
func (l *netLink) remove() error {
	linkErr := ip("link", "del", l.hostIf)
	if err := ip("netns", "del", l.ns); err != nil {
		return fmt.Errorf("%w (and the link: %v)", err, linkErr)
	}
	return nil
}

// removeStaleNetLinks removes the namespaces, and their links, of test
// processes that ended before their cleanup ran (killed by go test's
// timeout, say).
func removeStaleNetLinks(t *testing.T) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		pid, err := strconv.Atoi(strings.TrimPrefix(name, netNamePrefix))
		if !strings.HasPrefix(name, netNamePrefix) || err != nil {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue // its process still runs
		}
		stale := &netLink{ns: name, hostIf: fmt.Sprintf("iqc%dh", pid)}
		if err := stale.remove(); err != nil {
			t.Logf("removing the namespace %s of an earlier run: %v", name, err)
		} else {
			t.Logf("removed the namespace %s of an earlier run", name)
		}
	}
}

// freeLinkNet is a /30 of partitionPool that no interface here holds,
// the search starting at one the process id picks, so that runs at once
// seldom even try the same.
func freeLinkNet(pid int) (netip.Prefix, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("listing this machine's interfaces: %w", err)
	}
	var held []netip.Addr
	for _, ifc := range ifaces {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && partitionPool.Contains(p.Addr()) {
				held = append(held, p.Addr())
			}
		}
	}
	const links = 1 << (30 - 16) // the /30s of the /16
	base := partitionPool.Addr().As4()
	for i := range links {
		k := (pid + i) % links
		a := base
		a[2], a[3] = byte(k>>6), byte(k&63)<<2
		p := netip.PrefixFrom(netip.AddrFrom4(a), 30)
		if !slices.ContainsFunc(held, p.Contains) {
			return p, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("every /30 of %s is held by an interface here", partitionPool)
}

func ip(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
