package iptables

import (
	"context"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/offloadtest"
	"github.com/svcproxy/svcproxy/internal/ruletest"
	"github.com/svcproxy/svcproxy/kernel/conntrack"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
)

// kernelRules is iptables mode on the real kernel, as the checks it shares
// with nftables mode drive it (internal/ruletest): its Dataplane's
// iptables-restore in the node namespace of an offloadtest.Lab.
var kernelRules ruletest.KernelPath = kernelPath{}

type kernelPath struct{}

func (kernelPath) Require(t *testing.T, family service.Family) {
	t.Helper()
	netnstest.RequireRoot(t, "iptables", "iptables-restore", "iptables-save", "sysctl")
	if family == service.IPv6 {
		if _, err := kiptables.New(kiptables.Config{Family: kiptables.IPv6}); err != nil {
			t.Skipf("needs ip6tables: %v", err)
		}
	}
}

// ipt is the node's iptables (ip6tables) of family.
func (kernelPath) ipt(t *testing.T, family service.Family) kiptables.Interface {
	t.Helper()
	cfg := kiptables.Config{}
	if family != "" {
		cfg.Family = kiptables.Family(family)
	}
	ipt, err := kiptables.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ipt
}

func (k kernelPath) New(t *testing.T, l *offloadtest.Lab, o ruletest.Options) ruletest.KernelRig {
	t.Helper()
	cfg := Config{Node: o.Node(true), CountConnections: o.CountConnections, IPTables: k.ipt(t, o.Family)}
	cfg.Conntrack, cfg.SyncPeriod, cfg.FullSyncPeriod, cfg.Now = conntrack.Netlink{}, o.SyncPeriod, o.FullSyncPeriod, o.Now
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kernelRig{d}
}

func (k kernelPath) Cleanup(t *testing.T, l *offloadtest.Lab, family service.Family) {
	t.Helper()
	ipt := k.ipt(t, family)
	if err := l.Node.Do(func() error { return Cleanup(context.Background(), ipt) }); err != nil {
		t.Fatal(err)
	}
}

func (kernelPath) Ours(t *testing.T, l *offloadtest.Lab, family service.Family) string {
	save := "iptables-save"
	if family == service.IPv6 {
		save = "ip6tables-save"
	}
	if out := l.Node.Run(t, save); strings.Contains(out, "SVCP") {
		return out
	}
	return ""
}

func (kernelPath) List(t *testing.T, l *offloadtest.Lab) string {
	return l.Node.Run(t, "iptables-save", "-c")
}

// kernelRig is a Dataplane on the real kernel.
type kernelRig struct{ *Dataplane }

func (r kernelRig) Health() kernelsync.Health { return r.Dataplane.Health().Health }

func (r kernelRig) Connections(ctx context.Context, ports map[service.PortName]bool) (map[service.PortName]uint64, error) {
	return r.Dataplane.Connections(ctx, nil, ports)
}
