package service

import (
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// tep is an endpoint of a categorization case, written as kube-proxy's
// BaseEndpointInfo literals are: local stands for isLocal.
type tep struct {
	addr                        string
	zones, nodes                []string
	ready, serving, terminating bool
	local                       bool
}

// categorizeCase is one case of kube-proxy's TestCategorizeEndpoints.
type categorizeCase struct {
	name     string
	nodeName string            // "" in most of kube-proxy's cases: then thisNode
	labels   map[string]string // the Node's labels; nil: no Node object
	// The service port: kube-proxy's BaseServicePortInfo fields.
	externalPolicyLocal, internalPolicyLocal bool
	nodePort                                 uint16
	endpoints                                []tep
	// Expected, as kube-proxy's test reads them: all may be left out when it
	// equals the only non-empty one of cluster and local; onlyRemote when
	// HasAny holds although all is empty.
	cluster, local, all []string
	onlyRemote          bool
}

const thisNode = "this-node"

// kubeProxyCategorizeCases are the cases of kube-proxy v1.37.2
// pkg/proxy/topology_test.go, TestCategorizeEndpoints, in its order and with
// its names. Two things differ, neither in what the cases test:
//   - addresses: kube-proxy's 10.1.2.N and 10.0.0.N are 198.19.2.N and
//     198.19.0.N here, the range svcproxy's tests give pods;
//   - "PreferSameNode falls back to same-zone when feature gate disabled" runs
//     there with the PreferSameTrafficDistribution gate off (emulating 1.34).
//     The gate is GA and locked on since 1.35, so kube-proxy 1.37 cannot turn
//     it off: the case is kept with the answer 1.37 gives, node hints winning.
var kubeProxyCategorizeCases = []categorizeCase{{
	name:   "should use topology since all endpoints have hints, node has a zone label and and there are endpoints for the node's zone",
	labels: map[string]string{v1.LabelTopologyZone: "zone-a"},
	endpoints: []tep{
		{addr: "198.19.2.3:80", zones: []string{"zone-a"}, ready: true},
		{addr: "198.19.2.4:80", zones: []string{"zone-b"}, ready: true},
		{addr: "198.19.2.5:80", zones: []string{"zone-c"}, ready: true},
		{addr: "198.19.2.6:80", zones: []string{"zone-a"}, ready: true},
	},
	cluster: []string{"198.19.2.3:80", "198.19.2.6:80"},
}, {
	name:                "externalTrafficPolicy: Local, topology ignored for Local endpoints",
	labels:              map[string]string{v1.LabelTopologyZone: "zone-a"},
	externalPolicyLocal: true, nodePort: 8080,
	endpoints: []tep{
		{addr: "198.19.2.3:80", zones: []string{"zone-a"}, ready: true, local: true},
		{addr: "198.19.2.4:80", zones: []string{"zone-b"}, ready: true, local: true},
		{addr: "198.19.2.5:80", zones: []string{"zone-c"}, ready: true},
		{addr: "198.19.2.6:80", zones: []string{"zone-a"}, ready: true},
	},
	cluster: []string{"198.19.2.3:80", "198.19.2.6:80"},
	local:   []string{"198.19.2.3:80", "198.19.2.4:80"},
	all:     []string{"198.19.2.3:80", "198.19.2.4:80", "198.19.2.6:80"},
}, {
	name:                "internalTrafficPolicy: Local, topology ignored for Local endpoints",
	labels:              map[string]string{v1.LabelTopologyZone: "zone-a"},
	internalPolicyLocal: true, nodePort: 8080,
	endpoints: []tep{
		{addr: "198.19.2.3:80", zones: []string{"zone-a"}, ready: true, local: true},
		{addr: "198.19.2.4:80", zones: []string{"zone-b"}, ready: true, local: true},
		{addr: "198.19.2.5:80", zones: []string{"zone-c"}, ready: true},
		{addr: "198.19.2.6:80", zones: []string{"zone-a"}, ready: true},
	},
	cluster: []string{"198.19.2.3:80", "198.19.2.6:80"},
	local:   []string{"198.19.2.3:80", "198.19.2.4:80"},
	all:     []string{"198.19.2.3:80", "198.19.2.4:80", "198.19.2.6:80"},
}, {
	name:      "empty node labels",
	labels:    map[string]string{},
	endpoints: []tep{{addr: "198.19.2.3:80", zones: []string{"zone-a"}, ready: true}},
	cluster:   []string{"198.19.2.3:80"},
}, {
	name:      "empty zone label",
	labels:    map[string]string{v1.LabelTopologyZone: ""},
	endpoints: []tep{{addr: "198.19.2.3:80", zones: []string{"zone-a"}, ready: true}},
	cluster:   []string{"198.19.2.3:80"},
}, {
	name:      "node in different zone, no endpoint filtering",
	labels:    map[string]string{v1.LabelTopologyZone: "zone-b"},
	endpoints: []tep{{addr: "198.19.2.3:80", zones: []string{"zone-a"}, ready: true}},
	cluster:   []string{"198.19.2.3:80"},
}, {
	name:   "unready endpoint",
	labels: map[string]string{v1.LabelTopologyZone: "zone-a"},
	endpoints: []tep{
		{addr: "198.19.2.3:80", zones: []string{"zone-a"}, ready: true},
		{addr: "198.19.2.4:80", zones: []string{"zone-b"}, ready: true},
		{addr: "198.19.2.5:80", zones: []string{"zone-c"}, ready: true},
		{addr: "198.19.2.6:80", zones: []string{"zone-a"}}, // unready
	},
	cluster: []string{"198.19.2.3:80"},
}, {
	name:   "only unready endpoints in same zone (should not filter)",
	labels: map[string]string{v1.LabelTopologyZone: "zone-a"},
	endpoints: []tep{
		{addr: "198.19.2.3:80", zones: []string{"zone-a"}},
		{addr: "198.19.2.4:80", zones: []string{"zone-b"}, ready: true},
		{addr: "198.19.2.5:80", zones: []string{"zone-c"}, ready: true},
		{addr: "198.19.2.6:80", zones: []string{"zone-a"}},
	},
	cluster: []string{"198.19.2.4:80", "198.19.2.5:80"},
}, {
	name:   "missing hints, no filtering applied",
	labels: map[string]string{v1.LabelTopologyZone: "zone-a"},
	endpoints: []tep{
		{addr: "198.19.2.3:80", zones: []string{"zone-a"}, ready: true},
		{addr: "198.19.2.4:80", zones: []string{"zone-b"}, ready: true},
		{addr: "198.19.2.5:80", ready: true}, // missing a hint
		{addr: "198.19.2.6:80", zones: []string{"zone-a"}, ready: true},
	},
	cluster: []string{"198.19.2.3:80", "198.19.2.4:80", "198.19.2.5:80", "198.19.2.6:80"},
}, {
	name:   "multiple hints per endpoint, filtering includes any endpoint with zone included",
	labels: map[string]string{v1.LabelTopologyZone: "zone-c"},
	endpoints: []tep{
		{addr: "198.19.2.3:80", zones: []string{"zone-a", "zone-b", "zone-c"}, ready: true},
		{addr: "198.19.2.4:80", zones: []string{"zone-b", "zone-c"}, ready: true},
		{addr: "198.19.2.5:80", zones: []string{"zone-b", "zone-d"}, ready: true},
		{addr: "198.19.2.6:80", zones: []string{"zone-c"}, ready: true},
	},
	cluster: []string{"198.19.2.3:80", "198.19.2.4:80", "198.19.2.6:80"},
}, {
	name:     "PreferSameNode falls back to same-zone when feature gate disabled",
	nodeName: "node-1",
	labels:   map[string]string{v1.LabelTopologyZone: "zone-a"},
	endpoints: []tep{
		{addr: "198.19.2.3:80", zones: []string{"zone-a"}, nodes: []string{"node-1"}, ready: true},
		{addr: "198.19.2.4:80", zones: []string{"zone-b"}, nodes: []string{"node-2"}, ready: true},
		{addr: "198.19.2.5:80", zones: []string{"zone-c"}, nodes: []string{"node-3"}, ready: true},
		{addr: "198.19.2.6:80", zones: []string{"zone-a"}, nodes: []string{"node-4"}, ready: true},
	},
	// kube-proxy with the gate off: 198.19.2.3 and .6; locked on since 1.35.
	cluster: []string{"198.19.2.3:80"},
}, {
	name:     "PreferSameNode available",
	nodeName: "node-1",
	labels:   map[string]string{v1.LabelTopologyZone: "zone-a"},
	endpoints: []tep{
		{addr: "198.19.2.3:80", zones: []string{"zone-a"}, nodes: []string{"node-1"}, ready: true},
		{addr: "198.19.2.4:80", zones: []string{"zone-b"}, nodes: []string{"node-2"}, ready: true},
		{addr: "198.19.2.5:80", zones: []string{"zone-c"}, nodes: []string{"node-3"}, ready: true},
		{addr: "198.19.2.6:80", zones: []string{"zone-a"}, nodes: []string{"node-4"}, ready: true},
	},
	cluster: []string{"198.19.2.3:80"},
}, {
	name:     "PreferSameNode ignored if some endpoints unhinted",
	nodeName: "node-1",
	labels:   map[string]string{v1.LabelTopologyZone: "zone-a"},
	endpoints: []tep{
		{addr: "198.19.2.3:80", zones: []string{"zone-a"}, nodes: []string{"node-1"}, ready: true},
		{addr: "198.19.2.4:80", ready: true},
		{addr: "198.19.2.5:80", zones: []string{"zone-c"}, nodes: []string{"node-3"}, ready: true},
		{addr: "198.19.2.6:80", zones: []string{"zone-a"}, nodes: []string{"node-4"}, ready: true},
	},
	cluster: []string{"198.19.2.3:80", "198.19.2.4:80", "198.19.2.5:80", "198.19.2.6:80"},
}, {
	name:     "PreferSameNode falls back to PreferSameZone if no endpoint for node",
	nodeName: "node-0",
	labels:   map[string]string{v1.LabelTopologyZone: "zone-a"},
	endpoints: []tep{
		{addr: "198.19.2.3:80", zones: []string{"zone-a"}, nodes: []string{"node-1"}, ready: true},
		{addr: "198.19.2.4:80", zones: []string{"zone-b"}, nodes: []string{"node-2"}, ready: true},
		{addr: "198.19.2.5:80", zones: []string{"zone-c"}, nodes: []string{"node-3"}, ready: true},
		{addr: "198.19.2.6:80", zones: []string{"zone-a"}, nodes: []string{"node-4"}, ready: true},
	},
	cluster: []string{"198.19.2.3:80", "198.19.2.6:80"},
}, {
	name:                "conflicting topology and localness require merging allEndpoints",
	labels:              map[string]string{v1.LabelTopologyZone: "zone-a"},
	externalPolicyLocal: true, nodePort: 8080,
	endpoints: []tep{
		{addr: "198.19.0.0:80", zones: []string{"zone-a"}, ready: true, local: true},
		{addr: "198.19.0.1:80", zones: []string{"zone-b"}, ready: true, local: true},
		{addr: "198.19.0.2:80", zones: []string{"zone-a"}, ready: true},
		{addr: "198.19.0.3:80", zones: []string{"zone-b"}, ready: true},
	},
	cluster: []string{"198.19.0.0:80", "198.19.0.2:80"},
	local:   []string{"198.19.0.0:80", "198.19.0.1:80"},
	all:     []string{"198.19.0.0:80", "198.19.0.1:80", "198.19.0.2:80"},
}, {
	name:                "internalTrafficPolicy: Local, with empty endpoints",
	internalPolicyLocal: true,
	local:               []string{},
}, {
	name:                "internalTrafficPolicy: Local, but all endpoints are remote",
	internalPolicyLocal: true,
	endpoints: []tep{
		{addr: "198.19.0.0:80", ready: true},
		{addr: "198.19.0.1:80", ready: true},
	},
	local:      []string{},
	onlyRemote: true,
}, {
	name:                "internalTrafficPolicy: Local, all endpoints are local",
	internalPolicyLocal: true,
	endpoints: []tep{
		{addr: "198.19.0.0:80", ready: true, local: true},
		{addr: "198.19.0.1:80", ready: true, local: true},
	},
	local: []string{"198.19.0.0:80", "198.19.0.1:80"},
}, {
	name:                "internalTrafficPolicy: Local, some endpoints are local",
	internalPolicyLocal: true,
	endpoints: []tep{
		{addr: "198.19.0.0:80", ready: true, local: true},
		{addr: "198.19.0.1:80", ready: true},
	},
	local: []string{"198.19.0.0:80"},
}, {
	name: "Cluster traffic policy, endpoints not Ready",
	endpoints: []tep{
		{addr: "198.19.0.0:80"},
		{addr: "198.19.0.1:80"},
	},
	cluster: []string{},
}, {
	name: "Cluster traffic policy, some endpoints are Ready",
	endpoints: []tep{
		{addr: "198.19.0.0:80"},
		{addr: "198.19.0.1:80", ready: true},
	},
	cluster: []string{"198.19.0.1:80"},
}, {
	name: "Cluster traffic policy, all endpoints are terminating",
	endpoints: []tep{
		{addr: "198.19.0.0:80", serving: true, terminating: true, local: true},
		{addr: "198.19.0.1:80", serving: true, terminating: true},
	},
	cluster: []string{"198.19.0.0:80", "198.19.0.1:80"},
}, {
	name:     "iTP: Local, eTP: Cluster, some endpoints local",
	nodePort: 8080, internalPolicyLocal: true,
	endpoints: []tep{
		{addr: "198.19.0.0:80", ready: true, local: true},
		{addr: "198.19.0.1:80", ready: true},
	},
	cluster: []string{"198.19.0.0:80", "198.19.0.1:80"},
	local:   []string{"198.19.0.0:80"},
	all:     []string{"198.19.0.0:80", "198.19.0.1:80"},
}, {
	name:     "iTP: Cluster, eTP: Local, some endpoints local",
	nodePort: 8080, externalPolicyLocal: true,
	endpoints: []tep{
		{addr: "198.19.0.0:80", ready: true, local: true},
		{addr: "198.19.0.1:80", ready: true},
	},
	cluster: []string{"198.19.0.0:80", "198.19.0.1:80"},
	local:   []string{"198.19.0.0:80"},
	all:     []string{"198.19.0.0:80", "198.19.0.1:80"},
}, {
	name:     "iTP: Local, eTP: Local, some endpoints local",
	nodePort: 8080, internalPolicyLocal: true, externalPolicyLocal: true,
	endpoints: []tep{
		{addr: "198.19.0.0:80", ready: true, local: true},
		{addr: "198.19.0.1:80", ready: true},
	},
	cluster: []string{"198.19.0.0:80", "198.19.0.1:80"},
	local:   []string{"198.19.0.0:80"},
	all:     []string{"198.19.0.0:80", "198.19.0.1:80"},
}, {
	name:     "iTP: Local, eTP: Local, all endpoints remote",
	nodePort: 8080, internalPolicyLocal: true, externalPolicyLocal: true,
	endpoints: []tep{
		{addr: "198.19.0.0:80", ready: true},
		{addr: "198.19.0.1:80", ready: true},
	},
	cluster: []string{"198.19.0.0:80", "198.19.0.1:80"},
	local:   []string{},
	all:     []string{"198.19.0.0:80", "198.19.0.1:80"},
}, {
	name:     "iTP: Local, eTP: Local, all endpoints remote and terminating",
	nodePort: 8080, internalPolicyLocal: true, externalPolicyLocal: true,
	endpoints: []tep{
		{addr: "198.19.0.0:80", serving: true, terminating: true},
		{addr: "198.19.0.1:80", serving: true, terminating: true},
	},
	cluster:    []string{"198.19.0.0:80", "198.19.0.1:80"},
	local:      []string{},
	all:        []string{"198.19.0.0:80", "198.19.0.1:80"},
	onlyRemote: true,
}, {
	name:     "iTP: Cluster, eTP: Local, with terminating endpoints",
	nodePort: 8080, externalPolicyLocal: true,
	endpoints: []tep{
		{addr: "198.19.0.0:80", ready: true},
		{addr: "198.19.0.1:80", local: true},
		{addr: "198.19.0.2:80", serving: true, terminating: true, local: true},
		{addr: "198.19.0.3:80", serving: true, terminating: true},
	},
	cluster: []string{"198.19.0.0:80"},
	local:   []string{"198.19.0.2:80"},
	all:     []string{"198.19.0.0:80", "198.19.0.2:80"},
}, {
	name:                "externalTrafficPolicy ignored if not externally accessible",
	externalPolicyLocal: true,
	endpoints: []tep{
		{addr: "198.19.0.0:80", ready: true},
		{addr: "198.19.0.1:80", ready: true, local: true},
	},
	cluster: []string{"198.19.0.0:80", "198.19.0.1:80"},
	all:     []string{"198.19.0.0:80", "198.19.0.1:80"},
}, {
	name:                "no cluster endpoints for iTP:Local internal-only service",
	internalPolicyLocal: true,
	endpoints: []tep{
		{addr: "198.19.0.0:80", ready: true},
		{addr: "198.19.0.1:80", ready: true, local: true},
	},
	local: []string{"198.19.0.1:80"},
	all:   []string{"198.19.0.1:80"},
}, {
	name: "empty endpoints when no service endpoints exist",
}, {
	name:      "single endpoint not ready, not serving, not terminating",
	labels:    map[string]string{v1.LabelTopologyZone: "zone-a"},
	endpoints: []tep{{addr: "198.19.0.0:80"}},
	cluster:   []string{},
}}

// port builds the case's service port on its node.
func (tc categorizeCase) port() (p *Port, nodeName string, node *Node) {
	nodeName = tc.nodeName
	if nodeName == "" {
		nodeName = thisNode
	}
	if tc.labels != nil {
		node = &Node{Name: nodeName, Labels: tc.labels}
	}
	svc := &Service{NamespacedName: NamespacedName{Namespace: "default", Name: "web"},
		ExternalPolicyLocal: tc.externalPolicyLocal, InternalPolicyLocal: tc.internalPolicyLocal}
	p = &Port{Service: svc, Port: 80, Protocol: TCP, NodePort: tc.nodePort}
	for _, e := range tc.endpoints {
		ep := Endpoint{Addr: netip.MustParseAddrPort(e.addr), Ready: e.ready, Serving: e.serving || e.ready,
			Terminating: e.terminating, NodeName: "other-node", ForZones: e.zones, ForNodes: e.nodes}
		if e.local {
			ep.NodeName = nodeName
		}
		p.Endpoints = append(p.Endpoints, ep)
	}
	svc.Ports = []*Port{p}
	return p, nodeName, node
}

func addrs(eps []Endpoint) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = e.Addr.String()
	}
	return out
}

// TestCategorizeKubeProxyCases runs kube-proxy's TestCategorizeEndpoints
// cases and checks them as it does: the lists by content (here also in the
// Port's order), the union, and HasAny.
func TestCategorizeKubeProxyCases(t *testing.T) {
	for _, tc := range kubeProxyCategorizeCases {
		t.Run(tc.name, func(t *testing.T) {
			p, nodeName, node := tc.port()
			got := p.Categorize(nodeName, node)
			check := func(what string, want []string, got []Endpoint) {
				t.Helper()
				if len(want) == 0 && len(got) == 0 {
					return
				}
				if g := addrs(got); !slices.Equal(g, want) {
					t.Errorf("%s endpoints = %v, want %v", what, g, want)
				}
			}
			check("cluster", tc.cluster, got.Cluster)
			check("local", tc.local, got.Local)
			all := tc.all
			switch {
			case len(tc.cluster) != 0 && len(tc.local) == 0:
				all = tc.cluster
			case len(tc.local) != 0 && len(tc.cluster) == 0:
				all = tc.local
			}
			check("reachable", all, got.Reachable)
			if want := len(all) > 0 || tc.onlyRemote; got.HasAny != want {
				t.Errorf("HasAny = %v, want %v", got.HasAny, want)
			}
		})
	}
}

// TestCategorizeUses checks the nil lists: kube-proxy's nil for "this policy
// is never used" against an empty list for "used, but no endpoint".
func TestCategorizeUses(t *testing.T) {
	eps := []tep{{addr: "198.19.0.1:80", ready: true}}
	for _, tc := range []struct {
		name                 string
		c                    categorizeCase
		usesCluster, usesLoc bool
	}{
		{"cluster only", categorizeCase{endpoints: eps}, true, false},
		{"iTP Local, ClusterIP only", categorizeCase{internalPolicyLocal: true, endpoints: eps}, false, true},
		{"iTP Local, NodePort", categorizeCase{internalPolicyLocal: true, nodePort: 30080, endpoints: eps}, true, true},
		{"eTP Local, ClusterIP only", categorizeCase{externalPolicyLocal: true, endpoints: eps}, true, false},
		{"eTP Local, NodePort", categorizeCase{externalPolicyLocal: true, nodePort: 30080, endpoints: eps}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, nodeName, node := tc.c.port()
			got := p.Categorize(nodeName, node)
			if (got.Cluster != nil) != tc.usesCluster || (got.Local != nil) != tc.usesLoc {
				t.Errorf("Cluster = %v, Local = %v; want Cluster used %v, Local used %v", got.Cluster, got.Local, tc.usesCluster, tc.usesLoc)
			}
		})
	}
}

// TestCategorizeTopology covers what kube-proxy's table leaves implicit: the
// mode in force, a node whose Node object is unknown, and terminating
// endpoints under hints.
func TestCategorizeTopology(t *testing.T) {
	zoneA := map[string]string{v1.LabelTopologyZone: "zone-a"}
	for _, tc := range []struct {
		c        categorizeCase
		mode     string
		clusterW []string
	}{{
		c: categorizeCase{name: "node hints, Node object unknown: the name is enough", endpoints: []tep{
			{addr: "198.19.0.1:80", nodes: []string{thisNode}, zones: []string{"zone-a"}, ready: true},
			{addr: "198.19.0.2:80", nodes: []string{"node-2"}, zones: []string{"zone-a"}, ready: true},
		}},
		mode: TopologyPreferSameNode, clusterW: []string{"198.19.0.1:80"},
	}, {
		c: categorizeCase{name: "zone hints, Node object unknown: hints ignored", endpoints: []tep{
			{addr: "198.19.0.1:80", zones: []string{"zone-a"}, ready: true},
			{addr: "198.19.0.2:80", zones: []string{"zone-b"}, ready: true},
		}},
		mode: "", clusterW: []string{"198.19.0.1:80", "198.19.0.2:80"},
	}, {
		c: categorizeCase{name: "zone hints in force", labels: zoneA, endpoints: []tep{
			{addr: "198.19.0.1:80", zones: []string{"zone-b"}, ready: true},
			{addr: "198.19.0.2:80", zones: []string{"zone-a"}, ready: true},
		}},
		mode: TopologyPreferSameZone, clusterW: []string{"198.19.0.2:80"},
	}, {
		c: categorizeCase{name: "an unready endpoint's missing hint does not matter", labels: zoneA, endpoints: []tep{
			{addr: "198.19.0.1:80"},
			{addr: "198.19.0.2:80", zones: []string{"zone-a"}, ready: true},
			{addr: "198.19.0.3:80", zones: []string{"zone-b"}, ready: true},
		}},
		mode: TopologyPreferSameZone, clusterW: []string{"198.19.0.2:80"},
	}, {
		c: categorizeCase{name: "none ready: terminating ones, hints not applied", labels: zoneA, endpoints: []tep{
			{addr: "198.19.0.1:80", zones: []string{"zone-a"}, serving: true, terminating: true},
			{addr: "198.19.0.2:80", zones: []string{"zone-b"}, serving: true, terminating: true},
		}},
		mode: "", clusterW: []string{"198.19.0.1:80", "198.19.0.2:80"},
	}} {
		t.Run(tc.c.name, func(t *testing.T) {
			p, nodeName, node := tc.c.port()
			got := p.Categorize(nodeName, node)
			if got.Topology != tc.mode {
				t.Errorf("Topology = %q, want %q", got.Topology, tc.mode)
			}
			if g := addrs(got.Cluster); !slices.Equal(g, tc.clusterW) {
				t.Errorf("cluster endpoints = %v, want %v", g, tc.clusterW)
			}
		})
	}
}

// TestCategorizeFromObjects goes from API objects to the choice: the slice's
// hints decide, as in kube-proxy, whatever the Service's trafficDistribution
// or topology-mode annotation says (the EndpointSlice controller reads those
// to write the hints).
func TestCategorizeFromObjects(t *testing.T) {
	hinted := func(ip, node, zone string) discoveryv1.Endpoint {
		e := ep(ip, true)
		e.NodeName = ptr.To(node)
		e.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: zone}}, ForNodes: []discoveryv1.ForNode{{Name: node}}}
		return e
	}
	node := &Node{Name: "node-b", Labels: map[string]string{v1.LabelTopologyZone: "zone-b"}}
	for _, tc := range []struct {
		name    string
		dist    *string
		annot   map[string]string
		eps     []discoveryv1.Endpoint
		node    string
		want    []string
		wantTop string
	}{
		{"PreferSameNode with node hints", ptr.To(v1.ServiceTrafficDistributionPreferSameNode), nil,
			[]discoveryv1.Endpoint{hinted("198.19.1.1", "node-a", "zone-a"), hinted("198.19.1.2", "node-b", "zone-b"), hinted("198.19.1.3", "node-c", "zone-b")},
			"node-b", []string{"198.19.1.2:8080"}, TopologyPreferSameNode},
		{"PreferSameZone: no endpoint for this node, the zone's", ptr.To(v1.ServiceTrafficDistributionPreferSameZone), nil,
			[]discoveryv1.Endpoint{hinted("198.19.1.1", "node-a", "zone-a"), hinted("198.19.1.3", "node-c", "zone-b")},
			"node-b", []string{"198.19.1.3:8080"}, TopologyPreferSameZone},
		{"PreferClose, the older name", ptr.To(v1.ServiceTrafficDistributionPreferClose), nil,
			[]discoveryv1.Endpoint{hinted("198.19.1.1", "node-a", "zone-a"), hinted("198.19.1.3", "node-c", "zone-b")},
			"node-b", []string{"198.19.1.3:8080"}, TopologyPreferSameZone},
		{"topology-mode Auto annotation", nil, map[string]string{v1.AnnotationTopologyMode: "Auto"},
			[]discoveryv1.Endpoint{hinted("198.19.1.1", "node-a", "zone-a"), hinted("198.19.1.3", "node-c", "zone-b")},
			"node-b", []string{"198.19.1.3:8080"}, TopologyPreferSameZone},
		{"trafficDistribution without hints: every endpoint", ptr.To(v1.ServiceTrafficDistributionPreferSameNode), nil,
			[]discoveryv1.Endpoint{ep("198.19.1.1", true), ep("198.19.1.2", true)},
			"node-b", []string{"198.19.1.1:8080", "198.19.1.2:8080"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := svc("web", func(s *v1.Service) { s.Spec.TrafficDistribution = tc.dist; s.Annotations = tc.annot })
			snap := Build([]*v1.Service{obj}, []*discoveryv1.EndpointSlice{slice("web-1", "web", []discoveryv1.EndpointPort{port("http", 8080, v1.ProtocolTCP)}, tc.eps...)}, nil)
			if errs := snap.Errors(); len(errs) > 0 {
				t.Fatal(errs)
			}
			snap = snap.With(WithNode(node))
			p := snap.Ports()[0]
			if got := p.Service.TrafficDistribution; got != ptr.Deref(tc.dist, "") {
				t.Errorf("TrafficDistribution = %q, want %q", got, ptr.Deref(tc.dist, ""))
			}
			got := p.Categorize(tc.node, snap.Node())
			if g := addrs(got.Cluster); !slices.Equal(g, tc.want) || got.Topology != tc.wantTop {
				t.Errorf("cluster endpoints = %v (%q), want %v (%q)", g, got.Topology, tc.want, tc.wantTop)
			}
		})
	}
}
