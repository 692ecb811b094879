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
	podIP     = ruletest.PodIP
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

// The traffic cases of kube-proxy's nftables tests (written with
// tracePacket): where does a packet from A to B end up? The cases both paths
// answer alike are internal/ruletest's; nftables' own: a ClusterIP answers
// only on its ports, the others are rejected.
func TestTrace(t *testing.T) {
	ruletest.CheckTrace(t, rules,
		ruletest.TraceCase{Name: "not a service port", Packet: ruletest.From(outsideIP, "198.18.0.10:81", 0), Want: "REJECT"},
		ruletest.TraceCase{Name: "TCP to a UDP port", Packet: ruletest.From(podIP, "198.18.0.53:53", 0), Want: "REJECT"},
		ruletest.TraceCase{Name: "node to a ClusterIP's other port", Packet: ruletest.Local("198.18.0.10:81"), Want: "REJECT"},
	)
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

// The questions both paths answer alike (internal/ruletest): even spread,
// ClientIP affinity, topology hints, loadBalancerSourceRanges, kube-proxy's
// TestLoadBalancer.
func TestTraceEvenSpread(t *testing.T)   { ruletest.CheckEvenSpread(t, rules) }
func TestTraceAffinity(t *testing.T)     { ruletest.CheckAffinity(t, rules) }
func TestTopologyHints(t *testing.T)     { ruletest.CheckTopologyHints(t, rules) }
func TestTraceSourceRanges(t *testing.T) { ruletest.CheckSourceRanges(t, rules) }
func TestTraceLoadBalancer(t *testing.T) { ruletest.CheckLoadBalancer(t, rules) }
