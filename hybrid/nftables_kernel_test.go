package hybrid_test

import (
	"strings"
	"testing"
	"time"

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

	long, peer := e.Dial(t, hotVIP) // opened in userspace, to finish after the promotion
	defer long.Close()
	if peer != proxytest.NodeAddrB.Addr().String() {
		t.Fatalf("long connection: backend saw %s, want the node's address", peer)
	}

	b := proxytest.StartBurst(t, e.Client, hotVIP, 10*time.Millisecond) // ~100/s
	e.WaitPort(t, "default/web:http", "promoted to nftables", func(p proxytest.StatusPort) bool { return p.Path == "nftables" })
	if tbl := table(); !strings.Contains(tbl, "198.18.0.10 . tcp . 80") || strings.Contains(tbl, "198.18.0.11 . tcp . 80") {
		t.Errorf("promoted web: want its service-ips element, and none for cold:\n%s", tbl)
	}
	save := e.Node.Run(t, "iptables-save", "-t", "nat")
	if strings.Contains(save, "-A SVCP-PORTALS-CONTAINER -d 198.18.0.10/32") || !strings.Contains(save, "-A SVCP-PORTALS-CONTAINER -d 198.18.0.11/32") {
		t.Errorf("want web's portal gone and cold's kept:\n%s", save)
	}
	backendSees(t, e, hotVIP, proxytest.ClientAddr, "web on nftables")
	onKernel, peer := e.Dial(t, hotVIP) // carried by the kernel, to finish after the demotion
	defer onKernel.Close()
	if want := proxytest.ClientAddr.Addr().String(); peer != want {
		t.Fatalf("connection on nftables: backend saw %s, want the client's %s", peer, want)
	}
	e.WaitPort(t, "default/web:http", "a kernel rate", func(p proxytest.StatusPort) bool { return p.Path == "nftables" && p.Rate > 0 })
	proxytest.Echo(t, long, "still here")
	long.Close()
	ok, failed, lastErr := b.Stop()
	t.Logf("burst: %d connections, %d failed", ok, failed)
	if failed > 0 {
		t.Errorf("burst: %d of %d connections failed across the promotion; last: %v", failed, ok+failed, lastErr)
	}

	trickle := proxytest.StartBurst(t, e.Client, hotVIP, 200*time.Millisecond) // ~5/s
	e.WaitPort(t, "default/web:http", "demoted to userspace", func(p proxytest.StatusPort) bool { return p.Path == "userspace" })
	proxytest.Echo(t, onKernel, "still here after the demotion")
	ok, failed, lastErr = trickle.Stop()
	t.Logf("trickle: %d connections, %d failed", ok, failed)
	if failed > 0 {
		t.Errorf("trickle: %d of %d connections failed across the demotion; last: %v", failed, ok+failed, lastErr)
	}
	// The demotion's partial sync drops web's elements and empties its chains; the
	// next full sync deletes the chains (offload/nftables partialTx says why).
	if tbl := table(); strings.Contains(tbl, "198.18.0.10 . tcp . 80") || !onlyEmptyObjects(tbl, "default/web/tcp/http") {
		t.Errorf("demoted web: its element or rules are left:\n%s", tbl)
	}
	if save := e.Node.Run(t, "iptables-save", "-t", "nat"); !strings.Contains(save, "-A SVCP-PORTALS-CONTAINER -d 198.18.0.10/32") {
		t.Errorf("demoted web: want its portal back:\n%s", save)
	}
	metrics := e.Get(t, "/metrics")
	for _, m := range []string{`svcproxy_hybrid_promotions_total{ip_family="IPv4",offload="nftables"}`, `svcproxy_hybrid_demotions_total{ip_family="IPv4",offload="nftables"}`} {
		if !strings.Contains(metrics, m+" ") || strings.Contains(metrics, m+" 0\n") {
			t.Errorf("/metrics: want %s at least 1", m)
		}
	}
	e.LogMoves(t)
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
