package ipvs

import (
	"context"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/kernel/ipset"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	"github.com/svcproxy/svcproxy/kernel/link"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// IPVS reconciles every port at every sync, so it never asks
// service.Port.RendersSameAs; but the fields servicetest.Unrendered says no
// renderer reads must change none of its virtual servers, addresses, ip sets
// or masquerade rules either.
func TestUnrenderedFields(t *testing.T) {
	st.CheckUnrendered(t, func(t *testing.T) st.Path {
		fp := &fakePath{ipvs: kipvs.NewFake(), links: link.NewFake(), sets: ipset.NewFake(), ipt: kiptables.NewFake()}
		fp.sets.OnRestore = func(sets []ipset.Set) { // the rules match the sets
			for _, s := range sets {
				if err := fp.ipt.SetIPSet(s.Name, s.Members...); err != nil {
					t.Errorf("mirror ipset %s: %v", s.Name, err)
				}
			}
		}
		fp.Restart(t)
		return fp
	})
}

// fakePath is a Dataplane on Fakes, as servicetest's checks drive it.
type fakePath struct {
	ipvs  *kipvs.Fake
	links *link.Fake
	sets  *ipset.Fake
	ipt   *kiptables.Fake
	p     *Dataplane
}

func (fp *fakePath) Restart(t *testing.T) {
	p, err := New(Config{IPVS: fp.ipvs, Links: fp.links, IPSets: fp.sets, IPTables: fp.ipt, Node: dataplane.Node{NodeName: st.ThisNode,
		NodePortIPs: []netip.Addr{netip.MustParseAddr("198.19.0.1")}, ClusterCIDR: netip.MustParsePrefix("198.19.1.0/24")}})
	if err != nil {
		t.Fatal(err)
	}
	fp.p = p
}

func (fp *fakePath) Sync(t *testing.T, snap *service.Snapshot) {
	if err := fp.p.Sync(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
}

func (fp *fakePath) State(*testing.T) string {
	return fp.ipvs.Dump() + fp.links.Dump() + fp.sets.Dump() + fp.ipt.Dump()
}
