package ruletest

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/kernel/conntrack"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// DualEndpoints are st.ThreeEndpoints and their IPv6 twins: what a port of a
// dual-stack Service gets from its two EndpointSlices.
func DualEndpoints() []service.Endpoint {
	return append(st.ThreeEndpoints(), st.Endpoint("[2001:db8:19::1:10]:8080", st.ThisNode), st.Endpoint("[2001:db8:19::1:11]:8080", st.ThisNode),
		st.Endpoint("[2001:db8:19::1:130]:8080", "node-b"))
}

// FamiliesSnapshot is one Snapshot for the two families' rules, whose golden
// texts each path keeps: dual-stack Services with NodePorts, affinity,
// externalIPs, LoadBalancer IPs with source ranges of both families, one
// without endpoints, and an IPv6-only one.
func FamiliesSnapshot() *service.Snapshot {
	return st.Snapshot(
		st.Service("web", "198.18.0.10", 80, DualEndpoints(), st.WithDualStack("2001:db8:18::10"), st.WithNodePort(30080),
			st.WithAffinity(600*time.Second), st.WithExternalIPs("198.18.100.1", "2001:db8:18::100")),
		st.Service("lb", "198.18.0.20", 443, DualEndpoints()[:4], st.WithDualStack("2001:db8:18::20"), st.WithNodePort(30443),
			st.WithLoadBalancer("198.18.200.1", "2001:db8:18::200"), st.WithSourceRanges("203.0.113.0/25", "2001:db8:ff::/48")),
		st.Service("empty", "198.18.0.30", 80, nil, st.WithDualStack("2001:db8:18::30"), st.WithNodePort(30081)),
		st.Service("v6only", "2001:db8:18::40", 53, DualEndpoints()[3:], st.WithProtocol(service.UDP)),
	)
}

// CheckTraceIPv6 asks kube-proxy's tracePacket questions of the IPv6 rules of
// dual-stack Services: even spread over the IPv6 endpoints, affinity per
// client address, the NodePort on the node's IPv6 address (not on ::1),
// masquerade of traffic from outside the pod network, REJECT without
// endpoints; an IPv4 packet is an error.
func CheckTraceIPv6(t *testing.T, path Path) {
	r := path.New(t, Options{Family: service.IPv6})
	Sync(t, r, st.Snapshot(
		st.Service("web", "198.18.0.10", 80, DualEndpoints(), st.WithDualStack("2001:db8:18::10"), st.WithNodePort(30080)),
		st.Service("sticky", "198.18.0.11", 80, DualEndpoints(), st.WithDualStack("2001:db8:18::11"), st.WithAffinity(time.Minute)),
		st.Service("empty", "198.18.0.30", 80, nil, st.WithDualStack("2001:db8:18::30"), st.WithNodePort(30081)),
	))
	vip := netip.MustParseAddrPort("[2001:db8:18::10]:80")

	trs, err := r.TraceAll(Packet{Src: PodIP6, Dst: vip})
	if err != nil {
		t.Fatal(err)
	}
	share := map[string]float64{}
	for _, tr := range trs {
		share[tr.DNAT.String()] += tr.Probability
		if tr.Masquerade {
			t.Errorf("pod to ClusterIP masqueraded: %s", tr.Result)
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

	tr, err := r.Trace(Packet{Src: OutsideIP6, Dst: netip.AddrPortFrom(NodeIP6, 30080)})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(want, tr.DNAT.String()) || !tr.Masquerade {
		t.Errorf("NodePort on the node's IPv6 address: %s, want DNAT to an IPv6 endpoint and MASQUERADE", tr.Result)
	}
	tr, _ = r.Trace(Packet{Src: NodeIP6, Dst: netip.MustParseAddrPort("[::1]:30080"), Local: true})
	if tr.DNAT.IsValid() {
		t.Errorf("NodePort on ::1: %s, want no DNAT", tr.Result)
	}
	tr, _ = r.Trace(Packet{Src: OutsideIP6, Dst: vip})
	if !tr.Masquerade {
		t.Errorf("ClusterIP from outside the pod network: %s, want MASQUERADE", tr.Result)
	}

	sticky := netip.MustParseAddrPort("[2001:db8:18::11]:80")
	first, err := r.Trace(Packet{Src: PodIP6, Dst: sticky, Pick: 2})
	if err != nil {
		t.Fatal(err)
	}
	for pick := range 3 {
		again, _ := r.Trace(Packet{Src: PodIP6, Dst: sticky, Pick: pick})
		if again.DNAT != first.DNAT {
			t.Errorf("affinity: the same client went to %s, then %s", first.DNAT, again.DNAT)
		}
	}
	other, _ := r.Trace(Packet{Src: netip.MustParseAddr("2001:db8:19::1:51"), Dst: sticky, Pick: 0})
	if other.DNAT == first.DNAT {
		t.Errorf("another client (Pick 0) went to %s too: affinity is per client address", other.DNAT)
	}

	for _, dst := range []netip.AddrPort{netip.MustParseAddrPort("[2001:db8:18::30]:80"), netip.AddrPortFrom(NodeIP6, 30081)} {
		tr, _ := r.Trace(Packet{Src: OutsideIP6, Dst: dst})
		if tr.Verdict != "REJECT" {
			t.Errorf("%s: %s, want REJECT", dst, tr.Result)
		}
	}
	if _, err := r.Trace(From(PodIP, "198.18.0.10:80", 0)); err == nil {
		t.Error("an IPv4 packet through the IPv6 rules: no error")
	}
}

// CheckConntrackCleanupIPv6: stale IPv6 UDP flows are deleted from the IPv6
// conntrack table only (a NodePort's filter, which names no address, says its
// family): a flow to an endpoint that left goes, an IPv4 flow stays, and a
// port that gets its first IPv6 endpoints clears the flows to its IPv6
// ClusterIP and NodePort.
func CheckConntrackCleanupIPv6(t *testing.T, path Path) {
	client := netip.MustParseAddrPort("[2001:db8:19::1:50]:5353")
	flow := func(dst, ep string) conntrack.Flow {
		return conntrack.Flow{Protocol: "udp", Src: client, OrigDst: netip.MustParseAddrPort(dst), DstNAT: netip.MustParseAddrPort(ep)}
	}
	dns := func(eps []service.Endpoint) *service.Snapshot {
		return st.Snapshot(st.Service("dns", "198.18.0.53", 53, eps, st.WithDualStack("2001:db8:18::53"), st.WithProtocol(service.UDP), st.WithNodePort(30053)))
	}
	ct := conntrack.NewFake()
	r := path.New(t, Options{Family: service.IPv6, Conntrack: ct})
	Sync(t, r, dns(DualEndpoints()))
	ipv4 := conntrack.Flow{Protocol: "udp", Src: netip.MustParseAddrPort("198.19.1.50:5353"),
		OrigDst: netip.MustParseAddrPort("198.19.0.1:30053"), DstNAT: netip.MustParseAddrPort("198.19.1.11:8080")}
	ct.Add(flow("[2001:db8:18::53]:53", "[2001:db8:19::1:10]:8080"), flow("[2001:db8:18::53]:53", "[2001:db8:19::1:11]:8080"),
		flow("[2001:db8:19::1]:30053", "[2001:db8:19::1:10]:8080"), ipv4)
	Sync(t, r, dns(slices.Delete(DualEndpoints(), 3, 4))) // 2001:db8:19::1:10 leaves
	if got, want := ct.Flows(), []conntrack.Flow{flow("[2001:db8:18::53]:53", "[2001:db8:19::1:11]:8080"), ipv4}; !slices.Equal(got, want) {
		t.Errorf("flows after 2001:db8:19::1:10 left: %v, want %v", got, want)
	}
	Sync(t, r, dns(st.ThreeEndpoints())) // no IPv6 endpoints: REJECT
	before := len(ct.Deletes())
	Sync(t, r, dns(DualEndpoints()))
	want := []conntrack.Filter{{Protocol: "udp", OrigDstPort: 30053, Family: conntrack.IPv6},
		{Protocol: "udp", OrigDst: netip.MustParseAddr("2001:db8:18::53"), OrigDstPort: 53, Family: conntrack.IPv6}}
	if got := ct.Deletes()[before:]; !slices.Equal(got, want) {
		t.Errorf("first IPv6 endpoints: deletes %v, want %v", got, want)
	}
	if got := ct.Flows(); !slices.Equal(got, []conntrack.Flow{ipv4}) {
		t.Errorf("flows %v: want the IPv4 flow kept", got)
	}
}
