package ipvs

import (
	"net/netip"
	"slices"
	"testing"

	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	"github.com/svcproxy/svcproxy/service"
)

// TestTopologyHints: the ClusterIP's virtual server has as real servers the
// endpoints service.Port.Categorize chose by their hints (this node is
// node-a): node hints for node-a, zone hints against the Node's zone, every
// endpoint when the zone is unknown.
func TestTopologyHints(t *testing.T) {
	f := newFixture(t)
	hinted := func(forNodes bool, zone string) *service.Snapshot {
		svc := web([]string{"198.19.1.2", "198.19.1.3", "198.19.1.4"})
		for i, where := range []struct{ node, zone string }{{"node-a", "zone-a"}, {"node-b", "zone-b"}, {"node-c", "zone-b"}} {
			e := &svc.Ports[0].Endpoints[i]
			e.NodeName, e.ForZones = where.node, []string{where.zone}
			if forNodes {
				e.ForNodes = []string{where.node}
			}
		}
		snap := service.NewSnapshot([]*service.Service{svc}, nil)
		if zone != "" {
			snap = snap.With(service.WithNode(&service.Node{Name: "node-a", Labels: map[string]string{"topology.kubernetes.io/zone": zone}}))
		}
		return snap
	}
	for _, tt := range []struct {
		name string
		snap *service.Snapshot
		want []string
	}{
		{"no zone known", hinted(false, ""), []string{"198.19.1.2:8080", "198.19.1.3:8080", "198.19.1.4:8080"}},
		{"zone-b", hinted(false, "zone-b"), []string{"198.19.1.3:8080", "198.19.1.4:8080"}},
		{"node hints", hinted(true, "zone-b"), []string{"198.19.1.2:8080"}},
	} {
		w, errs := f.p.desired(tt.snap)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		vs := w.vss[kipvs.Key{Protocol: kipvs.TCP, Addr: netip.MustParseAddrPort("198.18.0.10:80")}]
		if vs == nil {
			t.Fatalf("%s: no virtual server for 198.18.0.10:80; have %v", tt.name, w.vss)
		}
		var got []string
		for rs := range vs.reals {
			got = append(got, rs.String())
		}
		slices.Sort(got)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: real servers %v, want %v", tt.name, got, tt.want)
		}
	}
}
