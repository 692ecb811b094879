package ruletest

import (
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// CheckSourceRanges: loadBalancerSourceRanges let only the allowed sources
// reach the LoadBalancer IP; the rest keep it as their destination and are
// dropped. The ClusterIP and the NodePort are not subject to the ranges (as
// in kube-proxy).
func CheckSourceRanges(t *testing.T, path Path) {
	r := path.New(t, Options{})
	Sync(t, r, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:1],
		st.WithNodePort(30080), st.WithLoadBalancer("198.18.200.1"), st.WithSourceRanges("198.19.200.0/24"))))
	from := func(src, dst string) Packet { return From(netip.MustParseAddr(src), dst, 0) }
	for _, tt := range []TraceCase{
		{"allowed source to the LB IP", from("198.19.200.7", "198.18.200.1:80"), "DNAT 198.19.1.10:8080, MASQUERADE"},
		{"other source to the LB IP", from("198.19.201.7", "198.18.200.1:80"), "DROP"},
		{"other source to the ClusterIP", from("198.19.201.7", "198.18.0.10:80"), "DNAT 198.19.1.10:8080, MASQUERADE"},
		{"other source to the NodePort", from("198.19.201.7", "198.19.0.1:30080"), "DNAT 198.19.1.10:8080, MASQUERADE"},
	} {
		tr, err := r.Trace(tt.Packet)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Result != tt.Want {
			t.Errorf("%s: %q, want %q\n%s", tt.Name, tr.Result, tt.Want, tr)
		}
	}
}

// CheckLoadBalancer is kube-proxy's TestLoadBalancer (pkg/proxy/iptables and
// pkg/proxy/nftables proxier_test.go, v1.37.2), its flows in this cluster's
// addresses: two LoadBalancer IPs, source ranges of which one holds this
// node's IP. kube-proxy's "same node to LB, SNATted" flows are the packets a
// load balancer sends back with its own IP as the source; they are accepted
// because the node is (service.FirewallSources). With the node outside the
// ranges, or its IP unknown, they are dropped like any other source.
func CheckLoadBalancer(t *testing.T, path Path) {
	const lb1, lb2 = "198.18.200.1", "198.18.200.2"
	svc := func(ranges ...string) *service.Snapshot {
		return st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:1],
			st.WithNodePort(30080), st.WithLoadBalancer(lb1, lb2), st.WithSourceRanges(ranges...)))
	}
	withNodeIP := Options{NodeIP: NodeIP}
	const ep, dropped = "DNAT 198.19.1.10:8080", "DROP"
	const epMasq = ep + ", MASQUERADE"
	for _, tt := range []struct {
		name string
		o    Options
		snap *service.Snapshot
		src  string // "node": generated on this node, from NodeIP
		dst  string
		want string
	}{
		{"pod to cluster IP", withNodeIP, svc("198.19.0.0/24", "203.0.113.0/25"), "198.19.1.50", "198.18.0.10:80", ep},
		{"external to nodePort", withNodeIP, svc("198.19.0.0/24", "203.0.113.0/25"), "203.0.113.7", "198.19.0.1:30080", epMasq},
		{"nodePort bypasses LoadBalancerSourceRanges", withNodeIP, svc("198.19.0.0/24", "203.0.113.0/25"), "203.0.113.130", "198.19.0.1:30080", epMasq},
		{"accepted external to LB1", withNodeIP, svc("198.19.0.0/24", "203.0.113.0/25"), "203.0.113.7", lb1 + ":80", epMasq},
		{"accepted external to LB2", withNodeIP, svc("198.19.0.0/24", "203.0.113.0/25"), "203.0.113.7", lb2 + ":80", epMasq},
		{"blocked external to LB1", withNodeIP, svc("198.19.0.0/24", "203.0.113.0/25"), "203.0.113.130", lb1 + ":80", dropped},
		{"blocked external to LB2", withNodeIP, svc("198.19.0.0/24", "203.0.113.0/25"), "203.0.113.130", lb2 + ":80", dropped},
		{"pod to LB1 (blocked by LoadBalancerSourceRanges)", withNodeIP, svc("198.19.0.0/24", "203.0.113.0/25"), "198.19.1.50", lb1 + ":80", dropped},
		{"pod to LB2 (blocked by LoadBalancerSourceRanges)", withNodeIP, svc("198.19.0.0/24", "203.0.113.0/25"), "198.19.1.50", lb2 + ":80", dropped},
		{"node to LB1 (allowed by LoadBalancerSourceRanges)", withNodeIP, svc("198.19.0.0/24", "203.0.113.0/25"), "node", lb1 + ":80", epMasq},
		{"node to LB2 (allowed by LoadBalancerSourceRanges)", withNodeIP, svc("198.19.0.0/24", "203.0.113.0/25"), "node", lb2 + ":80", epMasq},
		{"same node to LB1, SNATted to LB1 (implicitly allowed)", withNodeIP, svc("198.19.0.0/24", "203.0.113.0/25"), lb1, lb1 + ":80", epMasq},
		{"same node to LB2, SNATted to LB2 (implicitly allowed)", withNodeIP, svc("198.19.0.0/24", "203.0.113.0/25"), lb2, lb2 + ":80", epMasq},
		{"LB1 to LB2, SNATted (implicitly allowed)", withNodeIP, svc("198.19.0.0/24", "203.0.113.0/25"), lb1, lb2 + ":80", epMasq},
		{"node outside the ranges: SNATted to LB1 is dropped", withNodeIP, svc("203.0.113.0/25"), lb1, lb1 + ":80", dropped},
		{"node IP unknown: SNATted to LB1 is dropped", Options{}, svc("198.19.0.0/24", "203.0.113.0/25"), lb1, lb1 + ":80", dropped},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := path.New(t, tt.o)
			Sync(t, r, tt.snap)
			pkt := Local(tt.dst)
			if tt.src != "node" {
				pkt = From(netip.MustParseAddr(tt.src), tt.dst, 0)
			}
			tr, err := r.Trace(pkt)
			if err != nil {
				t.Fatal(err)
			}
			if tr.Result != tt.want {
				t.Errorf("%q, want %q\n%s", tr.Result, tt.want, tr)
			}
		})
	}
}
