package ruletest

import (
	"math"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// From is a TCP packet from src, outside the node or in a pod, to dst,
// taking the Pick-th way at random rules.
func From(src netip.Addr, dst string, pick int) Packet {
	return Packet{Src: src, Dst: netip.MustParseAddrPort(dst), Pick: pick}
}

// Local is a TCP packet the node itself sends to dst.
func Local(dst string) Packet {
	return Packet{Src: NodeIP, Dst: netip.MustParseAddrPort(dst), Local: true}
}

// TraceCase is one question of CheckTrace: where does Packet end up?
type TraceCase struct {
	Name   string
	Packet Packet
	Want   string // Trace.Result
}

// TraceCluster is the cluster CheckTrace's cases are asked of: a Service of
// every kind, one without endpoints, two with traffic policy Local (one
// without a local endpoint), a UDP one, one behind a LoadBalancer IP with
// source ranges.
func TraceCluster() *service.Snapshot {
	return st.Snapshot(
		st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints(), st.WithNodePort(30080),
			st.WithExternalIPs("198.18.100.1"), st.WithLoadBalancer("198.18.200.1")),
		st.Service("empty", "198.18.0.20", 80, nil, st.WithNodePort(30081), st.WithExternalIPs("198.18.100.2")),
		st.Service("local", "198.18.0.30", 80, st.ThreeEndpoints(), st.WithNodePort(30082), st.WithExternalLocal()),
		st.Service("remote", "198.18.0.40", 80, []service.Endpoint{st.Endpoint("198.19.1.130:8080", "node-b")},
			st.WithNodePort(30083), st.WithExternalLocal(), st.WithInternalLocal()),
		st.Service("dns", "198.18.0.53", 53, st.ThreeEndpoints()[:1], st.WithProtocol(service.UDP)),
		st.Service("fw", "198.18.0.60", 80, st.ThreeEndpoints()[:1], st.WithLoadBalancer("198.18.200.6"), st.WithSourceRanges("198.19.200.0/24")),
	)
}

// TraceCases are the traffic cases of kube-proxy's iptables and nftables
// tests (TestOverallIPTablesRules and friends, written with tracePacket) that
// both paths answer alike, asked of TraceCluster.
var TraceCases = []TraceCase{
	{"pod to ClusterIP", From(PodIP, "198.18.0.10:80", 0), "DNAT 198.19.1.10:8080"},
	{"pod to ClusterIP, third endpoint", From(PodIP, "198.18.0.10:80", 2), "DNAT 198.19.1.130:8080"},
	{"node to ClusterIP", Local("198.18.0.10:80"), "DNAT 198.19.1.10:8080, MASQUERADE"},
	{"outside to ClusterIP", From(OutsideIP, "198.18.0.10:80", 1), "DNAT 198.19.1.11:8080, MASQUERADE"},
	{"hairpin: pod to its own service", From(netip.MustParseAddr("198.19.1.11"), "198.18.0.10:80", 1), "DNAT 198.19.1.11:8080, MASQUERADE"},
	{"outside to NodePort", From(OutsideIP, "198.19.0.1:30080", 0), "DNAT 198.19.1.10:8080, MASQUERADE"},
	{"node to its NodePort", Local("198.19.0.1:30080"), "DNAT 198.19.1.10:8080, MASQUERADE"},
	{"no NodePort on loopback", Local("127.0.0.1:30080"), "ACCEPT"},
	{"outside to externalIP", From(OutsideIP, "198.18.100.1:80", 2), "DNAT 198.19.1.130:8080, MASQUERADE"},
	{"pod to externalIP", From(PodIP, "198.18.100.1:80", 0), "DNAT 198.19.1.10:8080, MASQUERADE"},
	{"outside to LoadBalancer IP", From(OutsideIP, "198.18.200.1:80", 0), "DNAT 198.19.1.10:8080, MASQUERADE"},
	{"UDP to ClusterIP", Packet{Proto: "udp", Src: PodIP, Dst: netip.MustParseAddrPort("198.18.0.53:53")}, "DNAT 198.19.1.10:8080"},
	{"an address that is no ClusterIP passes", From(PodIP, "198.18.0.99:80", 0), "ACCEPT"},

	{"pod to ClusterIP without endpoints", From(PodIP, "198.18.0.20:80", 0), "REJECT"},
	{"node to ClusterIP without endpoints", Local("198.18.0.20:80"), "REJECT"},
	{"outside to NodePort without endpoints", From(OutsideIP, "198.19.0.1:30081", 0), "REJECT"},
	{"outside to externalIP without endpoints", From(OutsideIP, "198.18.100.2:80", 0), "REJECT"},

	// externalTrafficPolicy: Local: only this node's endpoints, client kept.
	{"Local: outside to NodePort", From(OutsideIP, "198.19.0.1:30082", 1), "DNAT 198.19.1.11:8080"},
	{"Local: pod to NodePort goes anywhere", From(PodIP, "198.19.0.1:30082", 2), "DNAT 198.19.1.130:8080"},
	{"Local: node to NodePort goes anywhere, masqueraded", Local("198.19.0.1:30082"), "DNAT 198.19.1.10:8080, MASQUERADE"},
	{"Local: ClusterIP is still Cluster", From(PodIP, "198.18.0.30:80", 2), "DNAT 198.19.1.130:8080"},
	{"Local, no local endpoint: outside to NodePort", From(OutsideIP, "198.19.0.1:30083", 0), "DROP"},
	{"Local, no local endpoint: pod to NodePort", From(PodIP, "198.19.0.1:30083", 0), "DNAT 198.19.1.130:8080"},
	{"internal Local, no local endpoint: pod to ClusterIP", From(PodIP, "198.18.0.40:80", 0), "DROP"},

	// loadBalancerSourceRanges: only the ranges reach the LB IP.
	{"LB source range: inside", From(OutsideIP, "198.18.200.6:80", 0), "DNAT 198.19.1.10:8080, MASQUERADE"},
	{"LB source range: outside", From(netip.MustParseAddr("198.19.201.1"), "198.18.200.6:80", 0), "DROP"},
	{"LB source range: the ClusterIP is not filtered", From(netip.MustParseAddr("198.19.201.1"), "198.18.0.60:80", 0), "DNAT 198.19.1.10:8080, MASQUERADE"},
}

// CheckTrace asks TraceCases, then the path's own cases (where the two paths
// answer differently), of TraceCluster synced by path, one subtest each.
func CheckTrace(t *testing.T, path Path, own ...TraceCase) {
	r := path.New(t, Options{})
	Sync(t, r, TraceCluster())
	for _, tt := range slices.Concat(TraceCases, own) {
		t.Run(tt.Name, func(t *testing.T) {
			tr, err := r.Trace(tt.Packet)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("the packet's way (go test -v prints it):\n%s", tr)
			if tr.Result != tt.Want {
				t.Errorf("result %q, want %q\n%s", tr.Result, tt.Want, tr)
			}
		})
	}
}

// CheckEvenSpread: every endpoint gets 1/n of new connections.
func CheckEvenSpread(t *testing.T, path Path) {
	for _, n := range []int{1, 2, 3, 7} {
		var eps []service.Endpoint
		for i := range n {
			eps = append(eps, st.Endpoint(netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, 1, byte(10 + i)}), 8080).String(), st.ThisNode))
		}
		r := path.New(t, Options{})
		Sync(t, r, st.Snapshot(st.Service("web", "198.18.0.10", 80, eps)))
		trs, err := r.TraceAll(From(PodIP, "198.18.0.10:80", 0))
		if err != nil {
			t.Fatal(err)
		}
		share := map[netip.AddrPort]float64{}
		for _, tr := range trs {
			share[tr.DNAT] += tr.Probability
		}
		if len(share) != n {
			t.Errorf("%d endpoints: reached %d: %v", n, len(share), share)
		}
		for a, p := range share {
			if math.Abs(p-1/float64(n)) > 1e-6 {
				t.Errorf("%d endpoints: %s gets %.6f, want %.6f", n, a, p, 1/float64(n))
			}
		}
	}
}

// CheckAffinity: with ClientIP affinity, whatever the random choice, a client
// returns to its endpoint until the timeout passes; another client does not
// follow it.
func CheckAffinity(t *testing.T, path Path) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	r := path.New(t, Options{Now: func() time.Time { return now }})
	Sync(t, r, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints(), st.WithAffinity(60*time.Second))))
	trace := func(src netip.Addr, pick int) netip.AddrPort {
		t.Helper()
		tr, err := r.Trace(Packet{Src: src, Dst: netip.MustParseAddrPort("198.18.0.10:80"), Pick: pick})
		if err != nil {
			t.Fatal(err)
		}
		return tr.DNAT
	}
	first := trace(PodIP, 1)
	for pick := range 3 {
		if got := trace(PodIP, pick); got != first {
			t.Errorf("pick %d: went to %s, want %s (affinity)", pick, got, first)
		}
	}
	if got := trace(netip.MustParseAddr("198.19.1.51"), 2); got == first {
		t.Errorf("another client followed the first one's affinity to %s", got)
	}
	now = now.Add(61 * time.Second)
	if got := trace(PodIP, 2); got == first {
		t.Errorf("after the timeout: still %s", got)
	}
}

// CheckTopologyHints: the ClusterIP leads to the endpoints
// service.Port.Categorize chose by their hints, and a partial sync after this
// node's zone changed renders the port again (its rendering depends on the
// zone, not only on the port).
func CheckTopologyHints(t *testing.T, path Path) {
	r := path.New(t, Options{})
	hinted := func(forNodes bool, node *service.Node) *service.Snapshot {
		return st.Snapshot(st.Service("web", "198.18.0.10", 80, st.HintedEndpoints(forNodes))).With(service.WithNode(node))
	}
	for _, tt := range []struct {
		name string
		snap *service.Snapshot
		want []string
	}{
		{"no zone known", hinted(false, nil), []string{"198.19.1.10:8080", "198.19.1.11:8080", "198.19.1.130:8080"}},
		{"zone-a", hinted(false, st.InZone("zone-a")), []string{"198.19.1.10:8080"}},
		{"zone-b", hinted(false, st.InZone("zone-b")), []string{"198.19.1.11:8080", "198.19.1.130:8080"}},
		{"node hints", hinted(true, st.InZone("zone-b")), []string{"198.19.1.10:8080", "198.19.1.11:8080"}},
		{"zone lost", hinted(false, &service.Node{Name: st.ThisNode}), []string{"198.19.1.10:8080", "198.19.1.11:8080", "198.19.1.130:8080"}},
	} {
		Sync(t, r, tt.snap)
		trs, err := r.TraceAll(From(PodIP, "198.18.0.10:80", 0))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, tr := range trs {
			got = append(got, tr.DNAT.String())
		}
		slices.Sort(got)
		if got = slices.Compact(got); !slices.Equal(got, tt.want) {
			t.Errorf("%s: the ClusterIP leads to %v, want %v", tt.name, got, tt.want)
		}
	}
}
