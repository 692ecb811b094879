package dataplane

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/service"
)

// TestParseNodePortAddresses: --nodeport-addresses takes kube-proxy's values
// (CIDRs, primary, localhost, all, combined), refuses what kube-proxy's
// validateKubeProxyNodePortAddress refuses with an error naming the flag and
// the item, and defaults to what svcproxy did before the flag.
func TestParseNodePortAddresses(t *testing.T) {
	p := netip.MustParsePrefix
	nodeIP := []netip.Addr{netip.MustParseAddr("198.19.10.1")}
	tests := []struct {
		name, value string
		nodeIPs     []netip.Addr
		want        NodePortAddresses
		wantErr     []string // substrings of the error
	}{
		{name: "default without --node-ip: all", want: NodePortAddresses{CIDRs: []netip.Prefix{p("0.0.0.0/0"), p("::/0")}}},
		{name: "default with --node-ip: primary", nodeIPs: nodeIP, want: NodePortAddresses{Primary: true}},
		{name: "localhost expands to both loopbacks", value: "localhost", want: NodePortAddresses{CIDRs: []netip.Prefix{p("127.0.0.0/8"), p("::1/128")}}},
		{name: "primary combines with localhost", value: "primary,localhost", nodeIPs: nodeIP,
			want: NodePortAddresses{Primary: true, CIDRs: []netip.Prefix{p("127.0.0.0/8"), p("::1/128")}}},
		{name: "CIDRs and keywords, spaces, unmasked CIDR", value: "198.19.0.0/16, all ,10.1.2.3/8",
			want: NodePortAddresses{CIDRs: []netip.Prefix{p("198.19.0.0/16"), p("0.0.0.0/0"), p("::/0"), p("10.0.0.0/8")}}},
		{name: "a loopback CIDR", value: "127.0.0.1/32", want: NodePortAddresses{CIDRs: []netip.Prefix{p("127.0.0.1/32")}}},
		{name: "keyword twice", value: "localhost,all,localhost", wantErr: []string{`--nodeport-addresses "localhost,all,localhost"`, `item 2 "localhost": keyword given twice`}},
		{name: "not a CIDR", value: "primary,10.0.0.1", nodeIPs: nodeIP, wantErr: []string{`item 1 "10.0.0.1": must be a CIDR or one of the keywords primary, localhost, all`}},
		{name: "unknown keyword", value: "loopback", wantErr: []string{`item 0 "loopback": must be a CIDR`}},
		{name: "primary without --node-ip", value: "primary,localhost", wantErr: []string{`item 0 "primary": needs --node-ip`}},
		{name: "empty item", value: "all,", wantErr: []string{`item 1 "": must be a CIDR`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseNodePortAddresses(tt.value, tt.nodeIPs)
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("parse(%q) = %+v, want an error", tt.value, got)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Primary != tt.want.Primary || !slices.Equal(got.CIDRs, tt.want.CIDRs) {
				t.Fatalf("parse(%q) = %+v, want %+v", tt.value, got, tt.want)
			}
		})
	}
}

// TestNodePortFamily: what one family's proxier makes of the list (kube-proxy's
// NewNodePortAddresses): a family the list says nothing about takes every
// address; loopback counts only when named (localhost, 127.0.0.0/8), not
// inside all; CIDRs pick the namespace's addresses.
func TestNodePortFamily(t *testing.T) {
	a := netip.MustParseAddr
	local := []netip.Addr{a("127.0.0.1"), a("::1"), a("198.19.10.1"), a("198.19.11.1"), a("2001:db8:19::10:1")}
	nodeIP := []netip.Addr{a("198.19.10.1")}
	tests := []struct {
		name, value string
		fam         service.Family
		want        NodePorts
	}{
		{name: "all", value: "all", fam: service.IPv4, want: NodePorts{All: true}},
		{name: "all and localhost", value: "all,localhost", fam: service.IPv4, want: NodePorts{All: true, Loopback: true}},
		{name: "primary", value: "primary", fam: service.IPv4, want: NodePorts{Addrs: []netip.Addr{a("198.19.10.1")}}},
		{name: "primary, IPv6 has none: all", value: "primary", fam: service.IPv6, want: NodePorts{All: true}},
		{name: "primary and localhost", value: "primary,localhost", fam: service.IPv4, want: NodePorts{Addrs: []netip.Addr{a("198.19.10.1")}, Loopback: true}},
		{name: "primary and localhost, IPv6: loopback only", value: "primary,localhost", fam: service.IPv6, want: NodePorts{Loopback: true}},
		{name: "localhost alone: no kernel NodePorts", value: "localhost", fam: service.IPv4, want: NodePorts{Loopback: true}},
		{name: "a CIDR picks addresses", value: "198.19.11.0/24", fam: service.IPv4, want: NodePorts{Addrs: []netip.Addr{a("198.19.11.1")}}},
		{name: "an IPv6 CIDR", value: "2001:db8:19::/64", fam: service.IPv6, want: NodePorts{Addrs: []netip.Addr{a("2001:db8:19::10:1")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := ParseNodePortAddresses(tt.value, nodeIP)
			if err != nil {
				t.Fatal(err)
			}
			got := n.ForFamily(tt.fam, nodeIP, local)
			if got.All != tt.want.All || got.Loopback != tt.want.Loopback || !slices.Equal(got.Addrs, tt.want.Addrs) {
				t.Fatalf("%q for %s = %+v, want %+v", tt.value, tt.fam, got, tt.want)
			}
		})
	}
}
