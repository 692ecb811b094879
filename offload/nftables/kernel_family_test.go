package nftables

import (
	"testing"

	"github.com/svcproxy/svcproxy/internal/offloadtest"
	"github.com/svcproxy/svcproxy/kernel/conntrack"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/service"
)

// newDualLab is newLab's topology with an IPv6 address next to every IPv4 one
// (offloadtest.Lab.AddIPv6).
func newDualLab(t *testing.T) *lab {
	t.Helper()
	l := newLab(t)
	netnstestRequireConntrack(t)
	l.AddIPv6(t)
	return l
}

// familyDataplane is one family's Dataplane on the node's real nftables: the
// `ip6 svcproxy` table for IPv6, as svcproxy runs one Dataplane per family.
func (l *lab) familyDataplane(t *testing.T, fam service.Family) *Dataplane {
	t.Helper()
	var nft knft.Interface
	if err := l.Node.Do(func() (err error) {
		nft, err = knft.NewFamily(TableFamily(fam), Table)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	cfg := l.cfg
	cfg.Family = fam
	if fam == service.IPv6 {
		cfg.ClusterCIDR = offloadtest.ClusterCIDR6
	}
	cfg.NFT, cfg.Conntrack = nft, conntrack.Netlink{}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// An IPv6 UDP flow keeps its endpoint, and moves when the endpoint leaves:
// the `ip6 svcproxy` table's flows are cleaned from the IPv6 conntrack table
// as the IPv4 ones are.
func TestKernelUDPConntrackIPv6(t *testing.T) {
	l := newDualLab(t)
	p := l.familyDataplane(t, service.IPv6)
	l.CheckUDPConntrack(t, l.syncer(t, p), service.IPv6)
}

// The one-way sender of TestKernelUDPOneWayToZero, over IPv6.
func TestKernelUDPOneWayToZeroIPv6(t *testing.T) {
	l := newDualLab(t)
	l.CheckUDPOneWayToZero(t, func() offloadtest.Sync { return l.syncer(t, l.familyDataplane(t, service.IPv6)) }, service.IPv6)
}
