package iptables

import (
	"context"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/offloadtest"
	"github.com/svcproxy/svcproxy/kernel/conntrack"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// lab is offloadtest's lab (a node namespace routing between a client and three
// backends), with iptables mode's rules config for a Proxier on its node.
type lab struct {
	*offloadtest.Lab
	cfg Config
}

func newLab(t *testing.T) *lab {
	t.Helper()
	netnstest.RequireRoot(t, "iptables", "iptables-restore", "iptables-save", "sysctl")
	return &lab{Lab: offloadtest.New(t, st.ThisNode), cfg: Config{NodeName: st.ThisNode, ClusterCIDR: offloadtest.ClusterCIDR}}
}

// proxier returns a Proxier on the node's real iptables and conntrack.
func (l *lab) proxier(t *testing.T) *Proxier {
	t.Helper()
	ipt, err := kiptables.New(kiptables.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProxier(ProxierConfig{Rules: l.cfg, IPTables: ipt, Conntrack: conntrack.Netlink{}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// syncer is the offloadtest.Sync of p: each call applies a Snapshot with it
// in the node namespace and returns its Health.
func (l *lab) syncer(t *testing.T, p *Proxier) offloadtest.Sync {
	return func(snap *service.Snapshot) kernelsync.Health {
		l.sync(t, p, snap)
		return p.Health().Health
	}
}

// sync applies snap with p inside the node namespace.
func (l *lab) sync(t *testing.T, p *Proxier, snap *service.Snapshot) {
	t.Helper()
	p.Update(snap)
	if err := l.Node.Do(func() error { return p.Sync(context.Background()) }); err != nil {
		t.Fatal(err)
	}
}

func netnstestRequireConntrack(t *testing.T) {
	t.Helper()
	netnstest.RequireRoot(t)
}
