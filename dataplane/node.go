package dataplane

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/svcproxy/svcproxy/service"
)

// Node is what every path is told of the node it serves, for one IP family:
// each path's Config embeds it (userspace, offload/..., hybrid), so the same
// fact has the same name everywhere. The zero value is an IPv4 node with no
// name, NodePorts on every local address but loopback, no masquerade of
// off-cluster traffic, and the masquerade mark 0x4000.
type Node struct {
	// Family is the IP family served: IPv4 (also when empty) or IPv6. A
	// dual-stack node runs one dataplane per family (Families), each fed
	// its family's view of the Snapshot, as kube-proxy runs one proxier per
	// family.
	Family service.Family
	// NodeName is this node's name (--hostname-override): an endpoint whose
	// nodeName is this one is local, for the Local traffic policies and the
	// node hints of traffic distribution.
	NodeName string
	// NodeIP is this node's own address of Family (kube-proxy's nodeIP,
	// detectNodeIPs: the first of the family). A LoadBalancer whose source
	// ranges hold it also accepts its own IPs as a source
	// (service.FirewallSources). Invalid (zero): unknown, and no such source
	// is accepted, as kube-proxy does when it falls back to loopback.
	NodeIP netip.Addr
	// NodePortIPs are the addresses NodePorts answer on (kube-proxy's
	// --nodeport-addresses, resolved for Family: Host.Node). Empty: every
	// local address but loopback, which iptables and nftables match by type
	// (addrtype LOCAL, fib daddr type local); IPVS needs a virtual server per
	// address, so it is given them (empty: none). Loopback addresses are
	// left out: a DNAT from 127.0.0.1 needs route_localnet, which svcproxy
	// never sets (CVE-2020-8558; docs/operations.md).
	NodePortIPs []netip.Addr
	// NoNodePorts: no address of Family answers NodePorts in the kernel,
	// although NodePortIPs is empty (--nodeport-addresses names only
	// loopback, or CIDRs no address of the node is in: kube-proxy's empty
	// nodeport-ips set). iptables mode cannot express none and ignores it.
	NoNodePorts bool
	// ClusterCIDR is the pod network of Family (--cluster-cidr). Traffic to a
	// ClusterIP from outside it is masqueraded, and pod traffic to an
	// external destination of a Local-policy Service goes to every endpoint.
	// Invalid (zero): neither.
	ClusterCIDR netip.Prefix
	// MasqueradeAll masquerades every connection to a ClusterIP.
	MasqueradeAll bool
	// MasqueradeBit is the fwmark bit that asks for SNAT, 0-31; 0 means
	// kube-proxy's default, 14 (mark 0x4000).
	MasqueradeBit int
}

// Check fills in the Family (IPv4 when empty) and checks that every address
// is valid and of the Family, naming the field that is not.
func (n *Node) Check() error {
	switch n.Family {
	case "":
		n.Family = service.IPv4
	case service.IPv4, service.IPv6:
	default:
		return fmt.Errorf("Family %q: want IPv4 or IPv6", n.Family)
	}
	if n.MasqueradeBit < 0 || n.MasqueradeBit > 31 {
		return fmt.Errorf("MasqueradeBit %d: not in 0..31", n.MasqueradeBit)
	}
	for _, ip := range n.NodePortIPs {
		if !ip.IsValid() {
			return fmt.Errorf("NodePortIPs: invalid address")
		}
	}
	if n.NodeIP.IsValid() && !n.Family.Has(n.NodeIP) {
		return fmt.Errorf("NodeIP %s: not an %s address", n.NodeIP, n.Family)
	}
	if n.ClusterCIDR.IsValid() && !n.Family.Has(n.ClusterCIDR.Addr()) {
		return fmt.Errorf("ClusterCIDR %s: not an %s prefix", n.ClusterCIDR, n.Family)
	}
	return nil
}

// Mark is the masquerade mark: the MasqueradeBit set (bit 14 when zero, as
// kube-proxy's --iptables-masquerade-bit defaults, which its nftables and
// ipvs modes share).
func (n *Node) Mark() uint32 {
	bit := n.MasqueradeBit
	if bit == 0 {
		bit = 14
	}
	return uint32(1) << bit
}

// KernelNodePortIPs are the NodePortIPs of the Family without loopback ones
// (see NodePortIPs), unmapped.
func (n *Node) KernelNodePortIPs() []netip.Addr {
	var out []netip.Addr
	for _, a := range n.Family.Addrs(n.NodePortIPs) {
		if !a.IsLoopback() {
			out = append(out, a)
		}
	}
	return out
}

// Host is what the program is told of its node, for both IP families:
// svcproxy's flags. Node resolves one family's view of it against the
// network namespace it runs in.
type Host struct {
	Name              string            // --hostname-override
	IPs               []netip.Addr      // --node-ip
	NodePortAddresses NodePortAddresses // --nodeport-addresses
	ClusterCIDRs      []netip.Prefix    // --cluster-cidr, at most one per family
	MasqueradeAll     bool              // --masquerade-all
	MasqueradeBit     int               // the file's masqueradeBit; 0: 14
}

// Node is h seen by family fam, with what --nodeport-addresses says of fam
// (ports.Loopback: the family's loopback address is named, which nftables
// mode serves with listeners; ports.All: every address).
func (h Host) Node(fam service.Family) (node Node, ports NodePorts, err error) {
	local, err := InterfaceAddrs()
	if err != nil {
		return Node{}, NodePorts{}, err
	}
	ports = h.NodePortAddresses.ForFamily(fam, h.IPs, local)
	node = Node{Family: fam, NodeName: h.Name, NodeIP: h.PrimaryIP(fam), NodePortIPs: ports.Addrs,
		NoNodePorts: !ports.All && len(ports.Addrs) == 0, MasqueradeAll: h.MasqueradeAll, MasqueradeBit: h.MasqueradeBit}
	for _, p := range h.ClusterCIDRs {
		if fam.Has(p.Addr()) {
			node.ClusterCIDR = p
		}
	}
	return node, ports, nil
}

// Addrs are --node-ip, or every address of this namespace's interfaces but
// loopback and those of the links named in skip (IPVS's dummy interface
// holds service IPs): the addresses NodePorts answer on when
// --nodeport-addresses says all.
func (h Host) Addrs(skip ...string) ([]netip.Addr, error) {
	if len(h.IPs) > 0 {
		return h.IPs, nil
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("node addresses: %w", err)
	}
	var out []netip.Addr
next:
	for _, ifc := range ifs {
		for _, s := range skip {
			if ifc.Name == s {
				continue next
			}
		}
		if ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().IsGlobalUnicast() {
				out = append(out, p.Addr())
			}
		}
	}
	return out, nil
}

// PrimaryIP is this node's own address of family fam, Node.NodeIP: the first
// address of the family in Addrs, --node-ip or this namespace's, loopback
// left out. kube-proxy's detectNodeIPs takes the first of each family too,
// from the Node object's addresses or --bind-address; svcproxy does not read
// the Node's addresses. Invalid when there is none: then no such source is
// accepted, as kube-proxy's loopback fallback accepts none.
func (h Host) PrimaryIP(fam service.Family) netip.Addr {
	addrs, err := h.Addrs(ipvsInterface)
	if err != nil {
		return netip.Addr{}
	}
	for _, a := range addrs {
		if a = a.Unmap(); fam.Has(a) && !a.IsLoopback() {
			return a
		}
	}
	return netip.Addr{}
}

// ipvsInterface is offload/ipvs's DefaultInterface, whose service IPs are not
// the node's (this package imports no path).
const ipvsInterface = "svcp-ipvs0"
