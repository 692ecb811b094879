package userspace

import (
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/dataplane"
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
