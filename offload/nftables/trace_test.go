package nftables

import (
	"context"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/internal/ruletest"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

var (
	nodeIP    = ruletest.NodeIP
	outsideIP = ruletest.OutsideIP
)

// syncedFake syncs snap into a new Fake (this node's address: nodeIP) and returns it.
func syncedFake(t *testing.T, cfg Config, snap *service.Snapshot) *knft.Fake {
	t.Helper()
	f := knft.NewFake(Table)
	f.SetLocalAddrs(nodeIP)
	cfg.NFT = f
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	return f
}

// A trace to read: a client outside the cluster reaches a LoadBalancer IP with
// source ranges; the firewall lets it through, service-ips sends it to the external
// chain, which marks it for masquerade and spreads it.
func TestTraceGolden(t *testing.T) {
	f := syncedFake(t, testConfig, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:2],
		st.WithLoadBalancer("198.18.200.1"), st.WithSourceRanges("198.19.200.0/24"))))
	tr, err := f.Trace(knft.Packet{Src: outsideIP, Dst: netip.MustParseAddrPort("198.18.200.1:80"), Pick: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "trace-loadbalancer", []byte(tr.String()))
}

// nftables' own: a ClusterIP's other port is rejected in the ip6 table too.
func TestTraceIPv6OtherPort(t *testing.T) {
	r := rules.New(t, ruletest.Options{Family: service.IPv6})
	ruletest.Sync(t, r, st.Snapshot(st.Service("web", "198.18.0.10", 80, ruletest.DualEndpoints(), st.WithDualStack("2001:db8:18::10"))))
	tr, err := r.Trace(ruletest.Packet{Src: ruletest.OutsideIP6, Dst: netip.MustParseAddrPort("[2001:db8:18::10]:81")})
	if err != nil || tr.Verdict != "REJECT" {
		t.Errorf("[2001:db8:18::10]:81: %s, %v; want REJECT", tr.Result, err)
	}
}
