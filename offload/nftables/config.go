package nftables

import (
	"fmt"
	"net/netip"

	"github.com/svcproxy/svcproxy/service"
)

// Config is what the table depends on besides the Snapshot. The zero value renders
// a table for a node with no name, NodePorts on every local address but loopback, no
// masquerade of off-cluster traffic, and the masquerade mark 0x4000.
type Config struct {
	// NodeName selects the endpoints of this node for the Local traffic policies.
	NodeName string
	// NodeIPs are the addresses NodePorts answer on (kube-proxy's
	// --nodeport-addresses). Empty: every local address but loopback
	// (`fib daddr type local`). Loopback addresses are left out: see
	// docs/operations.md.
	NodeIPs []netip.Addr
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
	return nil
}

func (c *Config) mark() string {
	bit := c.MasqueradeBit
	if bit == 0 {
		bit = 14 // kube-proxy's --iptables-masquerade-bit default, which its nftables mode shares
	}
	return fmt.Sprintf("%#08x", uint32(1)<<bit)
}

// nodeIPs are the IPv4 NodeIPs without loopback ones: a NodePort rule for 127.0.0.1
// could only work with route_localnet, which svcproxy never sets (CVE-2020-8558).
func (c *Config) nodeIPs() []netip.Addr {
	var out []netip.Addr
	for _, a := range v4(c.NodeIPs) {
		if !a.IsLoopback() {
			out = append(out, a)
		}
	}
	return out
}
