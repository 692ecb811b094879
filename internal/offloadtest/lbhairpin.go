package offloadtest

import (
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// NodeAddr is the node's address on the client's link: the node IP a kernel
// mode's Config names for CheckLoadBalancerSNATted.
var NodeAddr = netip.MustParseAddr("198.19.10.1")

// CheckLoadBalancerSNATted: kube-proxy's "same node to LB, SNATted" flows on the
// real kernel. The client plays a load balancer that sends a connection back
// to its own IP with that IP as the source (an SNAT rule in the client's own
// namespace); the node accepts it while the source ranges hold the node's IP
// (NodeAddr, which the mode's Config must name), and drops it once they do
// not. The client's own address, outside the ranges, is dropped throughout.
func (l *Lab) CheckLoadBalancerSNATted(t *testing.T, sync Sync) {
	t.Helper()
	netnstest.RequireRoot(t, "iptables") // for the client's SNAT rule
	const lbIP, lb = "198.18.200.1", "198.18.200.1:80"
	l.ServeTCP(t, 8080)
	web := func(ranges ...string) *service.Snapshot {
		return l.Web(st.WithLoadBalancer(lbIP), st.WithSourceRanges(ranges...))
	}
	// Replies to the load balancer's IP go back to the client, which undoes
	// its SNAT on the way in.
	l.Node.Run(t, "ip", "route", "add", lbIP+"/32", "via", ClientAddr.String(), "dev", "n-client")

	sync(web(NodeAddr.String() + "/32"))
	if err := l.Client.DialDropped(lb); err != nil {
		t.Errorf("the client's own address, outside the ranges: %v", err)
	}
	l.Client.Run(t, "iptables", "-t", "nat", "-A", "POSTROUTING", "-d", lbIP, "-p", "tcp", "--dport", "80",
		"-j", "SNAT", "--to-source", lbIP)
	answers, err := Dial(l.Client, lb, 3)
	if err != nil {
		t.Errorf("SNATted to the LoadBalancer IP, node in the ranges: %v (want accepted, as kube-proxy's allowFromNode)", err)
	}
	for _, a := range answers {
		if a.Client == lbIP || a.Client == ClientAddr.String() {
			t.Errorf("backend %s saw %s: want the node's address (policy Cluster masquerades)", a.Backend, a.Client)
		}
	}
	sync(web("203.0.113.0/24"))
	if err := l.Client.DialDropped(lb); err != nil {
		t.Errorf("SNATted to the LoadBalancer IP, node outside the ranges: %v", err)
	}
}
