package iptables

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// bigCluster is n single-port Services of 3 endpoints each, their ClusterIPs
// from 198.18.1.0 on (250 to a /24, so n=334 spans two blocks).
func bigCluster(n int) []*service.Service {
	svcs := make([]*service.Service, 0, n)
	for i := range n {
		svcs = append(svcs, st.Service(fmt.Sprintf("web-%d", i), fmt.Sprintf("198.18.%d.%d", 1+i/250, i%250), 80, st.ThreeEndpoints()))
	}
	return svcs
}

// In a large cluster SVCP-SERVICES jumps by ClusterIP block (/24): a packet
// for a ClusterIP walks the blocks' jumps and its block's ClusterIPs, and
// ends DNATed to an endpoint as before; partial syncs rewrite the blocks
// that changed, not every Service's jump; and a sync between large and small
// leaves the kernel as a full sync from scratch would.
func TestClusterIPBlocks(t *testing.T) {
	f := kiptables.NewFake()
	p := newDataplane(t, f, nil)
	svcs := bigCluster(334) // 1,002 endpoints: large
	mustSync(t, p, st.Snapshot(svcs...))
	dump := f.Dump()
	for _, want := range []string{
		`-A SVCP-SERVICES -d 198.18.1.0/24 -m comment --comment "198.18.1.0/24 cluster IPs" -j SVCP-CIP-`,
		`-A SVCP-SERVICES -d 198.18.2.0/24 -m comment --comment "198.18.2.0/24 cluster IPs" -j SVCP-CIP-`,
	} {
		if !strings.Contains(dump, want) {
			t.Errorf("no %q in\n%s", want, firstLines(dump, "-A SVCP-SERVICES", 5))
		}
	}
	if n := strings.Count(dump, "-A SVCP-SERVICES "); n > 4 { // two blocks, the NodePort jump, nothing per Service
		t.Errorf("%d rules in SVCP-SERVICES, want the blocks' and the fixed ones:\n%s", n, firstLines(dump, "-A SVCP-SERVICES", 10))
	}
	for _, vip := range []string{"198.18.1.0:80", "198.18.1.249:80", "198.18.2.83:80"} {
		tr, err := f.Trace(kiptables.Packet{Src: netip.MustParseAddr("198.19.2.2"), Dst: netip.MustParseAddrPort(vip), InIface: "eth0"})
		if err != nil || tr.DNAT != netip.MustParseAddrPort("198.19.1.10:8080") {
			t.Errorf("%s: DNAT to %v (%v), want the first endpoint\n%s", vip, tr.DNAT, err, tr)
		}
	}
	if tr, _ := f.Trace(kiptables.Packet{Src: netip.MustParseAddr("198.19.2.2"), Dst: netip.MustParseAddrPort("198.18.1.0:81"), InIface: "eth0"}); tr.DNAT.IsValid() {
		t.Errorf("another port of a ClusterIP: DNAT to %v", tr.DNAT)
	}

	// A Service more in the second block: its block chain and its own
	// chains, not SVCP-SERVICES.
	more := append(svcs, st.Service("extra", "198.18.2.200", 80, st.ThreeEndpoints()))
	n0, _ := f.Restores()
	mustSync(t, p, st.Snapshot(more...))
	n, last := f.Restores()
	if n != n0+1 || strings.Contains(string(last), ":SVCP-SERVICES ") || !strings.Contains(string(last), ":SVCP-CIP-") {
		t.Errorf("adding a Service in a block restored:\n%s", firstLines(string(last), "", 12))
	}
	// Blocks emptied and filled, and the way to small and back: each time
	// the kernel is as a full sync from scratch would leave it.
	three := bigCluster(600) // 1,800 endpoints, blocks 198.18.1, .2, .3
	steps := []struct {
		name string
		snap *service.Snapshot
	}{
		{"three blocks", st.Snapshot(three...)},
		{"the third block emptied (1,500 endpoints)", st.Snapshot(three[:500]...)},
		{"the third block back", st.Snapshot(three...)},
		{"small: 300 Services, 900 endpoints", st.Snapshot(three[:300]...)},
		{"large again", st.Snapshot(three...)},
	}
	for _, step := range steps {
		mustSync(t, p, step.snap)
		if got, want := f.Dump(), freshDump(t, step.snap); got != want {
			t.Fatalf("%s: the partial sync differs from a full one\n--- partial:\n%s\n--- full:\n%s", step.name, got, want)
		}
	}
	if strings.Contains(freshDump(t, steps[3].snap), prefixCIP) {
		t.Error("a small cluster has ClusterIP blocks")
	}
	if h := p.Health(); h.FullSyncs != 1 {
		t.Errorf("%d full syncs, want the first only: the changes of mode are partial syncs", h.FullSyncs)
	}
}

// firstLines returns up to n lines of s that start with prefix.
func firstLines(s, prefix string, n int) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) && len(out) < n {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
