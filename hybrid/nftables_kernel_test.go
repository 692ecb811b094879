package hybrid_test

import (
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/proxytest"
)

// TestHybridPromotionNFTables is TestHybridPromotion with hybrid's default kernel
// path, nftables: the promoted port appears in svcproxy's own table (an element of
// service-ips, met at dstnat-1, before the portal in iptables' nat table), its
// counter gives the kernel rate, and no connection fails across either move.
func TestHybridPromotionNFTables(t *testing.T) {
	netnstest.RequireRoot(t, "iptables-save", "iptables-restore", "nft")
	e := proxytest.New(t)
	startProxy(t, e, "--offload", "nftables", "--promote-conn-rate", "20", "--promote-after", "1s", "--demote-after", "2s")
	table := func() string { return e.Node.Run(t, "nft", "list", "table", "ip", "svcproxy") }
	portals := func() string { return e.Node.Run(t, "iptables-save", "-t", "nat") }

	promoteAndDemote(t, e, "nftables", func() {
		if tbl := table(); !strings.Contains(tbl, "198.18.0.10 . tcp . 80") || strings.Contains(tbl, "198.18.0.11 . tcp . 80") {
			t.Errorf("promoted web: want its service-ips element, and none for cold:\n%s", tbl)
		}
		if save := portals(); strings.Contains(save, "-A SVCP-PORTALS-CONTAINER -d 198.18.0.10/32") || !strings.Contains(save, "-A SVCP-PORTALS-CONTAINER -d 198.18.0.11/32") {
			t.Errorf("want web's portal gone and cold's kept:\n%s", save)
		}
	}, func() {
		// The demotion's partial sync drops web's elements and empties its chains; the
		// next full sync deletes the chains (offload/nftables partialTx says why).
		if tbl := table(); strings.Contains(tbl, "198.18.0.10 . tcp . 80") || !onlyEmptyObjects(tbl, "default/web/tcp/http") {
			t.Errorf("demoted web: its element or rules are left:\n%s", tbl)
		}
		if save := portals(); !strings.Contains(save, "-A SVCP-PORTALS-CONTAINER -d 198.18.0.10/32") {
			t.Errorf("demoted web: want its portal back:\n%s", save)
		}
	})
}

// onlyEmptyObjects reports whether every line of an `nft list table` that names
// marker declares a chain with no rules, a set or a counter: nothing leads there.
func onlyEmptyObjects(table, marker string) bool {
	lines := strings.Split(table, "\n")
	for i, l := range lines {
		if !strings.Contains(l, marker) {
			continue
		}
		f := strings.Fields(l)
		empty := len(f) == 3 && f[0] == "chain" && i+1 < len(lines) && strings.TrimSpace(lines[i+1]) == "}"
		if !empty && (len(f) != 3 || (f[0] != "set" && f[0] != "counter")) {
			return false
		}
	}
	return true
}
