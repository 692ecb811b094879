package nftables

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/internal/ruletest"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// The IPv6 side of the test cluster (internal/ruletest): this node at
// 2001:db8:19::1, pods in 2001:db8:19::1:0/112, services in 2001:db8:18::/112.
var testConfig6 = Config{Node: dataplane.Node{Family: service.IPv6, NodeName: st.ThisNode, ClusterCIDR: ruletest.ClusterCIDR(service.IPv6)}}

// One Snapshot, two tables: `ip svcproxy` renders the IPv4 addresses and
// endpoints only, `ip6 svcproxy` the IPv6 ones, with ip6 expressions,
// ipv6_addr sets and ::1 as the loopback NodePorts never answer on.
func TestRenderGoldenFamilies(t *testing.T) {
	snap := ruletest.FamiliesSnapshot()
	for _, tt := range []struct {
		name string
		cfg  Config
	}{
		{"dual-stack-ipv4", testConfig},
		{"dual-stack-ipv6", testConfig6},
		{"dual-stack-ipv6-node-ips", Config{Node: dataplane.Node{Family: service.IPv6, NodeName: st.ThisNode, NodePortIPs: st.Addrs("198.19.0.1", "2001:db8:19::1", "::1")}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Render(tt.cfg, snap)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, tt.name, []byte(got))
			other := " 2001:db8:"
			if tt.cfg.Family == service.IPv6 {
				other = " 198.1"
			}
			for line := range strings.Lines(got) {
				if strings.Contains(line, other) {
					t.Errorf("%s: an address of the other family: %s", tt.name, line)
				}
			}
		})
	}
}

// The IPv6 questions both paths answer alike (internal/ruletest): tracePacket's
// on a dual-stack Service, and conntrack cleanup in the IPv6 table only.
func TestTraceIPv6(t *testing.T)            { ruletest.CheckTraceIPv6(t, rules) }
func TestConntrackCleanupIPv6(t *testing.T) { ruletest.CheckConntrackCleanupIPv6(t, rules) }

// nftables' own: a ClusterIP's other port is rejected in the ip6 table too.
func TestTraceIPv6OtherPort(t *testing.T) {
	r := rules.New(t, ruletest.Options{Family: service.IPv6})
	ruletest.Sync(t, r, st.Snapshot(st.Service("web", "198.18.0.10", 80, ruletest.DualEndpoints(), st.WithDualStack("2001:db8:18::10"))))
	tr, err := r.Trace(ruletest.Packet{Src: ruletest.OutsideIP6, Dst: netip.MustParseAddrPort("[2001:db8:18::10]:81")})
	if err != nil || tr.Verdict != "REJECT" {
		t.Errorf("[2001:db8:18::10]:81: %s, %v; want REJECT", tr.Result, err)
	}
}

func TestRenderFamilyConfig(t *testing.T) {
	_, err := Render(Config{Node: dataplane.Node{Family: service.IPv6, ClusterCIDR: netip.MustParsePrefix("198.19.0.0/16")}}, st.Snapshot())
	if err == nil || !strings.Contains(err.Error(), "ClusterCIDR 198.19.0.0/16: not an IPv6 prefix") {
		t.Errorf("an ip6 table with an IPv4 ClusterCIDR: %v", err)
	}
	if _, err := Render(Config{Node: dataplane.Node{Family: "IPv5"}}, st.Snapshot()); err == nil {
		t.Error("Family IPv5: no error")
	}
}
