package iptables

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/kernel/conntrack"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
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

// One Snapshot, two rule sets: each family renders its own addresses and
// endpoints only, with its own loopback range and recent mask.
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
			checkGolden(t, tt.name, got)
			// The rules apply to the family's binary (the Fake refuses the
			// other family's addresses, as ip6tables does).
			f := kiptables.NewFakeFamily(kiptables.Family(tt.cfg.Family))
			if tt.cfg.Family == "" {
				f = kiptables.NewFake()
			}
			if err := f.Restore(context.Background(), got); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestRenderFamilyConfig(t *testing.T) {
	_, err := Render(Config{Node: dataplane.Node{Family: service.IPv6, ClusterCIDR: netip.MustParsePrefix("198.19.0.0/16")}}, st.Snapshot())
	if err == nil || !strings.Contains(err.Error(), "ClusterCIDR 198.19.0.0/16: not an IPv6 prefix") {
		t.Errorf("IPv6 rules with an IPv4 ClusterCIDR: %v", err)
	}
	if _, err := Render(Config{Node: dataplane.Node{Family: "IPv5"}}, st.Snapshot()); err == nil {
		t.Error("Family IPv5: no error")
	}
}

// syncedFake6 is syncedFake for the ip6tables rules of snap.
func syncedFake6(t *testing.T, cfg Config, snap *service.Snapshot) *kiptables.Fake {
	t.Helper()
	f := kiptables.NewFakeFamily(kiptables.IPv6)
	f.SetLocalAddrs(nodeIP6)
	cfg.IPTables = f
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	return f
}

// kube-proxy's tracePacket questions, asked of the ip6tables rules of a
// dual-stack Service: even spread over the IPv6 endpoints, affinity per
// client address, the NodePort on the node's IPv6 address, masquerade of
// traffic from outside the pod network, REJECT without endpoints.
func TestTraceIPv6(t *testing.T) {
	snap := st.Snapshot(
		st.Service("web", "198.18.0.10", 80, dualEndpoints(), st.WithDualStack("2001:db8:18::10"), st.WithNodePort(30080)),
		st.Service("sticky", "198.18.0.11", 80, dualEndpoints(), st.WithDualStack("2001:db8:18::11"), st.WithAffinity(time.Minute)),
		st.Service("empty", "198.18.0.30", 80, nil, st.WithDualStack("2001:db8:18::30"), st.WithNodePort(30081)),
	)
	f := syncedFake6(t, testConfig6, snap)
	vip := netip.MustParseAddrPort("[2001:db8:18::10]:80")

	trs, err := f.TraceAll(kiptables.Packet{Src: podIP6, Dst: vip})
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

	tr, err := f.Trace(kiptables.Packet{Src: outsideIP6, Dst: netip.AddrPortFrom(nodeIP6, 30080), InIface: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(want, tr.DNAT.String()) || !tr.Masquerade {
		t.Errorf("NodePort on the node's IPv6 address: %s, want DNAT to an IPv6 endpoint and MASQUERADE", tr.Result())
	}
	tr, _ = f.Trace(kiptables.Packet{Src: outsideIP6, Dst: vip, InIface: "eth0"})
	if !tr.Masquerade {
		t.Errorf("ClusterIP from outside the pod network: %s, want MASQUERADE", tr.Result())
	}

	sticky := netip.MustParseAddrPort("[2001:db8:18::11]:80")
	first, err := f.Trace(kiptables.Packet{Src: podIP6, Dst: sticky, Pick: 2})
	if err != nil {
		t.Fatal(err)
	}
	for pick := range 3 {
		again, _ := f.Trace(kiptables.Packet{Src: podIP6, Dst: sticky, Pick: pick})
		if again.DNAT != first.DNAT {
			t.Errorf("affinity: the same client went to %s, then %s", first.DNAT, again.DNAT)
		}
	}
	other, _ := f.Trace(kiptables.Packet{Src: netip.MustParseAddr("2001:db8:19::1:51"), Dst: sticky, Pick: 0})
	if other.DNAT == first.DNAT {
		t.Errorf("another client (Pick 0) went to %s too: affinity is per client address", other.DNAT)
	}

	for _, dst := range []netip.AddrPort{netip.MustParseAddrPort("[2001:db8:18::30]:80"), netip.AddrPortFrom(nodeIP6, 30081)} {
		tr, _ := f.Trace(kiptables.Packet{Src: outsideIP6, Dst: dst, InIface: "eth0"})
		if tr.Verdict != "REJECT" {
			t.Errorf("%s without endpoints: %s, want REJECT", dst, tr.Result())
		}
	}
}

// Stale IPv6 UDP flows are deleted from the IPv6 conntrack table only.
func TestConntrackCleanupIPv6(t *testing.T) {
	client := netip.MustParseAddrPort("[2001:db8:19::1:50]:5353")
	flow := func(dst, ep string) conntrack.Flow {
		return conntrack.Flow{Protocol: "udp", Src: client, OrigDst: netip.MustParseAddrPort(dst), DstNAT: netip.MustParseAddrPort(ep)}
	}
	dns := func(eps []service.Endpoint) *service.Service {
		return st.Service("dns", "198.18.0.53", 53, eps, st.WithDualStack("2001:db8:18::53"), st.WithProtocol(service.UDP), st.WithNodePort(30053))
	}
	ct := conntrack.NewFake()
	cfg := testConfig6
	cfg.IPTables, cfg.Conntrack = kiptables.NewFakeFamily(kiptables.IPv6), ct
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mustSync(t, p, st.Snapshot(dns(dualEndpoints())))
	ipv4 := conntrack.Flow{Protocol: "udp", Src: netip.MustParseAddrPort("198.19.1.50:5353"),
		OrigDst: netip.MustParseAddrPort("198.19.0.1:30053"), DstNAT: netip.MustParseAddrPort("198.19.1.11:8080")}
	ct.Add(flow("[2001:db8:18::53]:53", "[2001:db8:19::1:10]:8080"), flow("[2001:db8:18::53]:53", "[2001:db8:19::1:11]:8080"),
		flow("[2001:db8:19::1]:30053", "[2001:db8:19::1:10]:8080"), ipv4)
	mustSync(t, p, st.Snapshot(dns(slices.Delete(dualEndpoints(), 3, 4)))) // 2001:db8:19::1:10 leaves
	if got, want := ct.Flows(), []conntrack.Flow{flow("[2001:db8:18::53]:53", "[2001:db8:19::1:11]:8080"), ipv4}; !slices.Equal(got, want) {
		t.Errorf("flows after 2001:db8:19::1:10 left: %v, want %v", got, want)
	}
	mustSync(t, p, st.Snapshot(dns(st.ThreeEndpoints()))) // no IPv6 endpoints: REJECT
	before := len(ct.Deletes())
	mustSync(t, p, st.Snapshot(dns(dualEndpoints())))
	want := []conntrack.Filter{{Protocol: "udp", OrigDstPort: 30053, Family: conntrack.IPv6},
		{Protocol: "udp", OrigDst: netip.MustParseAddr("2001:db8:18::53"), OrigDstPort: 53, Family: conntrack.IPv6}}
	if got := ct.Deletes()[before:]; !slices.Equal(got, want) {
		t.Errorf("first IPv6 endpoints: deletes %v, want %v", got, want)
	}
	if got := ct.Flows(); !slices.Equal(got, []conntrack.Flow{ipv4}) {
		t.Errorf("flows %v: want the IPv4 flow kept", got)
	}
}

// Cleanup empties the ip6tables tables as it empties iptables'.
func TestCleanupIPv6(t *testing.T) {
	f := kiptables.NewFakeFamily(kiptables.IPv6)
	empty := f.Dump()
	cfg := testConfig6
	cfg.IPTables = f
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mustSync(t, p, st.Snapshot(st.Service("web", "198.18.0.10", 80, dualEndpoints(), st.WithDualStack("2001:db8:18::10"), st.WithNodePort(30080))))
	if !strings.Contains(f.Dump(), "2001:db8:18::10") {
		t.Fatalf("nothing synced:\n%s", f.Dump())
	}
	if err := Cleanup(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	if got := f.Dump(); strings.Contains(got, "SVCP") {
		t.Errorf("after Cleanup:\n%s\nwant no SVCP chain or hook (empty: %s)", got, empty)
	}
}
