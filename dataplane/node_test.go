package dataplane

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
		if got := (Host{IPs: tt.nodeIPs}).PrimaryIP(tt.fam).String(); got != tt.want {
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
		v4, v6 = Host{}.PrimaryIP(service.IPv4), Host{}.PrimaryIP(service.IPv6)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if v4.String() != "198.19.0.1" || v6.String() != "2001:db8:19::1" {
		t.Errorf("detected %s and %s, want 198.19.0.1 and 2001:db8:19::1", v4, v6)
	}
}

// Check fills in IPv4 and names the field that is wrong.
func TestNodeCheck(t *testing.T) {
	n := Node{}
	if err := n.Check(); err != nil || n.Family != service.IPv4 {
		t.Fatalf("zero Node: %v, family %q; want nil, IPv4", err, n.Family)
	}
	for _, tt := range []struct {
		node Node
		want string
	}{
		{Node{Family: "IPv5"}, `Family "IPv5": want IPv4 or IPv6`},
		{Node{MasqueradeBit: 32}, "MasqueradeBit 32: not in 0..31"},
		{Node{MasqueradeBit: -1}, "MasqueradeBit -1: not in 0..31"},
		{Node{NodePortIPs: []netip.Addr{{}}}, "NodePortIPs: invalid address"},
		{Node{Family: service.IPv6, NodeIP: netip.MustParseAddr("198.19.0.1")}, "NodeIP 198.19.0.1: not an IPv6 address"},
		{Node{ClusterCIDR: netip.MustParsePrefix("2001:db8:19::/64")}, "ClusterCIDR 2001:db8:19::/64: not an IPv4 prefix"},
	} {
		if err := tt.node.Check(); err == nil || err.Error() != tt.want {
			t.Errorf("%+v: %v, want %q", tt.node, err, tt.want)
		}
	}
	if m := (&Node{}).Mark(); m != 0x4000 {
		t.Errorf("default mark %#x, want 0x4000", m)
	}
}
