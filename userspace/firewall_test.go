package userspace

import (
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
)

// loadBalancerSourceRanges in the portals: a LoadBalancer IP is redirected only
// from the ranges, and from the LoadBalancer IPs themselves when the ranges hold
// the node's IP (service.FirewallSources, kube-proxy's allowFromNode); filter
// drops the rest. kube-proxy's TestLoadBalancer flows, as in offload/iptables.
func TestPortalSourceRanges(t *testing.T) {
	const lb1, lb2 = "198.18.200.1", "198.18.200.2"
	node := netip.MustParseAddr("198.19.0.1")
	be := startTCPBackend(t, direct, "a", "127.0.0.1:0", sayName)
	lbSvc := func(ranges ...string) svcSpec {
		s := webSpec(service.Affinity{}, be.addr.String())
		s.lbIPs, s.sourceRanges = []string{lb1, lb2}, ranges
		return s
	}
	for _, tt := range []struct {
		name   string
		nodeIP netip.Addr
		svc    svcSpec
		src    string // "node": sent by the node itself, from node
		dst    string
		want   string // "REDIRECT" (to the port's listener) or a verdict
	}{
		{"accepted external to LB1", node, lbSvc("198.19.0.0/24", "203.0.113.0/25"), "203.0.113.7", lb1 + ":80", "REDIRECT"},
		{"accepted external to LB2", node, lbSvc("198.19.0.0/24", "203.0.113.0/25"), "203.0.113.7", lb2 + ":80", "REDIRECT"},
		{"blocked external to LB1", node, lbSvc("198.19.0.0/24", "203.0.113.0/25"), "203.0.113.130", lb1 + ":80", "DROP"},
		{"pod to LB1 (blocked by LoadBalancerSourceRanges)", node, lbSvc("198.19.0.0/24", "203.0.113.0/25"), "198.19.2.2", lb1 + ":80", "DROP"},
		{"node to LB1 (allowed by LoadBalancerSourceRanges)", node, lbSvc("198.19.0.0/24", "203.0.113.0/25"), "node", lb1 + ":80", "REDIRECT"},
		{"same node to LB1, SNATted to LB1 (implicitly allowed)", node, lbSvc("198.19.0.0/24", "203.0.113.0/25"), lb1, lb1 + ":80", "REDIRECT"},
		{"same node to LB2, SNATted to LB2 (implicitly allowed)", node, lbSvc("198.19.0.0/24", "203.0.113.0/25"), lb2, lb2 + ":80", "REDIRECT"},
		{"the ClusterIP is not filtered", node, lbSvc("198.19.0.0/24", "203.0.113.0/25"), "203.0.113.130", "198.18.0.10:80", "REDIRECT"},
		{"node outside the ranges: SNATted to LB1 is dropped", node, lbSvc("203.0.113.0/25"), lb1, lb1 + ":80", "DROP"},
		{"node IP unknown: SNATted to LB1 is dropped", netip.Addr{}, lbSvc("198.19.0.0/24", "203.0.113.0/25"), lb1, lb1 + ":80", "DROP"},
		{"no ranges: every source", node, lbSvc(), "203.0.113.130", lb1 + ":80", "REDIRECT"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ipt := iptables.NewFake()
			ipt.SetLocalAddrs(node, netip.MustParseAddr("127.0.0.1"))
			p := startProxier(t, Config{IPTables: ipt, Node: dataplane.Node{NodeIP: tt.nodeIP}})
			mustSync(t, p, snapshotOf(t, tt.svc))
			pkt := iptables.Packet{Src: node, Dst: netip.MustParseAddrPort(tt.dst), Local: true}
			if tt.src != "node" {
				pkt = iptables.Packet{Src: netip.MustParseAddr(tt.src), Dst: pkt.Dst, InIface: "eth0"}
			}
			tr, err := ipt.Trace(pkt)
			if err != nil {
				t.Fatal(err)
			}
			want, wantRedirect := tt.want, uint16(0)
			if want == "REDIRECT" {
				want, wantRedirect = "ACCEPT", portStatus(t, p, "default/web:http").Listener
			}
			if tr.Verdict != want || tr.Redirect != wantRedirect {
				t.Errorf("got %s redirect :%d, want %s redirect :%d\n%s", tr.Verdict, tr.Redirect, want, wantRedirect, tr)
			}
		})
	}
}

// The same on the real kernel: the client reaches the LoadBalancer IP while its
// address is in the ranges, is dropped when it is not, and is accepted again
// when it SNATs its connection to the LoadBalancer IP (what a cloud load
// balancer's hairpin looks like) while the ranges hold the node's IP.
func TestKernelPortalSourceRanges(t *testing.T) {
	const lbIP, lb = "198.18.200.1", "198.18.200.1:80"
	l := newLabWith(t, Config{Node: dataplane.Node{NodeIP: netip.MustParseAddr(nodeIP)}})
	// Replies to the load balancer's IP go back to the client, which undoes
	// its SNAT on the way in.
	l.node.Run(t, "ip", "route", "add", lbIP+"/32", "via", "198.19.1.2", "dev", "to-client")
	lbSvc := func(ranges ...string) svcSpec {
		s := web(epA)
		s.lbIPs, s.sourceRanges = []string{lbIP}, ranges
		return s
	}
	l.sync(t, lbSvc("198.19.1.0/24"))
	if got := hello(t, l.client, lb); got != "a" {
		t.Errorf("from inside the ranges: %q, want a", got)
	}
	l.sync(t, lbSvc(nodeIP+"/32"))
	if err := l.client.DialDropped(lb); err != nil {
		t.Errorf("the client, outside the ranges: %v", err)
	}
	l.client.Run(t, "iptables", "-t", "nat", "-A", "POSTROUTING", "-d", lbIP, "-p", "tcp", "--dport", "80",
		"-j", "SNAT", "--to-source", lbIP)
	if got := hello(t, l.client, lb); got != "a" {
		t.Errorf("SNATted to the LoadBalancer IP, node in the ranges: %q, want a", got)
	}
	l.sync(t, lbSvc("203.0.113.0/24"))
	if err := l.client.DialDropped(lb); err != nil {
		t.Errorf("SNATted to the LoadBalancer IP, node outside the ranges: %v", err)
	}
}
