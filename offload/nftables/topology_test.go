package nftables

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// TestTopologyHints: the service chain's map holds the endpoints
// service.Port.Categorize chose by their hints, and a partial sync after this
// node's zone changed renders the port again.
func TestTopologyHints(t *testing.T) {
	f := knft.NewFake(Table)
	cfg := testConfig
	cfg.NFT = f
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hinted := func(forNodes bool, node *service.Node) *service.Snapshot {
		snap := st.Snapshot(st.Service("web", "198.18.0.10", 80, st.HintedEndpoints(forNodes)))
		snap = snap.With(service.WithNode(node))
		return snap
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
		if err := p.Sync(context.Background(), tt.snap); err != nil {
			t.Fatal(err)
		}
		trs, err := f.TraceAll(knft.Packet{Src: netip.MustParseAddr("198.19.1.50"), Dst: netip.MustParseAddrPort("198.18.0.10:80")})
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
