package iptables

import (
	"net/netip"
	"testing"

	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// loadBalancerSourceRanges: SVCP-FW- DNATs only the allowed sources; the rest
// keeps the LoadBalancer IP as destination and filter drops it. The ClusterIP and
// the NodePort are not subject to the ranges (as in kube-proxy).
func TestTraceSourceRanges(t *testing.T) {
	f := syncedFake(t, testConfig, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:1],
		st.WithNodePort(30080), st.WithLoadBalancer("198.18.200.1"), st.WithSourceRanges("198.19.200.0/24"))))
	tcp := func(src, dst string) kiptables.Packet {
		return kiptables.Packet{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddrPort(dst), InIface: "eth0"}
	}
	for _, tt := range []struct {
		name string
		pkt  kiptables.Packet
		want string
	}{
		{"allowed source to the LB IP", tcp("198.19.200.7", "198.18.200.1:80"), "DNAT 198.19.1.10:8080, MASQUERADE"},
		{"other source to the LB IP", tcp("198.19.201.7", "198.18.200.1:80"), "DROP"},
		{"other source to the ClusterIP", tcp("198.19.201.7", "198.18.0.10:80"), "DNAT 198.19.1.10:8080, MASQUERADE"},
		{"other source to the NodePort", tcp("198.19.201.7", "198.19.0.1:30080"), "DNAT 198.19.1.10:8080, MASQUERADE"},
	} {
		tr, err := f.Trace(tt.pkt)
		if err != nil {
			t.Fatal(err)
		}
		if got := tr.Result(); got != tt.want {
			t.Errorf("%s: %q, want %q\n%s", tt.name, got, tt.want, tr)
		}
	}
}

// The health check node port is accepted in filter, before any DROP policy.
func TestTraceHealthCheckAccepted(t *testing.T) {
	f := syncedFake(t, testConfig, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:1],
		st.WithNodePort(30080), st.WithLoadBalancer("198.18.200.1"), st.WithExternalLocal(), st.WithHealthCheck(32000))))
	tr, err := f.Trace(kiptables.Packet{Src: netip.MustParseAddr("198.19.200.7"), Dst: netip.MustParseAddrPort("198.19.0.1:32000"), InIface: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range tr.Steps {
		found = found || (s.Chain == chainExternalServices && s.Note == "ACCEPT")
	}
	if !found || tr.Result() != "ACCEPT" || !tr.Delivered {
		t.Errorf("health check port not accepted by %s:\n%s", chainExternalServices, tr)
	}
}

// kube-proxy's TestLoadBalancer (pkg/proxy/iptables/proxier_test.go, v1.37.2),
// its flows in this cluster's addresses: two LoadBalancer IPs, source ranges of
// which one holds this node's IP. kube-proxy's "same node to LB, SNATted" flows
// are the packets a load balancer sends back with its own IP as the source; they
// are accepted because the node is (service.FirewallSources). With the node
// outside the ranges, or its IP unknown, they are dropped like any other source.
func TestTraceLoadBalancer(t *testing.T) {
	const lb1, lb2 = "198.18.200.1", "198.18.200.2"
	svc := func(ranges ...string) *service.Snapshot {
		return st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:1],
			st.WithNodePort(30080), st.WithLoadBalancer(lb1, lb2), st.WithSourceRanges(ranges...)))
	}
	withNodeIP := testConfig
	withNodeIP.NodeIP = nodeIP
	const ep, dropped = "DNAT 198.19.1.10:8080", "DROP"
	const epMasq = ep + ", MASQUERADE"
	for _, tt := range []struct {
		name string
		cfg  Config
		snap *service.Snapshot
		src  string // "node": generated on this node, from nodeIP
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
		{"node IP unknown: SNATted to LB1 is dropped", testConfig, svc("198.19.0.0/24", "203.0.113.0/25"), lb1, lb1 + ":80", dropped},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := syncedFake(t, tt.cfg, tt.snap)
			pkt := kiptables.Packet{Src: nodeIP, Dst: netip.MustParseAddrPort(tt.dst), Local: true}
			if tt.src != "node" {
				pkt = kiptables.Packet{Src: netip.MustParseAddr(tt.src), Dst: pkt.Dst, InIface: "eth0"}
			}
			tr, err := f.Trace(pkt)
			if err != nil {
				t.Fatal(err)
			}
			if got := tr.Result(); got != tt.want {
				t.Errorf("%q, want %q\n%s", got, tt.want, tr)
			}
		})
	}
}

// The health check node port's rule comes with the Service's first port: when
// that port goes, a partial sync writes it with the port that is first now.
func TestHealthCheckFollowsFirstPort(t *testing.T) {
	web := func(ports ...string) *service.Service {
		s := st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:1],
			st.WithNodePort(30080), st.WithLoadBalancer("198.18.200.1"), st.WithExternalLocal(), st.WithHealthCheck(32000))
		q := *s.Ports[0]
		q.Name.Port, q.Port, q.NodePort = "q", 443, 30443
		all := map[string]*service.Port{"p": s.Ports[0], "q": &q}
		s.Ports = nil
		for _, name := range ports {
			s.Ports = append(s.Ports, all[name])
		}
		return s
	}
	f := kiptables.NewFake()
	f.SetLocalAddrs(nodeIP)
	p := newDataplane(t, f, nil)
	for _, ports := range [][]string{{"p", "q"}, {"q"}} {
		mustSync(t, p, st.Snapshot(web(ports...)))
		tr, err := f.Trace(kiptables.Packet{Src: netip.MustParseAddr("198.19.200.7"), Dst: netip.MustParseAddrPort("198.19.0.1:32000"), InIface: "eth0"})
		if err != nil {
			t.Fatal(err)
		}
		accepted := false
		for _, s := range tr.Steps {
			accepted = accepted || (s.Chain == chainExternalServices && s.Note == "ACCEPT")
		}
		if !accepted {
			t.Errorf("ports %v: the health check node port is not accepted by %s:\n%s", ports, chainExternalServices, tr)
		}
	}
	if h := p.Health(); h.PartialSyncs != 1 {
		t.Errorf("health %+v: want the second sync partial", h)
	}
}
