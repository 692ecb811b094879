package main

import (
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// The node IP the kernel modes' source ranges compare with (kube-proxy's
// nodeIP): the first --node-ip of the family that is not loopback.
func TestPrimaryNodeIPFromFlag(t *testing.T) {
	for _, tt := range []struct {
		name    string
		nodeIPs []netip.Addr
		fam     service.Family
		want    string
	}{
		{"first of the family", st.Addrs("2001:db8:19::1", "198.19.0.1", "198.19.0.2"), service.IPv4, "198.19.0.1"},
		{"IPv6", st.Addrs("198.19.0.1", "2001:db8:19::1"), service.IPv6, "2001:db8:19::1"},
		{"loopback left out", st.Addrs("127.0.0.1", "198.19.0.1"), service.IPv4, "198.19.0.1"},
		{"none of the family", st.Addrs("198.19.0.1"), service.IPv6, "invalid IP"},
		{"only loopback", st.Addrs("::1"), service.IPv6, "invalid IP"},
	} {
		if got := primaryNodeIP(&Config{NodeIPs: tt.nodeIPs}, tt.fam).String(); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

// Without --node-ip, the namespace's first address of the family, loopback
// left out.
func TestPrimaryNodeIPDetected(t *testing.T) {
	netnstest.RequireRoot(t, "ip")
	ns, peer := netnstest.New(t), netnstest.New(t)
	netnstest.Veth(t, ns, "eth0", netip.MustParsePrefix("198.19.0.1/24"), peer, "eth0", netip.MustParsePrefix("198.19.0.2/24"))
	ns.AddAddr(t, "eth0", netip.MustParsePrefix("2001:db8:19::1/64"))
	var v4, v6 netip.Addr
	if err := ns.Do(func() error {
		v4, v6 = primaryNodeIP(&Config{}, service.IPv4), primaryNodeIP(&Config{}, service.IPv6)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if v4.String() != "198.19.0.1" || v6.String() != "2001:db8:19::1" {
		t.Errorf("detected %s and %s, want 198.19.0.1 and 2001:db8:19::1", v4, v6)
	}
}
