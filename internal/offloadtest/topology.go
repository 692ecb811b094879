package offloadtest

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/service"
)

// HintedWeb is Web with trafficDistribution dist and the three backends
// spread over three nodes of two zones, hinted as the EndpointSlice
// controller hints them (each endpoint for its own node and zone): b0 on
// node-x in zone-a, b1 on this node (the Lab's NodeName) in zone-b, b2 on
// node-z in zone-b. node is this node's Node object in the Snapshot (nil:
// none).
func (l *Lab) HintedWeb(dist string, node *service.Node) *service.Snapshot {
	snap := l.Web()
	svc := snap.Services()[0]
	svc.TrafficDistribution = dist
	where := []struct{ node, zone string }{{"node-x", "zone-a"}, {l.NodeName, "zone-b"}, {"node-z", "zone-b"}}
	for _, p := range svc.Ports {
		for i := range p.Endpoints {
			e := &p.Endpoints[i]
			e.NodeName, e.Zone = where[i].node, where[i].zone
			e.ForNodes, e.ForZones = []string{where[i].node}, []string{where[i].zone}
		}
	}
	snap = snap.With(service.WithNode(node))
	return snap
}

// CheckTopology: traffic distribution, through service.Port.Categorize, on
// the kernel. With PreferSameNode every connection goes to the endpoint hinted
// for this node; with PreferSameZone (and the node labelled zone-b) to the two
// of zone-b, none to zone-a's; and with PreferSameZone on a node without a
// zone label the hints are ignored: every backend gets some.
func (l *Lab) CheckTopology(t *testing.T, sync Sync) {
	t.Helper()
	l.ServeTCP(t, 8080)
	zoneB := &service.Node{Name: l.NodeName, Labels: map[string]string{v1.LabelTopologyZone: "zone-b"}}
	unlabelled := &service.Node{Name: l.NodeName}
	for _, tt := range []struct {
		name string
		snap *service.Snapshot
		// want: which backends may answer; each of them must, at least once.
		want map[string]bool
	}{
		{"PreferSameNode", l.HintedWeb(v1.ServiceTrafficDistributionPreferSameNode, nil), map[string]bool{"b1": true}},
		{"PreferSameZone", l.HintedWeb(v1.ServiceTrafficDistributionPreferSameZone, zoneB), map[string]bool{"b1": true, "b2": true}},
		{"PreferSameZone, node without zone", l.HintedWeb(v1.ServiceTrafficDistributionPreferSameZone, unlabelled),
			map[string]bool{"b0": true, "b1": true, "b2": true}},
	} {
		// Node hints win over zone hints when both name this node
		// (kube-proxy's topologyModeFromHints): drop the node hints for the
		// zone cases, as the EndpointSlice controller writes none for them.
		if tt.name != "PreferSameNode" {
			for _, p := range tt.snap.Services()[0].Ports {
				for i := range p.Endpoints {
					p.Endpoints[i].ForNodes = nil
				}
			}
		}
		sync(tt.snap)
		answers, err := Dial(l.Client, "198.18.0.10:80", 30)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		count := map[string]int{}
		for _, a := range answers {
			count[a.Backend]++
		}
		for b, n := range count {
			if !tt.want[b] {
				t.Errorf("%s: backend %s got %d of 30 connections, want none: %v", tt.name, b, n, count)
			}
		}
		// Among k backends, one gets none of 30 with probability below 1e-5.
		for b := range tt.want {
			if count[b] == 0 {
				t.Errorf("%s: backend %s got no connection of 30: %v", tt.name, b, count)
			}
		}
		t.Logf("%s: connections per backend: %v", tt.name, count)
	}
}
