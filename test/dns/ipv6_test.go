package dns_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// podResolvConf6 is what the kubelet writes into a pod of an IPv6 or
// dual-stack cluster whose DNS Service's first ClusterIP is IPv6: the name
// server is an IPv6 address (here the namespace's ::1, where clusterdns's
// ":53" listens too).
const podResolvConf6 = `nameserver ::1
search default.svc.cluster.local svc.cluster.local cluster.local
options ndots:5 timeout:2 attempts:2
`

// TestIPv6Clients asks clusterdns over IPv6 for the IPv6 side of the
// manifests: AAAA of a dual-stack ClusterIP and of headless endpoints (by the
// Service and by hostname), PTR over ip6.arpa of both, with dig and with the
// libc resolver (getent ahostsv6 asks AAAA only; getent ahosts both families;
// getent hosts ADDR asks the PTR), the name server at ::1.
func TestIPv6Clients(t *testing.T) {
	l := newLab(t, "127.0.0.1:5353")
	l.ns.ResolvConf(t, podResolvConf6)
	// A dual-stack pod's eth0 (a veth pair inside the namespace: this host's
	// kernel has no dummy links, and no traffic leaves). getaddrinfo
	// with AI_ADDRCONFIG, as getent ahosts* and most programs call it, asks
	// for a family only when the host has a non-loopback address of it.
	l.ns.Run(t, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
	l.ns.Run(t, "ip", "link", "set", "eth1", "up")
	l.ns.AddAddr(t, "eth0", netip.MustParsePrefix("198.19.9.9/32"))
	l.ns.AddAddr(t, "eth0", netip.MustParsePrefix("2001:db8:19::9:9/128"))
	l.ns.Run(t, "ip", "link", "set", "eth0", "up")

	digs := []struct {
		name string
		args []string
		want []string // the lines of dig +short, in any order
	}{
		{name: "AAAA of a dual-stack ClusterIP", args: []string{"dual.default.svc.cluster.local", "AAAA"}, want: []string{"2001:db8:18::20"}},
		{name: "A of a dual-stack ClusterIP", args: []string{"dual.default.svc.cluster.local", "A"}, want: []string{"198.18.0.20"}},
		{name: "AAAA over TCP", args: []string{"+tcp", "dual.default.svc.cluster.local", "AAAA"}, want: []string{"2001:db8:18::20"}},
		{name: "AAAA of headless endpoints, ready only", args: []string{"anon.default.svc.cluster.local", "AAAA"},
			want: []string{"2001:db8:19::2:1", "2001:db8:19::2:2"}},
		{name: "AAAA of a headless hostname", args: []string{"anon-1.anon.default.svc.cluster.local", "AAAA"}, want: []string{"2001:db8:19::2:2"}},
		{name: "A of the same dual-stack hostname", args: []string{"anon-1.anon.default.svc.cluster.local", "A"}, want: []string{"198.19.2.2"}},
		{name: "PTR of an IPv6 ClusterIP", args: []string{"-x", "2001:db8:18::20"}, want: []string{"dual.default.svc.cluster.local."}},
		{name: "PTR of a headless IPv6 endpoint with a hostname", args: []string{"-x", "2001:db8:19::2:2"},
			want: []string{"anon-1.anon.default.svc.cluster.local."}},
	}
	for _, tt := range digs {
		t.Run("dig "+tt.name, func(t *testing.T) {
			args := append([]string{"@::1", "+short"}, tt.args...)
			out := l.ns.Run(t, "dig", args...)
			if lines := strings.Split(strings.TrimSpace(out), "\n"); !sameSet(lines, tt.want) {
				t.Errorf("dig %s:\n%s\nwant %q", strings.Join(args, " "), out, tt.want)
			}
		})
	}

	getents := []struct {
		args []string
		want []string // the addresses (first field) of getent's lines, deduplicated, in any order
		name string   // the canonical name getent prints
	}{
		{[]string{"ahostsv6", "dual"}, []string{"2001:db8:18::20"}, "dual.default.svc.cluster.local"},
		{[]string{"ahosts", "dual.default"}, []string{"198.18.0.20", "2001:db8:18::20"}, "dual.default.svc.cluster.local"},
		{[]string{"ahostsv6", "anon"}, []string{"2001:db8:19::2:1", "2001:db8:19::2:2"}, "anon.default.svc.cluster.local"},
		{[]string{"hosts", "2001:db8:18::20"}, []string{"2001:db8:18::20"}, "dual.default.svc.cluster.local"},
		{[]string{"hosts", "2001:db8:19::2:2"}, []string{"2001:db8:19::2:2"}, "anon-1.anon.default.svc.cluster.local"},
	}
	for _, tt := range getents {
		t.Run("getent "+strings.Join(tt.args, " "), func(t *testing.T) {
			out := l.ns.Run(t, "getent", tt.args...)
			var addrs []string
			for line := range strings.Lines(strings.TrimSpace(out)) {
				f := strings.Fields(line)
				if !slices.Contains(addrs, f[0]) {
					addrs = append(addrs, f[0])
				}
			}
			if !sameSet(addrs, tt.want) || !strings.Contains(out, " "+tt.name) {
				t.Errorf("getent %s:\n%s\nwant the addresses %q and the name %s", strings.Join(tt.args, " "), out, tt.want, tt.name)
			}
		})
	}
}
