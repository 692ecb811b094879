package nftables

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/ruletest"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// One Snapshot, two tables: `ip svcproxy` renders the IPv4 addresses and
// endpoints only, `ip6 svcproxy` the IPv6 ones, with ip6 expressions,
// ipv6_addr sets and ::1 as the loopback NodePorts never answer on.
func TestRenderGoldenFamilies(t *testing.T) {
	snap := ruletest.FamiliesSnapshot()
	for _, tt := range ruletest.FamilyRenders() {
		t.Run(tt.Name, func(t *testing.T) {
			got, err := Render(Config{Node: tt.Node}, snap)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, tt.Name, []byte(got))
			other := " 2001:db8:"
			if tt.Node.Family == service.IPv6 {
				other = " 198.1"
			}
			for line := range strings.Lines(got) {
				if strings.Contains(line, other) {
					t.Errorf("%s: an address of the other family: %s", tt.Name, line)
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
