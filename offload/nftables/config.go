package nftables

import (
	"errors"
	"fmt"
	"net/netip"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/dataplane"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
)

// Config configures nftables mode. Render reads only what the table depends
// on besides the Snapshot: the zero value renders a table for a node with no
// name, NodePorts on every local address but loopback, no masquerade of
// off-cluster traffic, and the masquerade mark 0x4000.
type Config struct {
	// Node is the node served. Family is that of the table: IPv4 (the zero
	// value) renders `ip svcproxy`, IPv6 `ip6 svcproxy`, each from the
	// Services' addresses and endpoints of that family (kube-proxy: `ip
	// kube-proxy` and `ip6 kube-proxy`, one proxier per family).
	// NodePortIPs empty is every local address but loopback (`fib daddr type
	// local`); NoNodePorts, none (kube-proxy's empty nodeport-ips set).
	dataplane.Node
	// Carries selects the service ports this dataplane serves (hybrid mode
	// promotes some ports to the kernel). Nil: every port.
	Carries func(service.PortName) bool
	// CountConnections gives each service port a named counter that its DNAT
	// rules count (hybrid mode samples it: Connections). A counter outlives
	// rewrites of the port's chains.
	CountConnections bool
	// LocalhostNodePorts: the node's loopback address (127.0.0.1, ::1)
	// answers TCP NodePorts through userspace listeners beside the table
	// (KEP-6032, kube-proxy's localnodeportproxy: package hybrid/localhost);
	// the table rejects the UDP and SCTP NodePorts there, counting their
	// packets in named counters (LocalhostRejected), as kube-proxy's table
	// does.
	LocalhostNodePorts bool

	// NFT is the table's kernel side: kernel/nftables.NewFamily(TableFamily(Family),
	// Table), or a Fake. Required by New.
	NFT knft.Interface
	// Periods are the syncs': conntrack cleanup, how often a sync comes and
	// checks that the table is as the last full sync wrote it (its base
	// chains' rules; kube-proxy --nftables-sync-period), how often it is
	// full, the clock.
	kernelsync.Periods
}

func (c *Config) validate() error {
	if err := c.Node.Check(); err != nil {
		return fmt.Errorf("nftables config: %w", err)
	}
	return nil
}

// check is validate for New, which needs the kernel too.
func (c *Config) check() error {
	if c.NFT == nil {
		return errors.New("nftables config: NFT is nil")
	}
	return c.validate()
}

func (c *Config) mark() string { return fmt.Sprintf("%#08x", c.Mark()) }

// nodeIPs are the NodePortIPs of the family without loopback ones: a NodePort
// rule for 127.0.0.1 could only work with route_localnet, which svcproxy never
// sets (CVE-2020-8558); ::1 cannot be DNATed away from at all.
func (c *Config) nodeIPs() []netip.Addr {
	if c.NoNodePorts {
		return nil
	}
	return c.KernelNodePortIPs()
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
