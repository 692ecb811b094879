package iptables

import (
	"net/netip"
	"testing"

	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
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
