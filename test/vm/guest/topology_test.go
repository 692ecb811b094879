package guest

import (
	"context"
	"net/netip"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/offload/ipvs"
	"github.com/svcproxy/svcproxy/service"
)

// TestOffloadTopology: trafficDistribution through the endpoints' hints
// (service.Port.Categorize) on the real IPVS. The backends are hinted as the
// EndpointSlice controller hints them, each for its own node and zone:
// 198.19.1.2 on node-x in zone-a, 198.19.1.3 on this node (node-a) in
// zone-b, 198.19.1.4 on node-z in zone-b. With PreferSameNode every
// connection goes to 198.19.1.3; with PreferSameZone on a node labelled
// zone-b, round-robin over 198.19.1.3 and 198.19.1.4; on a node without a
// zone label over all three.
func TestOffloadTopology(t *testing.T) {
	l := newLab(t)
	p, err := ipvs.New(ipvs.Config{IPVS: l.ipvs, Links: l.links, Node: dataplane.Node{NodePortIPs: []netip.Addr{nodeIP}, NodeName: "node-a"},
		Now: time.Now, GracePeriod: time.Minute})
	must(t, err)
	t.Cleanup(func() { p.Cleanup(context.Background()) })
	hinted := func(forNodes bool, node *service.Node) *service.Snapshot {
		snap := webService(backendIPs)
		where := []struct{ node, zone string }{{"node-x", "zone-a"}, {"node-a", "zone-b"}, {"node-z", "zone-b"}}
		for _, port := range snap.Services()[0].Ports {
			for i := range port.Endpoints {
				e := &port.Endpoints[i]
				e.NodeName, e.ForZones = where[i].node, []string{where[i].zone}
				if forNodes {
					e.ForNodes = []string{where[i].node}
				}
			}
		}
		snap = snap.With(service.WithNode(node))
		return snap
	}
	zoneB := &service.Node{Name: "node-a", Labels: map[string]string{v1.LabelTopologyZone: "zone-b"}}
	for _, tt := range []struct {
		name string
		snap *service.Snapshot
		want []int // connections of 12 per backend, in backendIPs order
	}{
		{"PreferSameNode", hinted(true, nil), []int{0, 12, 0}},
		{"PreferSameZone", hinted(false, zoneB), []int{0, 6, 6}},
		{"PreferSameZone, node without zone", hinted(false, &service.Node{Name: "node-a"}), []int{4, 4, 4}},
	} {
		must(t, p.Sync(context.Background(), tt.snap))
		got := l.spread(t, clientIPs[1], webVIP, 12)
		logSpread(t, "topology "+tt.name, got)
		wantSpread(t, got, tt.want...)
	}
}
