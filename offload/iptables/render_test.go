package iptables

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/service"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// checkGolden compares got with testdata/<name>.golden (or rewrites it with -update).
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	t.Logf("%s, as iptables-restore reads it:\n%s", path, got)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s: rules differ from the golden file (go test -update rewrites it)\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
}

func TestRenderGolden(t *testing.T) {
	noEndpoints := []service.Endpoint(nil)
	remoteOnly := []service.Endpoint{ep("198.19.1.130:8080", "node-b")}
	tests := []struct {
		name string
		cfg  Config
		snap *service.Snapshot
	}{
		{"empty", testConfig, snapshot()},
		{"clusterip", testConfig, snapshot(svc("web", "198.18.0.10", 80, threeEndpoints()))},
		{"clusterip-no-cidr", Config{NodeName: thisNode}, snapshot(svc("web", "198.18.0.10", 80, threeEndpoints()))},
		{"masquerade-all", Config{NodeName: thisNode, MasqueradeAll: true, MasqueradeBit: 5},
			snapshot(svc("web", "198.18.0.10", 80, threeEndpoints()))},
		{"udp", testConfig, snapshot(svc("dns", "198.18.0.53", 53, threeEndpoints(), withProtocol(service.UDP)))},
		{"nodeport", testConfig, snapshot(svc("web", "198.18.0.10", 80, threeEndpoints(), withNodePort(30080)))},
		{"nodeport-node-ips", Config{NodeName: thisNode, ClusterCIDR: testConfig.ClusterCIDR, NodeIPs: addrs("198.19.0.1", "2001:db8::1")},
			snapshot(svc("web", "198.18.0.10", 80, threeEndpoints(), withNodePort(30080)))},
		{"external-ips", testConfig, snapshot(svc("web", "198.18.0.10", 80, threeEndpoints(), withExternalIPs("198.18.100.1")))},
		{"loadbalancer", testConfig, snapshot(svc("web", "198.18.0.10", 80, threeEndpoints(),
			withNodePort(30080), withLoadBalancer("198.18.200.1")))},
		{"loadbalancer-source-ranges", testConfig, snapshot(svc("web", "198.18.0.10", 80, threeEndpoints()[:2],
			withNodePort(30080), withLoadBalancer("198.18.200.1"), withSourceRanges("203.0.113.0/25", "198.19.10.0/24")))},
		{"health-check", testConfig, snapshot(svc("web", "198.18.0.10", 80, threeEndpoints()[:2],
			withNodePort(30080), withLoadBalancer("198.18.200.1"), withExternalLocal(), withHealthCheck(32000)))},
		{"nodeport-loopback", Config{NodeName: thisNode, NodeIPs: addrs("127.0.0.1", "198.19.0.1")},
			snapshot(svc("web", "198.18.0.10", 80, threeEndpoints()[:1], withNodePort(30080)))},
		{"affinity", testConfig, snapshot(svc("web", "198.18.0.10", 80, threeEndpoints(), withAffinity(600*time.Second)))},
		{"affinity-default-timeout", testConfig, snapshot(svc("web", "198.18.0.10", 80, threeEndpoints()[:1], withAffinity(0)))},
		{"no-endpoints", testConfig, snapshot(svc("web", "198.18.0.10", 80, noEndpoints,
			withNodePort(30080), withExternalIPs("198.18.100.1"), withLoadBalancer("198.18.200.1")))},
		{"external-local", testConfig, snapshot(svc("web", "198.18.0.10", 80, threeEndpoints(),
			withNodePort(30080), withExternalLocal()))},
		{"external-local-none-here", testConfig, snapshot(svc("web", "198.18.0.10", 80, remoteOnly,
			withNodePort(30080), withExternalIPs("198.18.100.1"), withExternalLocal()))},
		{"internal-local", testConfig, snapshot(svc("web", "198.18.0.10", 80, threeEndpoints(), withInternalLocal()))},
		{"internal-local-none-here", testConfig, snapshot(svc("web", "198.18.0.10", 80, remoteOnly, withInternalLocal()))},
		{"terminating-fallback", testConfig, snapshot(svc("web", "198.18.0.10", 80, []service.Endpoint{
			terminating(ep("198.19.1.10:8080", thisNode)), terminating(ep("198.19.1.11:8080", "node-b"))}))},
		{"terminating-ignored", testConfig, snapshot(svc("web", "198.18.0.10", 80, []service.Endpoint{
			terminating(ep("198.19.1.10:8080", thisNode)), ep("198.19.1.11:8080", "node-b")}))},
		{"skipped", testConfig, snapshot(
			svc("headless", "198.18.0.1", 80, threeEndpoints(), withHeadless()),
			svc("v6only", "2001:db8::10", 80, threeEndpoints()),
			svc("v6endpoint", "198.18.0.11", 80, []service.Endpoint{ep("[2001:db8::5]:80", thisNode), ep("198.19.1.5:80", thisNode)}),
		)},
		{"two-services", testConfig, snapshot(
			svc("web", "198.18.0.10", 80, threeEndpoints(), withNodePort(30080)),
			svc("api", "198.18.0.20", 443, threeEndpoints()[:2]),
		)},
		{"include", Config{NodeName: thisNode, Include: func(p *service.Port) bool { return p.Name.Name == "api" }}, snapshot(
			svc("web", "198.18.0.10", 80, threeEndpoints()),
			svc("api", "198.18.0.20", 443, threeEndpoints()[:2]),
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

func TestRenderInvalidConfig(t *testing.T) {
	for _, cfg := range []Config{{MasqueradeBit: 32}, {MasqueradeBit: -1}, {NodeIPs: []netip.Addr{{}}}} {
		if _, err := Render(cfg, snapshot()); err == nil {
			t.Errorf("Render(%+v): no error", cfg)
		}
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
