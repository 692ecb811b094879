package iptables

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/ruletest"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

var nodeIP = ruletest.NodeIP

// syncedFake syncs snap into a new Fake (this node's address: nodeIP) and returns it.
func syncedFake(t *testing.T, cfg Config, snap *service.Snapshot) *kiptables.Fake {
	t.Helper()
	f := kiptables.NewFake()
	f.SetLocalAddrs(nodeIP)
	cfg.IPTables = f
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	return f
}

// A hairpin trace is the one to read: the endpoint chain marks the packet, and
// POSTROUTING masquerades it, so the pod sees the node, not itself, as the client.
func TestTraceHairpinGolden(t *testing.T) {
	f := syncedFake(t, testConfig, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints())))
	tr, err := f.Trace(kiptables.Packet{Src: netip.MustParseAddr("198.19.1.10"), Dst: netip.MustParseAddrPort("198.18.0.10:80"), InIface: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Masquerade {
		t.Errorf("hairpin not masqueraded:\n%s", tr)
	}
	checkGolden(t, "trace-hairpin", []byte(tr.String()))
}

// The hooks put our chains first: before a userspace portal chain.
func TestHooksPrepended(t *testing.T) {
	f := kiptables.NewFake()
	if err := f.Restore(context.Background(), []byte("*nat\n:SVCP-PORTALS - [0:0]\n-A PREROUTING -j SVCP-PORTALS\nCOMMIT\n")); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig
	cfg.IPTables = f
	p, _ := New(cfg)
	mustSync(t, p, service.NewSnapshot(nil, nil))
	nat, _ := f.Save(context.Background(), kiptables.TableNAT)
	ours := strings.Index(string(nat), "-A PREROUTING -m comment --comment \"svcproxy service portals\" -j SVCP-SERVICES")
	theirs := strings.Index(string(nat), "-A PREROUTING -j SVCP-PORTALS")
	if ours < 0 || theirs < 0 || ours > theirs {
		t.Errorf("want our hook before the portal chain's:\n%s", nat)
	}
}
