package userspace

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/service"
)

// TestKernelTopology: trafficDistribution on real portals and sockets. The
// endpoints are hinted as the EndpointSlice controller hints them, each for
// its own node and zone: a on node-a in zone-a, b on this node in zone-b. With
// PreferSameNode every connection goes to b; with PreferSameZone on a node
// labelled zone-b, to b too; on a node without a zone label the zone hints are
// ignored and both answer.
func TestKernelTopology(t *testing.T) {
	l := newLabWith(t, Config{Node: dataplane.Node{NodeName: "node"}})
	hinted := func(dist string, forNodes bool, node *service.Node) *service.Snapshot {
		spec := web(epA, epB)
		spec.endpoints[0] += "@node-a"
		spec.endpoints[1] += "@node"
		snap := snapshotOf(t, spec)
		svc := snap.Services()[0]
		svc.TrafficDistribution = dist
		eps := svc.Ports[0].Endpoints
		eps[0].ForZones, eps[1].ForZones = []string{"zone-a"}, []string{"zone-b"}
		if forNodes {
			eps[0].ForNodes, eps[1].ForNodes = []string{"node-a"}, []string{"node"}
		}
		snap = snap.With(service.WithNode(node))
		return snap
	}
	zoneB := &service.Node{Name: "node", Labels: map[string]string{v1.LabelTopologyZone: "zone-b"}}
	for _, tt := range []struct {
		name string
		snap *service.Snapshot
		want map[string]int // answers of 20 connections, by backend
	}{
		{"PreferSameNode", hinted(v1.ServiceTrafficDistributionPreferSameNode, true, nil), map[string]int{"b": 20}},
		{"PreferSameZone", hinted(v1.ServiceTrafficDistributionPreferSameZone, false, zoneB), map[string]int{"b": 20}},
		// Round-robin: 10 each.
		{"PreferSameZone, node without zone", hinted(v1.ServiceTrafficDistributionPreferSameZone, false, &service.Node{Name: "node"}),
			map[string]int{"a": 10, "b": 10}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mustSync(t, l.p, tt.snap)
			got := map[string]int{}
			for range 20 {
				got[hello(t, l.client, webVIP+":80")]++
			}
			if len(got) != len(tt.want) {
				t.Errorf("answers %v, want %v", got, tt.want)
			}
			for b, n := range tt.want {
				if got[b] != n {
					t.Errorf("answers %v, want %v", got, tt.want)
				}
			}
		})
	}
}
