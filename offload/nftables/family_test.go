package nftables

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/kernel/conntrack"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// The IPv6 side of the test cluster: this node at 2001:db8:19::1, pods in
// 2001:db8:19::1:0/112, services in 2001:db8:18::/112.
var (
	testConfig6 = Config{Node: dataplane.Node{Family: service.IPv6, NodeName: st.ThisNode, ClusterCIDR: netip.MustParsePrefix("2001:db8:19::1:0/112")}}
	nodeIP6     = netip.MustParseAddr("2001:db8:19::1")
	podIP6      = netip.MustParseAddr("2001:db8:19::1:50")
	outsideIP6  = netip.MustParseAddr("2001:db8:19::200:7")
)

// dualEndpoints are threeEndpoints and their IPv6 twins: what a port of a
// dual-stack Service gets from its two EndpointSlices.
func dualEndpoints() []service.Endpoint {
	return append(st.ThreeEndpoints(), st.Endpoint("[2001:db8:19::1:10]:8080", st.ThisNode), st.Endpoint("[2001:db8:19::1:11]:8080", st.ThisNode),
		st.Endpoint("[2001:db8:19::1:130]:8080", "node-b"))
}

// One Snapshot, two tables: `ip svcproxy` renders the IPv4 addresses and
// endpoints only, `ip6 svcproxy` the IPv6 ones, with ip6 expressions,
// ipv6_addr sets and ::1 as the loopback NodePorts never answer on.
func TestRenderGoldenFamilies(t *testing.T) {
	snap := st.Snapshot(
		st.Service("web", "198.18.0.10", 80, dualEndpoints(), st.WithDualStack("2001:db8:18::10"), st.WithNodePort(30080),
			st.WithAffinity(600*time.Second), st.WithExternalIPs("198.18.100.1", "2001:db8:18::100")),
		st.Service("lb", "198.18.0.20", 443, dualEndpoints()[:4], st.WithDualStack("2001:db8:18::20"), st.WithNodePort(30443),
			st.WithLoadBalancer("198.18.200.1", "2001:db8:18::200"), st.WithSourceRanges("203.0.113.0/25", "2001:db8:ff::/48")),
		st.Service("empty", "198.18.0.30", 80, nil, st.WithDualStack("2001:db8:18::30"), st.WithNodePort(30081)),
		st.Service("v6only", "2001:db8:18::40", 53, dualEndpoints()[3:], st.WithProtocol(service.UDP)),
	)
	for _, tt := range []struct {
		name string
		cfg  Config
	}{
		{"dual-stack-ipv4", testConfig},
		{"dual-stack-ipv6", testConfig6},
		{"dual-stack-ipv6-node-ips", Config{Node: dataplane.Node{Family: service.IPv6, NodeName: st.ThisNode, NodePortIPs: st.Addrs("198.19.0.1", "2001:db8:19::1", "::1")}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Render(tt.cfg, snap)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, tt.name, []byte(got))
			other := " 2001:db8:"
			if tt.cfg.Family == service.IPv6 {
				other = " 198.1"
			}
			for line := range strings.Lines(got) {
				if strings.Contains(line, other) {
					t.Errorf("%s: an address of the other family: %s", tt.name, line)
				}
			}
		})
	}
}

// syncedFake6 is syncedFake for the `ip6 svcproxy` table of snap.
func syncedFake6(t *testing.T, cfg Config, snap *service.Snapshot) *knft.Fake {
	t.Helper()
	f := knft.NewFakeFamily(TableFamily(service.IPv6), Table)
	f.SetLocalAddrs(nodeIP6)
	cfg.NFT = f
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	return f
}

// kube-proxy's tracePacket questions, asked of the ip6 table of a dual-stack
// Service: even spread over the IPv6 endpoints, affinity per client address,
// the NodePort on the node's IPv6 address (not on ::1), masquerade of traffic
// from outside the pod network, REJECT without endpoints.
func TestTraceIPv6(t *testing.T) {
	snap := st.Snapshot(
		st.Service("web", "198.18.0.10", 80, dualEndpoints(), st.WithDualStack("2001:db8:18::10"), st.WithNodePort(30080)),
		st.Service("sticky", "198.18.0.11", 80, dualEndpoints(), st.WithDualStack("2001:db8:18::11"), st.WithAffinity(time.Minute)),
		st.Service("empty", "198.18.0.30", 80, nil, st.WithDualStack("2001:db8:18::30"), st.WithNodePort(30081)),
	)
	f := syncedFake6(t, testConfig6, snap)
	vip := netip.MustParseAddrPort("[2001:db8:18::10]:80")

	trs, err := f.TraceAll(knft.Packet{Src: podIP6, Dst: vip})
	if err != nil {
		t.Fatal(err)
	}
	share := map[string]float64{}
	for _, tr := range trs {
		share[tr.DNAT.String()] += tr.Probability
		if tr.Masquerade {
			t.Errorf("pod to ClusterIP masqueraded: %s", tr.Result())
		}
	}
	want := []string{"[2001:db8:19::1:10]:8080", "[2001:db8:19::1:11]:8080", "[2001:db8:19::1:130]:8080"}
	for _, w := range want {
		if d := share[w] - 1.0/3; d > 1e-6 || d < -1e-6 {
			t.Errorf("share of %s: %.4f, want 1/3 (all: %v)", w, share[w], share)
		}
	}
	if len(share) != 3 {
		t.Errorf("endpoints reached: %v, want the three IPv6 ones only", share)
	}

	tr, err := f.Trace(knft.Packet{Src: outsideIP6, Dst: netip.AddrPortFrom(nodeIP6, 30080)})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(want, tr.DNAT.String()) || !tr.Masquerade {
		t.Errorf("NodePort on the node's IPv6 address: %s, want DNAT to an IPv6 endpoint and MASQUERADE", tr.Result())
	}
	tr, _ = f.Trace(knft.Packet{Src: nodeIP6, Dst: netip.MustParseAddrPort("[::1]:30080"), Local: true})
	if tr.DNAT.IsValid() {
		t.Errorf("NodePort on ::1: %s, want no DNAT", tr.Result())
	}
	tr, _ = f.Trace(knft.Packet{Src: outsideIP6, Dst: vip})
	if !tr.Masquerade {
		t.Errorf("ClusterIP from outside the pod network: %s, want MASQUERADE", tr.Result())
	}

	sticky := netip.MustParseAddrPort("[2001:db8:18::11]:80")
	first, err := f.Trace(knft.Packet{Src: podIP6, Dst: sticky, Pick: 2})
	if err != nil {
		t.Fatal(err)
	}
	for pick := range 3 {
		again, _ := f.Trace(knft.Packet{Src: podIP6, Dst: sticky, Pick: pick})
		if again.DNAT != first.DNAT {
			t.Errorf("affinity: the same client went to %s, then %s", first.DNAT, again.DNAT)
		}
	}
	other, _ := f.Trace(knft.Packet{Src: netip.MustParseAddr("2001:db8:19::1:51"), Dst: sticky, Pick: 0})
	if other.DNAT == first.DNAT {
		t.Errorf("another client (Pick 0) went to %s too: affinity is per client address", other.DNAT)
	}

	for _, dst := range []netip.AddrPort{netip.MustParseAddrPort("[2001:db8:18::30]:80"), netip.AddrPortFrom(nodeIP6, 30081),
		netip.MustParseAddrPort("[2001:db8:18::10]:81")} {
		tr, _ := f.Trace(knft.Packet{Src: outsideIP6, Dst: dst})
		if tr.Verdict != "REJECT" {
			t.Errorf("%s: %s, want REJECT", dst, tr.Result())
		}
	}
	if _, err := f.Trace(knft.Packet{Src: podIP, Dst: netip.MustParseAddrPort("198.18.0.10:80")}); err == nil {
		t.Error("an IPv4 packet through the ip6 table: no error")
	}
}

func TestRenderFamilyConfig(t *testing.T) {
	_, err := Render(Config{Node: dataplane.Node{Family: service.IPv6, ClusterCIDR: netip.MustParsePrefix("198.19.0.0/16")}}, st.Snapshot())
	if err == nil || !strings.Contains(err.Error(), "ClusterCIDR 198.19.0.0/16: not an IPv6 prefix") {
		t.Errorf("an ip6 table with an IPv4 ClusterCIDR: %v", err)
	}
	if _, err := Render(Config{Node: dataplane.Node{Family: "IPv5"}}, st.Snapshot()); err == nil {
		t.Error("Family IPv5: no error")
	}
}

// Stale IPv6 UDP flows are searched in the IPv6 conntrack table only: a
// NodePort's filter, which names no address, says its family.
func TestConntrackCleanupIPv6(t *testing.T) {
	dns := func(eps []service.Endpoint) *service.Service {
		return st.Service("dns", "198.18.0.53", 53, eps, st.WithDualStack("2001:db8:18::53"), st.WithProtocol(service.UDP), st.WithNodePort(30053))
	}
	ct := conntrack.NewFake()
	cfg := testConfig6
	cfg.NFT, cfg.Conntrack = knft.NewFakeFamily(TableFamily(service.IPv6), Table), ct
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sync := func(s *service.Service) {
		t.Helper()
		if err := p.Sync(context.Background(), st.Snapshot(s)); err != nil {
			t.Fatal(err)
		}
	}
	sync(dns(st.ThreeEndpoints())) // no IPv6 endpoints: REJECT
	before := len(ct.Deletes())
	sync(dns(dualEndpoints()))
	want := []conntrack.Filter{{Protocol: "udp", OrigDstPort: 30053, Family: conntrack.IPv6},
		{Protocol: "udp", OrigDst: netip.MustParseAddr("2001:db8:18::53"), OrigDstPort: 53, Family: conntrack.IPv6}}
	got := ct.Deletes()[before:]
	slices.SortFunc(got, func(a, b conntrack.Filter) int { return strings.Compare(a.String(), b.String()) })
	slices.SortFunc(want, func(a, b conntrack.Filter) int { return strings.Compare(a.String(), b.String()) })
	if !slices.Equal(got, want) {
		t.Errorf("first IPv6 endpoints: deletes %v, want %v", got, want)
	}
}
