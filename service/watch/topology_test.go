package watch

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/service"
)

// hintsYAML is a Service with trafficDistribution PreferSameNode and its
// slice as the EndpointSlice controller writes it: each endpoint hinted for
// its own node and zone.
const hintsYAML = `apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: 198.18.0.10
  trafficDistribution: PreferSameNode
  ports:
  - {name: http, port: 80}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
endpoints:
- addresses: [198.19.0.1]
  nodeName: node-a
  zone: zone-a
  hints: {forZones: [{name: zone-a}], forNodes: [{name: node-a}]}
- addresses: [198.19.0.2]
  nodeName: node-b
  zone: zone-b
  hints: {forZones: [{name: zone-b}], forNodes: [{name: node-b}]}
ports:
- {name: http, port: 8080}
`

// TestFileCarriesTopology: a manifests file's trafficDistribution and
// endpoint hints reach the Snapshot through the informer path.
func TestFileCarriesTopology(t *testing.T) {
	ch, _, _ := newFileWatcher(t, filepath.Join(t.TempDir(), "services.yaml"), hintsYAML)
	snap := await(t, ch, "web's endpoints", func(s *service.Snapshot) bool {
		return len(s.Ports()) == 1 && len(s.Ports()[0].Endpoints) == 2
	})
	p := snap.Ports()[0]
	if got := p.Service.TrafficDistribution; got != "PreferSameNode" {
		t.Errorf("TrafficDistribution = %q, want PreferSameNode", got)
	}
	for i, want := range []struct{ zone, node string }{{"zone-a", "node-a"}, {"zone-b", "node-b"}} {
		e := p.Endpoints[i]
		if !slices.Equal(e.ForZones, []string{want.zone}) || !slices.Equal(e.ForNodes, []string{want.node}) {
			t.Errorf("endpoint %s: hints forZones %v forNodes %v, want [%s] [%s]", e, e.ForZones, e.ForNodes, want.zone, want.node)
		}
	}
	if got := p.Categorize("node-b", nil); len(got.Cluster) != 1 || got.Cluster[0].Addr.Addr().String() != "198.19.0.2" {
		t.Errorf("Categorize(node-b).Cluster = %v, want 198.19.0.2 alone", got.Cluster)
	}
}
