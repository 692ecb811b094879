package iptables

import (
	"net/netip"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/internal/ruletest"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// testConfig is the test cluster's node (internal/ruletest): st.ThisNode,
// its pods in 198.19.1.0/24.
var testConfig = Config{Node: ruletest.Options{}.Node(false)}

// checkGolden compares got with testdata/<name>.golden (or rewrites it with
// -update).
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	ruletest.CheckGolden(t, name, "as iptables-restore reads it", got)
}

func TestRenderGolden(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		snap *service.Snapshot
	}{
		{"clusterip-no-cidr", Config{Node: dataplane.Node{NodeName: st.ThisNode}}, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()))},
		{"masquerade-all", Config{Node: dataplane.Node{NodeName: st.ThisNode, MasqueradeAll: true, MasqueradeBit: 5}},
			st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()))},
		{"udp", testConfig, st.Snapshot(st.Service("dns", "198.18.0.53", 53, st.ThreeEndpoints(), st.WithProtocol(service.UDP)))},
		{"nodeport", testConfig, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints(), st.WithNodePort(30080)))},
		{"nodeport-node-ips", Config{Node: dataplane.Node{NodeName: st.ThisNode, ClusterCIDR: testConfig.ClusterCIDR, NodePortIPs: st.Addrs("198.19.0.1", "2001:db8::1")}},
			st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints(), st.WithNodePort(30080)))},
		{"external-ips", testConfig, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints(), st.WithExternalIPs("198.18.100.1")))},
		{"loadbalancer", testConfig, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints(),
			st.WithNodePort(30080), st.WithLoadBalancer("198.18.200.1")))},
		{"loadbalancer-source-ranges", testConfig, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:2],
			st.WithNodePort(30080), st.WithLoadBalancer("198.18.200.1"), st.WithSourceRanges("203.0.113.0/25", "198.19.10.0/24")))},
		// The ranges hold the node's IP, so the LoadBalancer IPs are sources too.
		{"loadbalancer-source-ranges-node", Config{Node: dataplane.Node{NodeName: st.ThisNode, ClusterCIDR: testConfig.ClusterCIDR, NodeIP: netip.MustParseAddr("198.19.0.1")}},
			st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:1],
				st.WithLoadBalancer("198.18.200.1", "198.18.200.2"), st.WithSourceRanges("203.0.113.0/25", "198.19.0.0/24")))},
		{"health-check", testConfig, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:2],
			st.WithNodePort(30080), st.WithLoadBalancer("198.18.200.1"), st.WithExternalLocal(), st.WithHealthCheck(32000)))},
		{"nodeport-loopback", Config{Node: dataplane.Node{NodeName: st.ThisNode, NodePortIPs: st.Addrs("127.0.0.1", "198.19.0.1")}},
			st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:1], st.WithNodePort(30080)))},
		{"affinity", testConfig, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints(), st.WithAffinity(600*time.Second)))},
		{"affinity-default-timeout", testConfig, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:1], st.WithAffinity(0)))},
		{"internal-local", testConfig, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints(), st.WithInternalLocal()))},
		{"terminating-fallback", testConfig, st.Snapshot(st.Service("web", "198.18.0.10", 80, []service.Endpoint{
			st.Terminating(st.Endpoint("198.19.1.10:8080", st.ThisNode)), st.Terminating(st.Endpoint("198.19.1.11:8080", "node-b"))}))},
		{"terminating-ignored", testConfig, st.Snapshot(st.Service("web", "198.18.0.10", 80, []service.Endpoint{
			st.Terminating(st.Endpoint("198.19.1.10:8080", st.ThisNode)), st.Endpoint("198.19.1.11:8080", "node-b")}))},
		{"skipped", testConfig, st.Snapshot(
			st.Service("headless", "198.18.0.1", 80, st.ThreeEndpoints(), st.WithHeadless()),
			st.Service("v6only", "2001:db8::10", 80, st.ThreeEndpoints()),
			st.Service("v6endpoint", "198.18.0.11", 80, []service.Endpoint{st.Endpoint("[2001:db8::5]:80", st.ThisNode), st.Endpoint("198.19.1.5:80", st.ThisNode)}),
		)},
		{"two-services", testConfig, st.Snapshot(
			st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints(), st.WithNodePort(30080)),
			st.Service("api", "198.18.0.20", 443, st.ThreeEndpoints()[:2]),
		)},
		{"include", Config{Node: dataplane.Node{NodeName: st.ThisNode}, Carries: func(n service.PortName) bool { return n.Name == "api" }}, st.Snapshot(
			st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()),
			st.Service("api", "198.18.0.20", 443, st.ThreeEndpoints()[:2]),
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Render(tt.cfg, tt.snap)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, tt.name, got)
		})
	}
}

// Chain names are part of the contract with a running kernel: a new process must
// find the chains (and the recent lists) of the old one. These are kube-proxy's
// hashes with our prefixes (the same as kube-proxy's proxier_test.go:
// KUBE-SVC-XPGD46QRK7WJZT7O, KUBE-SEP-SXIVWICOYRO3J4NJ).
func TestChainNamesStable(t *testing.T) {
	n := service.PortName{NamespacedName: service.NamespacedName{Namespace: "ns1", Name: "svc1"}, Port: "p80", Protocol: service.TCP}
	tests := []struct{ got, want string }{
		{prefixSVC + portHash(n), "SVCP-SVC-XPGD46QRK7WJZT7O"},
		{sepChain(n, netip.MustParseAddrPort("10.180.0.1:80")), "SVCP-SEP-SXIVWICOYRO3J4NJ"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("chain %s, want %s", tt.got, tt.want)
		}
		if len(tt.got) > 28 {
			t.Errorf("chain %s: longer than iptables' 28 characters", tt.got)
		}
	}
}

func TestProbability(t *testing.T) {
	for n, want := range map[int]string{1: "1.0000000000", 2: "0.5000000000", 3: "0.3333333333", 7: "0.1428571429"} {
		if got := probability(n); got != want {
			t.Errorf("probability(%d) = %s, want %s", n, got, want)
		}
	}
}
