package nftables

import (
	"fmt"
	"net/netip"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/service"
)

// Config is what the table depends on besides the Snapshot. The zero value renders
// a table for a node with no name, NodePorts on every local address but loopback, no
// masquerade of off-cluster traffic, and the masquerade mark 0x4000.
type Config struct {
	// Family is the IP family of the table: IPv4 (the zero value) renders
	// `ip svcproxy`, IPv6 `ip6 svcproxy`, each from the Services' addresses
	// and endpoints of that family (kube-proxy: `ip kube-proxy` and `ip6
	// kube-proxy`, one proxier per family).
	Family service.Family
	// NodeName selects the endpoints of this node for the Local traffic policies.
	NodeName string
	// NodeIPs are the addresses NodePorts answer on (kube-proxy's
	// --nodeport-addresses). Empty: every local address but loopback
	// (`fib daddr type local`). Loopback addresses are left out: see
	// docs/operations.md.
	NodeIPs []netip.Addr
	// NodeIP is this node's own address of the family (kube-proxy's nodeIP,
	// detectNodeIPs: the first of the family). A LoadBalancer whose source
	// ranges hold it also accepts its own IPs as a source
	// (service.FirewallSources). Invalid (zero): unknown, and no such source
	// is accepted, as kube-proxy does when it falls back to loopback.
	NodeIP netip.Addr
	// NoNodePorts: no address of the family answers NodePorts in the kernel,
	// even with NodeIPs empty (--nodeport-addresses names only loopback, or
	// CIDRs no address of the node is in: kube-proxy's empty nodeport-ips
	// set). NodeIPs is ignored then.
	NoNodePorts bool
	// LocalhostNodePorts: the node's loopback address (127.0.0.1, ::1)
	// answers TCP NodePorts through userspace listeners beside the table
	// (KEP-6032, kube-proxy's localnodeportproxy); the table rejects the
	// UDP and SCTP NodePorts there, counting their packets in named
	// counters (LocalhostRejected), as kube-proxy's table does.
	LocalhostNodePorts bool
	// ClusterCIDR is the pod network. Traffic to a ClusterIP from outside it is
	// masqueraded, and pod traffic to an external destination of a Local-policy
	// Service goes to every endpoint. Invalid (zero): neither.
	ClusterCIDR netip.Prefix
	// MasqueradeAll masquerades every connection to a ClusterIP.
	MasqueradeAll bool
	// MasqueradeBit is the fwmark bit that asks for SNAT, 0-31; 0 means
	// kube-proxy's default, 14 (mark 0x4000).
	MasqueradeBit int
	// CountConnections gives each service port a named counter that its DNAT
	// rules count (hybrid mode samples it: Proxier.Connections). A counter
	// outlives rewrites of the port's chains.
	CountConnections bool
	// Include selects the service ports this dataplane serves (hybrid mode
	// promotes some ports to the kernel). Nil: every port.
	Include func(*service.Port) bool
}

func (c *Config) validate() error {
	if c.MasqueradeBit < 0 || c.MasqueradeBit > 31 {
		return fmt.Errorf("nftables config: MasqueradeBit %d: not in 0..31", c.MasqueradeBit)
	}
	for _, ip := range c.NodeIPs {
		if !ip.IsValid() {
			return fmt.Errorf("nftables config: NodeIPs: invalid address")
		}
	}
	if c.Family != "" && c.Family != service.IPv4 && c.Family != service.IPv6 {
		return fmt.Errorf("nftables config: Family %q: want IPv4 or IPv6", c.Family)
	}
	if a := c.NodeIP; a.IsValid() && a.Unmap().Is6() != c.ipv6() {
		return fmt.Errorf("nftables config: NodeIP %s: not an %s address", a, c.family())
	}
	if p := c.ClusterCIDR; p.IsValid() && p.Addr().Is6() != c.ipv6() {
		return fmt.Errorf("nftables config: ClusterCIDR %s: not an %s prefix", p, c.family())
	}
	return nil
}

func (c *Config) mark() string {
	bit := c.MasqueradeBit
	if bit == 0 {
		bit = 14 // kube-proxy's --iptables-masquerade-bit default, which its nftables mode shares
	}
	return fmt.Sprintf("%#08x", uint32(1)<<bit)
}

// nodeIPs are the NodeIPs of the family without loopback ones: a NodePort rule for
// 127.0.0.1 could only work with route_localnet, which svcproxy never sets
// (CVE-2020-8558); ::1 cannot be DNATed away from at all.
func (c *Config) nodeIPs() []netip.Addr {
	if c.NoNodePorts {
		return nil
	}
	var out []netip.Addr
	for _, a := range c.addrs(c.NodeIPs) {
		if !a.IsLoopback() {
			out = append(out, a)
		}
	}
	return out
}

// nodePortSet reports whether NodePorts are matched by the nodeport-ips set
// (some addresses, or none) rather than by every local address.
func (c *Config) nodePortSet() bool { return c.NoNodePorts || len(c.nodeIPs()) > 0 }

// TableFamily is the nftables family of fam's table: ip for IPv4, ip6 for IPv6.
func TableFamily(fam service.Family) knftables.Family {
	if fam == service.IPv6 {
		return knftables.IPv6Family
	}
	return knftables.IPv4Family
}

func (c *Config) ipv6() bool { return c.Family == service.IPv6 }

// family is the table's IP family: IPv4 when Family is empty.
func (c *Config) family() service.Family {
	if c.ipv6() {
		return service.IPv6
	}
	return service.IPv4
}

// ip is the family's address expression prefix: "ip" (ip saddr) or "ip6".
func (c *Config) ip() string {
	if c.ipv6() {
		return "ip6"
	}
	return "ip"
}

// addrType is the family's set key type.
func (c *Config) addrType() string {
	if c.ipv6() {
		return "ipv6_addr"
	}
	return "ipv4_addr"
}

// loopback is the family's loopback range, which NodePorts never answer on.
func (c *Config) loopback() string {
	if c.ipv6() {
		return "::1"
	}
	return "127.0.0.0/8"
}

// of reports whether a is of the table's family (an IPv4-mapped IPv6 address is
// IPv4).
func (c *Config) of(a netip.Addr) bool { return a.Unmap().Is6() == c.ipv6() }

// addrs are the addresses of the table's family, unmapped.
func (c *Config) addrs(addrs []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		if a.IsValid() && c.of(a) {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// prefixes are the prefixes of the table's family, masked.
func (c *Config) prefixes(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.IsValid() && p.Addr().Is6() == c.ipv6() {
			out = append(out, p.Masked())
		}
	}
	return out
}
