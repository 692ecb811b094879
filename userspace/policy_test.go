package userspace

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
)

// TestTrafficPolicies: with internalTrafficPolicy Local, what comes in through
// the ClusterIP's listener goes to this node's endpoints only, as in the kernel
// paths; with Cluster, to all of them. Status shows the node's own endpoints.
func TestTrafficPolicies(t *testing.T) {
	here := startTCPBackend(t, direct, "here", "127.0.0.1:0", sayName)
	there := startTCPBackend(t, direct, "there", "127.0.0.1:0", sayName)
	spec := webSpec(service.Affinity{}, here.addr.String()+"@node-a", there.addr.String()+"@node-b")
	p := startProxier(t, Config{Node: dataplane.Node{NodeName: "node-a"}})

	mustSync(t, p, snapshotOf(t, spec))
	if got := answers(t, p, 4); got["here"] != 2 || got["there"] != 2 {
		t.Errorf("policy Cluster: answers %v, want 2 from each endpoint", got)
	}

	spec.internalLocal = true
	mustSync(t, p, snapshotOf(t, spec))
	if got := answers(t, p, 4); got["here"] != 4 {
		t.Errorf("internalTrafficPolicy Local: answers %v, want all 4 from the endpoint on this node", got)
	}
	if ps := portStatus(t, p, "default/web:http"); len(ps.LocalEndpoints) != 1 || ps.LocalEndpoints[0] != here.addr {
		t.Errorf("Status: local endpoints %v, want [%s]", ps.LocalEndpoints, here.addr)
	}

	// No endpoint on this node: the connection is reset (the kernel paths drop
	// it), never sent to another node.
	spec.endpoints = spec.endpoints[1:]
	mustSync(t, p, snapshotOf(t, spec))
	if s, err := readAll(t, listenerAddr(t, p, "default/web:http")); err == nil {
		t.Errorf("no local endpoint: read %q, want a reset", s)
	}
}

// answers makes n connections to the web Service's listener and counts who
// answered.
func answers(t *testing.T, p *Proxier, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		s, err := readAll(t, listenerAddr(t, p, "default/web:http"))
		if err != nil {
			t.Fatalf("connection: %v", err)
		}
		got[s]++
	}
	return got
}

// TestPickFrom: which endpoints a connection may go to, by the listener it came
// in through, the Service's policies and where the client is. External traffic
// (the node port, and the external and load-balancer IPs whose portals lead
// there) from a pod or from the node itself goes to every endpoint even with
// externalTrafficPolicy Local: kube-proxy's "pod traffic for external
// destinations" short-circuit.
func TestPickFrom(t *testing.T) {
	p := startProxier(t, Config{Node: dataplane.Node{NodeName: "node-a", ClusterCIDR: netip.MustParsePrefix("198.19.0.0/16")}})
	mustSync(t, p, service.NewSnapshot(nil, nil))
	outside, pod, node := netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("198.19.5.5"), netip.MustParseAddr("127.0.0.1")

	for _, tc := range []struct {
		internalLocal, externalLocal bool
		external                     bool
		client                       netip.Addr
		wantLocal                    bool
	}{
		{false, false, false, outside, false},
		{false, false, true, outside, false},
		{true, false, false, pod, true},     // iTP Local: ClusterIP traffic stays on the node
		{true, false, true, outside, false}, // ...but not the node port's (eTP Cluster)
		{false, true, false, pod, false},    // eTP Local does not govern ClusterIP traffic
		{false, true, true, outside, true},
		{false, true, true, pod, false},  // short-circuit: a pod
		{false, true, true, node, false}, // short-circuit: the node itself
		{true, true, true, pod, false},
	} {
		sp := newServicePort(service.PortName{Port: "http", Protocol: service.TCP})
		sp.internalLocal.Store(tc.internalLocal)
		sp.externalLocal.Store(tc.externalLocal)
		got := p.pickFrom(sp, tc.external, tc.client) == p.local
		if got != tc.wantLocal {
			t.Errorf("iTP Local %v, eTP Local %v, external %v, client %s: local endpoints only = %v, want %v",
				tc.internalLocal, tc.externalLocal, tc.external, tc.client, got, tc.wantLocal)
		}
	}
}

// TestTopologyHints: trafficDistribution through the endpoints' hints
// (service.Port.Categorize), on loopback listeners: with node hints, every
// connection goes to the endpoint hinted for this node; when the node comes
// into a zone that a zone hint names (and no node hints are given), to that
// zone's; Status shows the endpoints picked from.
func TestTopologyHints(t *testing.T) {
	here := startTCPBackend(t, direct, "here", "127.0.0.1:0", sayName)
	there := startTCPBackend(t, direct, "there", "127.0.0.1:0", sayName)
	spec := webSpec(service.Affinity{}, here.addr.String()+"@node-a", there.addr.String()+"@node-b")
	p := startProxier(t, Config{Node: dataplane.Node{NodeName: "node-a"}})
	hinted := func(forNodes bool, zone string) *service.Snapshot {
		snap := snapshotOf(t, spec)
		eps := snap.Services()[0].Ports[0].Endpoints
		eps[0].ForZones, eps[1].ForZones = []string{"zone-a"}, []string{"zone-b"}
		if forNodes {
			eps[0].ForNodes, eps[1].ForNodes = []string{"node-a"}, []string{"node-b"}
		}
		if zone != "" {
			snap = snap.With(service.WithNode(&service.Node{Name: "node-a", Labels: map[string]string{"topology.kubernetes.io/zone": zone}}))
		}
		return snap
	}

	mustSync(t, p, hinted(true, ""))
	if got := answers(t, p, 4); got["here"] != 4 {
		t.Errorf("PreferSameNode: answers %v, want all 4 from the endpoint hinted for this node", got)
	}
	if ps := portStatus(t, p, "default/web:http"); len(ps.Endpoints) != 1 || ps.Endpoints[0] != here.addr {
		t.Errorf("Status: endpoints %v, want [%s]", ps.Endpoints, here.addr)
	}
	mustSync(t, p, hinted(false, "zone-b"))
	if got := answers(t, p, 4); got["there"] != 4 {
		t.Errorf("PreferSameZone in zone-b: answers %v, want all 4 from zone-b's endpoint", got)
	}
	mustSync(t, p, hinted(false, ""))
	if got := answers(t, p, 4); got["here"] != 2 || got["there"] != 2 {
		t.Errorf("zone hints, the node's zone unknown: answers %v, want 2 from each", got)
	}
}

// TestPortalTrafficPolicies: what the portals do with a port's traffic
// policies, after kube-proxy's iptables proxier over CategorizeEndpoints
// (service.Port.Categorize): REJECT when the port has no usable endpoint
// anywhere; with internalTrafficPolicy Local and no endpoint on this node
// (some elsewhere), DROP its ClusterIP, from pods and from the node itself,
// while its external IP keeps its portal to the node port's listener; a
// portal to the listener whenever the ClusterIP's traffic has an endpoint, a
// serving terminating one on this node included when no endpoint is ready
// (KEP-1669). A Service with internalTrafficPolicy Local reached only through
// its ClusterIP uses no policy-Cluster endpoints at all: it must still get its
// portal.
func TestPortalTrafficPolicies(t *testing.T) {
	node := netip.MustParseAddr("198.19.0.1")
	pod := netip.MustParseAddr("198.19.2.2")
	const clusterIP, externalIP = "198.18.0.10:80", "198.18.100.1:80"
	be := startTCPBackend(t, direct, "here", "127.0.0.1:0", sayName)
	other := "198.19.3.3:8080@node-b"
	here := be.addr.String() + "@node-a"
	for _, tt := range []struct {
		name                   string
		internalLocal, np      bool
		endpoints              []string
		wantCluster, wantExtIP string // "REDIRECT" (to a listener) or a verdict
		wantLocal              []string
	}{
		{"iTP Local, ClusterIP only, endpoint here", true, false, []string{here, other}, "REDIRECT", "", []string{be.addr.String()}},
		{"iTP Local, ClusterIP only, endpoints elsewhere", true, false, []string{other}, "DROP", "", nil},
		{"iTP Local, ClusterIP only, only a terminating one here", true, false, []string{"~" + here, other}, "REDIRECT", "", []string{be.addr.String()}},
		{"iTP Local, ClusterIP only, no endpoint anywhere", true, false, []string{"!" + here}, "REJECT", "", nil},
		{"iTP Local with an external IP, endpoints elsewhere", true, true, []string{other}, "DROP", "REDIRECT", nil},
		{"iTP Cluster, endpoints elsewhere", false, true, []string{other}, "REDIRECT", "REDIRECT", nil},
		{"iTP Cluster, no endpoint anywhere", false, true, nil, "REJECT", "REJECT", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ipt := iptables.NewFake()
			ipt.SetLocalAddrs(node, netip.MustParseAddr("127.0.0.1"))
			p := startProxier(t, Config{IPTables: ipt, Node: dataplane.Node{NodeName: "node-a"}})
			spec := webSpec(service.Affinity{}, tt.endpoints...)
			spec.internalLocal = tt.internalLocal
			if tt.np {
				spec.nodePort, spec.external = 30080, []string{"198.18.100.1"}
			}
			mustSync(t, p, snapshotOf(t, spec))
			ps := portStatus(t, p, "default/web:http")
			check := func(what string, pkt iptables.Packet, want string, listener uint16) {
				t.Helper()
				tr, err := ipt.Trace(pkt)
				if err != nil {
					t.Fatal(err)
				}
				wantRedirect := uint16(0)
				if want == "REDIRECT" {
					want, wantRedirect = "ACCEPT", listener
				}
				if tr.Verdict != want || tr.Redirect != wantRedirect {
					t.Errorf("%s: got %s redirect :%d, want %s redirect :%d\n%s", what, tr.Verdict, tr.Redirect, want, wantRedirect, tr)
				}
			}
			check("ClusterIP from a pod", iptables.Packet{Src: pod, Dst: ap(clusterIP), InIface: "eth0"}, tt.wantCluster, ps.Listener)
			check("ClusterIP from the node", iptables.Packet{Src: node, Dst: ap(clusterIP), Local: true}, tt.wantCluster, ps.Listener)
			if tt.wantExtIP != "" {
				check("external IP from a pod", iptables.Packet{Src: pod, Dst: ap(externalIP), InIface: "eth0"}, tt.wantExtIP, ps.NodePort)
			}
			if !slices.Equal(addrStrings(ps.LocalEndpoints), tt.wantLocal) {
				t.Errorf("local endpoints %v, want %v", ps.LocalEndpoints, tt.wantLocal)
			}
			if tt.wantCluster == "REDIRECT" && len(tt.wantLocal) > 0 {
				if got, err := readAll(t, listenerAddr(t, p, "default/web:http")); err != nil || got != "here" {
					t.Errorf("through the ClusterIP's listener: %q, %v; want here", got, err)
				}
			}
		})
	}
}

func addrStrings(aps []netip.AddrPort) []string {
	var out []string
	for _, a := range aps {
		out = append(out, a.String())
	}
	return out
}
