package iptables

import (
	"context"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

var (
	nodeIP    = netip.MustParseAddr("198.19.0.1")
	podIP     = netip.MustParseAddr("198.19.1.50")  // a client pod on this node
	outsideIP = netip.MustParseAddr("198.19.200.7") // a client outside the cluster
)

// syncedFake syncs snap into a new Fake (this node's address: nodeIP) and returns it.
func syncedFake(t *testing.T, cfg Config, snap *service.Snapshot) *kiptables.Fake {
	t.Helper()
	f := kiptables.NewFake()
	f.SetLocalAddrs(nodeIP)
	cfg.IPTables = f
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	return f
}

// The traffic cases of kube-proxy's iptables tests (TestOverallIPTablesRules and
// friends, written with tracePacket): where does a packet from A to B end up?
func TestTrace(t *testing.T) {
	cluster := st.Snapshot(
		st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints(), st.WithNodePort(30080),
			st.WithExternalIPs("198.18.100.1"), st.WithLoadBalancer("198.18.200.1")),
		st.Service("empty", "198.18.0.20", 80, nil, st.WithNodePort(30081), st.WithExternalIPs("198.18.100.2")),
		st.Service("local", "198.18.0.30", 80, st.ThreeEndpoints(), st.WithNodePort(30082), st.WithExternalLocal()),
		st.Service("remote", "198.18.0.40", 80, []service.Endpoint{st.Endpoint("198.19.1.130:8080", "node-b")},
			st.WithNodePort(30083), st.WithExternalLocal(), st.WithInternalLocal()),
		st.Service("dns", "198.18.0.53", 53, st.ThreeEndpoints()[:1], st.WithProtocol(service.UDP)),
	)
	f := syncedFake(t, testConfig, cluster)
	tcp := func(src netip.Addr, dst string, pick int) kiptables.Packet {
		return kiptables.Packet{Src: src, Dst: netip.MustParseAddrPort(dst), Pick: pick, InIface: "eth0"}
	}
	local := func(dst string) kiptables.Packet {
		return kiptables.Packet{Src: nodeIP, Dst: netip.MustParseAddrPort(dst), Local: true}
	}
	tests := []struct {
		name string
		pkt  kiptables.Packet
		want string
	}{
		{"pod to ClusterIP", tcp(podIP, "198.18.0.10:80", 0), "DNAT 198.19.1.10:8080"},
		{"pod to ClusterIP, third endpoint", tcp(podIP, "198.18.0.10:80", 2), "DNAT 198.19.1.130:8080"},
		{"node to ClusterIP", local("198.18.0.10:80"), "DNAT 198.19.1.10:8080, MASQUERADE"},
		{"outside to ClusterIP", tcp(outsideIP, "198.18.0.10:80", 1), "DNAT 198.19.1.11:8080, MASQUERADE"},
		{"hairpin: pod to its own service", tcp(netip.MustParseAddr("198.19.1.11"), "198.18.0.10:80", 1), "DNAT 198.19.1.11:8080, MASQUERADE"},
		{"outside to NodePort", tcp(outsideIP, "198.19.0.1:30080", 0), "DNAT 198.19.1.10:8080, MASQUERADE"},
		{"node to its NodePort", local("198.19.0.1:30080"), "DNAT 198.19.1.10:8080, MASQUERADE"},
		{"outside to externalIP", tcp(outsideIP, "198.18.100.1:80", 2), "DNAT 198.19.1.130:8080, MASQUERADE"},
		{"pod to externalIP", tcp(podIP, "198.18.100.1:80", 0), "DNAT 198.19.1.10:8080, MASQUERADE"},
		{"outside to LoadBalancer IP", tcp(outsideIP, "198.18.200.1:80", 0), "DNAT 198.19.1.10:8080, MASQUERADE"},
		{"not a service port", tcp(outsideIP, "198.18.0.10:81", 0), "ACCEPT"},
		{"UDP to ClusterIP", kiptables.Packet{Proto: "udp", Src: podIP, Dst: netip.MustParseAddrPort("198.18.0.53:53")}, "DNAT 198.19.1.10:8080"},
		{"TCP to a UDP port", tcp(podIP, "198.18.0.53:53", 0), "ACCEPT"},

		{"pod to ClusterIP without endpoints", tcp(podIP, "198.18.0.20:80", 0), "REJECT"},
		{"node to ClusterIP without endpoints", local("198.18.0.20:80"), "REJECT"},
		{"outside to NodePort without endpoints", tcp(outsideIP, "198.19.0.1:30081", 0), "REJECT"},
		{"outside to externalIP without endpoints", tcp(outsideIP, "198.18.100.2:80", 0), "REJECT"},

		// externalTrafficPolicy: Local: only this node's endpoints, client kept.
		{"Local: outside to NodePort", tcp(outsideIP, "198.19.0.1:30082", 1), "DNAT 198.19.1.11:8080"},
		{"Local: pod to NodePort goes anywhere", tcp(podIP, "198.19.0.1:30082", 2), "DNAT 198.19.1.130:8080"},
		{"Local: node to NodePort goes anywhere, masqueraded", local("198.19.0.1:30082"), "DNAT 198.19.1.10:8080, MASQUERADE"},
		{"Local: ClusterIP is still Cluster", tcp(podIP, "198.18.0.30:80", 2), "DNAT 198.19.1.130:8080"},
		{"Local, no local endpoint: outside to NodePort", tcp(outsideIP, "198.19.0.1:30083", 0), "DROP"},
		{"Local, no local endpoint: pod to NodePort", tcp(podIP, "198.19.0.1:30083", 0), "DNAT 198.19.1.130:8080"},
		{"internal Local, no local endpoint: pod to ClusterIP", tcp(podIP, "198.18.0.40:80", 0), "DROP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := f.Trace(tt.pkt)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("the packet's way (go test -v prints it):\n%s", tr)
			if got := tr.Result(); got != tt.want {
				t.Errorf("result %q, want %q\n%s", got, tt.want, tr)
			}
		})
	}
}

// A hairpin trace is the one to read: the endpoint chain marks the packet, and
// POSTROUTING masquerades it, so the pod sees the node, not itself, as the client.
func TestTraceHairpinGolden(t *testing.T) {
	f := syncedFake(t, testConfig, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints())))
	tr, err := f.Trace(kiptables.Packet{Src: netip.MustParseAddr("198.19.1.10"), Dst: netip.MustParseAddrPort("198.18.0.10:80"), InIface: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Masquerade {
		t.Errorf("hairpin not masqueraded:\n%s", tr)
	}
	checkGolden(t, "trace-hairpin", []byte(tr.String()))
}

// Even spread: every endpoint gets 1/n of new connections.
func TestTraceEvenSpread(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7} {
		var eps []service.Endpoint
		for i := range n {
			eps = append(eps, st.Endpoint(netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, 1, byte(10 + i)}), 8080).String(), st.ThisNode))
		}
		f := syncedFake(t, testConfig, st.Snapshot(st.Service("web", "198.18.0.10", 80, eps)))
		trs, err := f.TraceAll(kiptables.Packet{Src: podIP, Dst: netip.MustParseAddrPort("198.18.0.10:80")})
		if err != nil {
			t.Fatal(err)
		}
		share := map[netip.AddrPort]float64{}
		for _, tr := range trs {
			share[tr.DNAT] += tr.Probability
		}
		if len(share) != n {
			t.Errorf("%d endpoints: reached %d: %v", n, len(share), share)
		}
		for a, p := range share {
			if math.Abs(p-1/float64(n)) > 1e-6 {
				t.Errorf("%d endpoints: %s gets %.6f, want %.6f", n, a, p, 1/float64(n))
			}
		}
	}
}

// ClientIP affinity: whatever the random choice, a client returns to its endpoint
// until the timeout passes.
func TestTraceAffinity(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	f := kiptables.NewFake()
	f.Now = func() time.Time { return now }
	cfg := testConfig
	cfg.IPTables = f
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(context.Background(), st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints(), st.WithAffinity(60*time.Second)))); err != nil {
		t.Fatal(err)
	}
	trace := func(src netip.Addr, pick int) netip.AddrPort {
		t.Helper()
		tr, err := f.Trace(kiptables.Packet{Src: src, Dst: netip.MustParseAddrPort("198.18.0.10:80"), Pick: pick})
		if err != nil {
			t.Fatal(err)
		}
		return tr.DNAT
	}
	first := trace(podIP, 1)
	for pick := range 3 {
		if got := trace(podIP, pick); got != first {
			t.Errorf("pick %d: went to %s, want %s (affinity)", pick, got, first)
		}
	}
	if got := trace(netip.MustParseAddr("198.19.1.51"), 2); got == first {
		t.Errorf("another client followed the first one's affinity to %s", got)
	}
	now = now.Add(61 * time.Second)
	if got := trace(podIP, 2); got == first {
		t.Errorf("after the timeout: still %s", got)
	}
}

// The hooks put our chains first: before a userspace portal chain.
func TestHooksPrepended(t *testing.T) {
	f := kiptables.NewFake()
	if err := f.Restore(context.Background(), []byte("*nat\n:SVCP-PORTALS - [0:0]\n-A PREROUTING -j SVCP-PORTALS\nCOMMIT\n")); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig
	cfg.IPTables = f
	p, _ := New(cfg)
	mustSync(t, p, service.NewSnapshot(nil, nil))
	nat, _ := f.Save(context.Background(), kiptables.TableNAT)
	ours := strings.Index(string(nat), "-A PREROUTING -m comment --comment \"svcproxy service portals\" -j SVCP-SERVICES")
	theirs := strings.Index(string(nat), "-A PREROUTING -j SVCP-PORTALS")
	if ours < 0 || theirs < 0 || ours > theirs {
		t.Errorf("want our hook before the portal chain's:\n%s", nat)
	}
}
