package nftables

import (
	"context"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/offloadtest"
	"github.com/svcproxy/svcproxy/internal/ruletest"
	"github.com/svcproxy/svcproxy/kernel/conntrack"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
)

// kernelRules is nftables mode on the real kernel, as the checks it shares
// with iptables mode drive it (internal/ruletest): its Dataplane's nft in the
// node namespace of an offloadtest.Lab.
var kernelRules ruletest.KernelPath = kernelPath{}

type kernelPath struct{}

func (kernelPath) Require(t *testing.T, _ service.Family) {
	t.Helper()
	netnstest.RequireRoot(t, "nft", "sysctl")
}

// nft is the node's table of family.
func (kernelPath) nft(t *testing.T, l *offloadtest.Lab, family service.Family) knft.Interface {
	t.Helper()
	var nft knft.Interface
	if err := l.Node.Do(func() (err error) {
		nft, err = knft.NewFamily(TableFamily(family), Table)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return nft
}

func (k kernelPath) New(t *testing.T, l *offloadtest.Lab, o ruletest.Options) ruletest.KernelRig {
	t.Helper()
	cfg := Config{Node: o.Node(true), CountConnections: o.CountConnections, NFT: k.nft(t, l, o.Family)}
	cfg.Conntrack, cfg.SyncPeriod, cfg.FullSyncPeriod, cfg.Now = conntrack.Netlink{}, o.SyncPeriod, o.FullSyncPeriod, o.Now
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kernelRig{d}
}

func (k kernelPath) Cleanup(t *testing.T, l *offloadtest.Lab, family service.Family) {
	t.Helper()
	nft := k.nft(t, l, family)
	if err := l.Node.Do(func() error { return Cleanup(context.Background(), nft) }); err != nil {
		t.Fatal(err)
	}
}

func (kernelPath) Ours(t *testing.T, l *offloadtest.Lab, family service.Family) string {
	if out := l.Node.Run(t, "nft", "list", "tables"); strings.Contains(out, string(TableFamily(family))+" "+Table) {
		return out
	}
	return ""
}

func (kernelPath) List(t *testing.T, l *offloadtest.Lab) string {
	return l.Node.Run(t, "nft", "list", "table", "ip", Table)
}

// kernelRig is a Dataplane on the real kernel.
type kernelRig struct{ *Dataplane }

func (r kernelRig) Health() kernelsync.Health { return r.Dataplane.Health().Health }

func (r kernelRig) Connections(ctx context.Context, ports map[service.PortName]bool) (map[service.PortName]uint64, error) {
	return r.Dataplane.Connections(ctx, nil, ports)
}
