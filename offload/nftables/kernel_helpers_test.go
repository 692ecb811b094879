package nftables

import (
	"context"
	"testing"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/offloadtest"
	"github.com/svcproxy/svcproxy/kernel/conntrack"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// lab is offloadtest's lab (a node namespace routing between a client and three
// backends), with nftables mode's rules config for a Dataplane on its node.
type lab struct {
	*offloadtest.Lab
	cfg Config
}

func newLab(t *testing.T) *lab {
	t.Helper()
	netnstest.RequireRoot(t, "nft", "sysctl")
	return &lab{Lab: offloadtest.New(t, st.ThisNode), cfg: Config{Node: dataplane.Node{NodeName: st.ThisNode, ClusterCIDR: offloadtest.ClusterCIDR}}}
}

// nft returns the node's real nftables table.
func (l *lab) nft(t *testing.T) knft.Interface {
	t.Helper()
	var nft knft.Interface
	if err := l.Node.Do(func() (err error) {
		nft, err = knft.New(Table)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return nft
}

// dataplane returns a Dataplane on the node's real nftables and conntrack.
func (l *lab) dataplane(t *testing.T) *Dataplane {
	t.Helper()
	cfg := l.cfg
	cfg.NFT, cfg.Conntrack = l.nft(t), conntrack.Netlink{}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// syncer is the offloadtest.Sync of p: each call applies a Snapshot with it
// in the node namespace and returns its Health.
func (l *lab) syncer(t *testing.T, p *Dataplane) offloadtest.Sync {
	return func(snap *service.Snapshot) kernelsync.Health {
		l.sync(t, p, snap)
		return p.Health().Health
	}
}

// sync applies snap with p inside the node namespace.
func (l *lab) sync(t *testing.T, p *Dataplane, snap *service.Snapshot) {
	t.Helper()
	if err := l.Node.Do(func() error { return p.Sync(context.Background(), snap) }); err != nil {
		t.Fatal(err)
	}
}

func netnstestRequireConntrack(t *testing.T) {
	t.Helper()
	netnstest.RequireRoot(t, "conntrack")
}
