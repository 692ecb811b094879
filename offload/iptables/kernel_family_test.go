package iptables

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/kernel/conntrack"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
)

// The dual-stack lab: newLab's topology with an IPv6 address next to every
// IPv4 one, in the documentation prefix:
//
//	client 2001:db8:19::10:2 --- 2001:db8:19::10:1 [node] 2001:db8:19::1x:1 --- 2001:db8:19::1x:2 backend x
//
// The IPv6 pod network is 2001:db8:19::/64; services are in 2001:db8:18::/112.
var labClient6 = netip.MustParseAddr("2001:db8:19::10:2")

func backendAddr6(i int) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("2001:db8:19::%x:2", 0x11+i))
}

func newDualLab(t *testing.T) *lab {
	t.Helper()
	netnstestRequireIP6tables(t)
	l := newLab(t)
	l.node.Sysctl(t, "net.ipv6.conf.all.forwarding", "1")
	// REJECT's ICMPv6 errors are rate-limited per destination (1/s after a
	// burst); a test that is refused many times must not lose one to that.
	l.node.Sysctl(t, "net.ipv6.icmp.ratelimit", "0")
	l.node.AddAddr(t, "n-client", netip.MustParsePrefix("2001:db8:19::10:1/112"))
	l.client.AddAddr(t, "eth0", netip.MustParsePrefix("2001:db8:19::10:2/112"))
	l.client.Run(t, "ip", "-6", "route", "add", "default", "via", "2001:db8:19::10:1")
	for i, b := range l.backends {
		node := netip.MustParsePrefix(fmt.Sprintf("2001:db8:19::%x:1/112", 0x11+i))
		l.node.AddAddr(t, fmt.Sprintf("n-b%d", i), node)
		b.AddAddr(t, "eth0", netip.PrefixFrom(backendAddr6(i), 112))
		b.Run(t, "ip", "-6", "route", "add", "default", "via", node.Addr().String())
	}
	l.node.Run(t, "ip", "-6", "route", "add", "2001:db8:18::/112", "dev", "n-client")
	return l
}

func netnstestRequireIP6tables(t *testing.T) {
	t.Helper()
	netnstestRequireConntrack(t)
	if _, err := kiptables.New(kiptables.Config{Family: kiptables.IPv6}); err != nil {
		t.Skipf("needs ip6tables: %v", err)
	}
}

// endpoints6 returns the three backends' IPv6 addresses at port.
func (l *lab) endpoints6(port uint16) []service.Endpoint {
	var eps []service.Endpoint
	for i := range l.backends {
		eps = append(eps, service.Endpoint{Addr: netip.AddrPortFrom(backendAddr6(i), port), Ready: true, Serving: true, NodeName: thisNode})
	}
	return eps
}

// familyProxier is one family's Proxier on the node's real ip(6)tables.
func (l *lab) familyProxier(t *testing.T, fam service.Family) (*Proxier, kiptables.Interface) {
	t.Helper()
	ipt, err := kiptables.New(kiptables.Config{Family: kiptables.Family(fam)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := l.cfg
	cfg.Family = fam
	if fam == service.IPv6 {
		cfg.ClusterCIDR = netip.MustParsePrefix("2001:db8:19::/64")
	}
	p, err := NewProxier(ProxierConfig{Rules: cfg, IPTables: ipt, Conntrack: conntrack.Netlink{}})
	if err != nil {
		t.Fatal(err)
	}
	return p, ipt
}

// hostPort joins an address and a port as a dial string: [v6]:port or v4:port.
func hostPort(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }

// A dual-stack Service on the real kernel, with a Proxier per family as
// svcproxy runs them: each ClusterIP spreads over its family's endpoints and
// keeps the client address, affinity holds per client, the NodePort answers
// on the node's address of each family (masqueraded), a port without
// endpoints is refused in both, and Cleanup of each family leaves nothing.
func TestKernelDualStack(t *testing.T) {
	l := newDualLab(t)
	l.serveTCP(t, 8080)
	eps := append(l.endpoints(8080), l.endpoints6(8080)...)
	dual := func(name, v4, v6 string, opts ...svcOpt) *service.Service {
		return svc(name, v4, 80, eps, append([]svcOpt{dualStack(v6)}, opts...)...)
	}
	empty := svc("empty", "198.18.0.30", 80, nil, dualStack("2001:db8:18::30"), withNodePort(30081))
	snap := snapshot(dual("web", "198.18.0.10", "2001:db8:18::10", withNodePort(30080)),
		dual("sticky", "198.18.0.11", "2001:db8:18::11", withAffinity(time.Minute)), empty)

	families := []struct {
		fam                service.Family
		client, node       netip.Addr
		web, sticky, empty netip.Addr
		nodeOnBackend      func(i int) string
	}{
		{service.IPv4, labClient, netip.MustParseAddr("198.19.10.1"), netip.MustParseAddr("198.18.0.10"),
			netip.MustParseAddr("198.18.0.11"), netip.MustParseAddr("198.18.0.30"),
			func(i int) string { return fmt.Sprintf("198.19.%d.1", 11+i) }},
		{service.IPv6, labClient6, netip.MustParseAddr("2001:db8:19::10:1"), netip.MustParseAddr("2001:db8:18::10"),
			netip.MustParseAddr("2001:db8:18::11"), netip.MustParseAddr("2001:db8:18::30"),
			func(i int) string { return fmt.Sprintf("2001:db8:19::%x:1", 0x11+i) }},
	}
	ipts := map[service.Family]kiptables.Interface{}
	for _, f := range families {
		p, ipt := l.familyProxier(t, f.fam)
		ipts[f.fam] = ipt
		l.sync(t, p, snap.Family(f.fam))
	}
	for _, f := range families {
		t.Run(string(f.fam), func(t *testing.T) {
			answers, err := dial(l.client, hostPort(f.web, 80), 30)
			if err != nil {
				t.Fatal(err)
			}
			count := map[string]int{}
			for _, a := range answers {
				count[a.backend]++
				if a.client != f.client.String() {
					t.Errorf("%s saw client %s, want %s", a.backend, a.client, f.client)
				}
			}
			// Binomial(30, 1/3) below 2: probability ~1e-4 per backend.
			for _, b := range []string{"b0", "b1", "b2"} {
				if count[b] < 2 {
					t.Errorf("ClusterIP %s: backend %s got %d of 30: %v", f.web, b, count[b], count)
				}
			}
			sticky, err := dial(l.client, hostPort(f.sticky, 80), 10)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range sticky[1:] {
				if a.backend != sticky[0].backend {
					t.Errorf("affinity on %s: first %s, then %s", f.sticky, sticky[0].backend, a.backend)
				}
			}
			np, err := dial(l.client, hostPort(f.node, 30080), 6)
			if err != nil {
				t.Fatalf("NodePort on %s: %v", f.node, err)
			}
			for _, a := range np {
				if want := f.nodeOnBackend(int(a.backend[1] - '0')); a.client != want {
					t.Errorf("NodePort on %s: %s saw %s, want the node's %s (masqueraded)", f.node, a.backend, a.client, want)
				}
			}
			for _, dst := range []string{hostPort(f.empty, 80), hostPort(f.node, 30081)} {
				if _, err := dial(l.client, dst, 1); !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("%s without endpoints: %v, want connection refused (REJECT)", dst, err)
				}
			}
		})
	}

	for _, f := range families {
		if err := l.node.Do(func() error { return Cleanup(context.Background(), ipts[f.fam]) }); err != nil {
			t.Fatal(err)
		}
	}
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		if out := l.node.Run(t, save); strings.Contains(out, "SVCP") {
			t.Errorf("after Cleanup, %s:\n%s", save, out)
		}
	}
}

// An IPv6 UDP flow keeps its endpoint, and moves when the endpoint leaves:
// the IPv6 conntrack table is cleaned like the IPv4 one.
func TestKernelUDPConntrackIPv6(t *testing.T) {
	l := newDualLab(t)
	l.serveUDP(t, 5353)
	p, _ := l.familyProxier(t, service.IPv6)
	dns := func(eps []service.Endpoint) *service.Snapshot {
		return snapshot(svc("dns", "198.18.0.53", 53, eps, dualStack("2001:db8:18::53"), withProtocol(service.UDP))).Family(service.IPv6)
	}
	l.sync(t, p, dns(l.endpoints6(5353)))
	c := newUDPClient(t, l.client, "[2001:db8:18::53]:53")
	first, err := c.ask()
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got, err := c.ask(); err != nil || got != first {
			t.Fatalf("the flow moved from %s to %s (%v) without a change", first, got, err)
		}
	}
	var keep []service.Endpoint
	for i, e := range l.endpoints6(5353) {
		if first != fmt.Sprintf("b%d", i) {
			keep = append(keep, e)
		}
	}
	l.sync(t, p, dns(keep))
	if got, err := c.ask(); err != nil || got == first {
		t.Errorf("after removing %s: answered by %s (%v), want another backend", first, got, err)
	}
	if h := p.Health(); h.ConntrackDeleted == 0 || h.ConntrackErrors != 0 {
		t.Errorf("health %+v: want IPv6 conntrack entries deleted without errors", h)
	}
}
