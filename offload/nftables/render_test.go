package nftables

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
	ruletest.CheckGolden(t, name, "the transaction as nft -f reads it", got)
}

func TestRenderGolden(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		snap *service.Snapshot
	}{
		{"masquerade-all", Config{Node: dataplane.Node{NodeName: st.ThisNode, MasqueradeAll: true, MasqueradeBit: 5}},
			st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:1]))},
		{"udp", testConfig, st.Snapshot(st.Service("dns", "198.18.0.53", 53, st.ThreeEndpoints()[:2], st.WithProtocol(service.UDP)))},
		{"nodeport-node-ips", Config{Node: dataplane.Node{NodeName: st.ThisNode, ClusterCIDR: testConfig.ClusterCIDR, NodePortIPs: st.Addrs("198.19.0.1", "127.0.0.1", "2001:db8::1")}},
			st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:1], st.WithNodePort(30080)))},
		{"loadbalancer", testConfig, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:2],
			st.WithNodePort(30080), st.WithExternalIPs("198.18.100.1"), st.WithLoadBalancer("198.18.200.1"), st.WithSourceRanges("203.0.113.0/25", "198.19.10.0/24")))},
		// The ranges hold the node's IP, so the LoadBalancer IPs are sources too.
		{"loadbalancer-node-in-ranges", Config{Node: dataplane.Node{NodeName: st.ThisNode, ClusterCIDR: testConfig.ClusterCIDR, NodeIP: netip.MustParseAddr("198.19.0.1")}},
			st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:1],
				st.WithLoadBalancer("198.18.200.1", "198.18.200.2"), st.WithSourceRanges("203.0.113.0/25", "198.19.0.0/24")))},
		{"affinity", testConfig, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:2], st.WithAffinity(600*time.Second)))},
		{"count-connections", Config{Node: dataplane.Node{NodeName: st.ThisNode}, CountConnections: true},
			st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:2]))},
		// KEP-6032: the UDP node port is rejected and counted on loopback
		// (the TCP one is the listeners'); only the listed addresses take
		// NodePorts in the kernel, here none (--nodeport-addresses localhost).
		{"localhost-nodeports", Config{Node: dataplane.Node{NodeName: st.ThisNode, NoNodePorts: true}, LocalhostNodePorts: true}, st.Snapshot(
			st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:1], st.WithNodePort(30080)),
			st.Service("dns", "198.18.0.53", 53, st.ThreeEndpoints()[:1], st.WithProtocol(service.UDP), st.WithNodePort(30053)),
		)},
		{"skipped", testConfig, st.Snapshot(
			st.Service("headless", "198.18.0.1", 80, st.ThreeEndpoints(), st.WithHeadless()),
			st.Service("v6only", "2001:db8::10", 80, st.ThreeEndpoints()),
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Render(tt.cfg, tt.snap)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, tt.name, []byte(got))
		})
	}
}

// Chain names are part of the contract with a running kernel: a new process must
// find the chains and affinity sets of the old one. They are kube-proxy's names
// (the same hashes as its nftables proxier_test.go).
func TestNamesStable(t *testing.T) {
	n := service.PortName{NamespacedName: service.NamespacedName{Namespace: "ns1", Name: "svc1"}, Port: "p80", Protocol: service.TCP}
	tests := []struct{ got, want string }{
		{prefixService + portBase(n), "service-ULMVA6XW-ns1/svc1/tcp/p80"},
		{prefixEndpoint + endpointBase(n, netip.MustParseAddrPort("10.180.0.1:80")), "endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("chain %s, want %s", tt.got, tt.want)
		}
	}
}
