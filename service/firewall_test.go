package service

import (
	"net/netip"
	"slices"
	"testing"
)

// The LoadBalancer IPs are accepted as sources only when a range holds the
// node's IP (kube-proxy's allowFromNode).
func TestFirewallSources(t *testing.T) {
	ranges := []netip.Prefix{netip.MustParsePrefix("198.19.0.0/24"), netip.MustParsePrefix("203.0.113.0/25")}
	lbIPs := []netip.Addr{netip.MustParseAddr("198.18.200.1"), netip.MustParseAddr("198.18.200.2")}
	for _, tt := range []struct {
		name   string
		nodeIP netip.Addr
		want   []string
	}{
		{"node in a range", netip.MustParseAddr("198.19.0.1"),
			[]string{"198.19.0.0/24", "203.0.113.0/25", "198.18.200.1", "198.18.200.2"}},
		{"node in a range, IPv4-mapped", netip.MustParseAddr("::ffff:198.19.0.1"),
			[]string{"198.19.0.0/24", "203.0.113.0/25", "198.18.200.1", "198.18.200.2"}},
		{"node outside the ranges", netip.MustParseAddr("198.19.5.1"), []string{"198.19.0.0/24", "203.0.113.0/25"}},
		{"node IP unknown", netip.Addr{}, []string{"198.19.0.0/24", "203.0.113.0/25"}},
	} {
		if got := FirewallSources(ranges, lbIPs, tt.nodeIP); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
