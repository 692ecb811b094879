package dataplane

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/svcproxy/svcproxy/service"
)

// The keywords of --nodeport-addresses, kube-proxy's (pkg/proxy/apis/config:
// NodePortAddressesPrimary, NodePortAddressesLocalhost, NodePortAddressesAll).
const (
	nodePortsPrimary   = "primary"
	nodePortsLocalhost = "localhost"
	nodePortsAll       = "all"
)

// NodePortAddresses is --nodeport-addresses, its keywords expanded as
// kube-proxy's expandNodePortAddressKeywords (cmd/kube-proxy/app/server.go)
// does: localhost is 127.0.0.0/8 and ::1/128, all is 0.0.0.0/0 and ::/0. The
// keyword primary stays a flag: it stands for --node-ip, the addresses svcproxy
// is told are the node's (kube-proxy reads them from the Node object), which
// answer NodePorts whether or not they are on an interface yet.
type NodePortAddresses struct {
	Primary bool
	CIDRs   []netip.Prefix
}

// ParseNodePortAddresses checks and expands --nodeport-addresses (value, as
// given) as kube-proxy's validateKubeProxyNodePortAddress does: CIDRs and the
// keywords primary, localhost and all, in any combination, each keyword once.
// Empty means the default: primary when --node-ip is given, else all (the
// NodePorts on every address of the node, as svcproxy did before the flag;
// kube-proxy's nftables mode defaults to primary, its other modes to all).
func ParseNodePortAddresses(value string, nodeIPs []netip.Addr) (NodePortAddresses, error) {
	var out NodePortAddresses
	if strings.TrimSpace(value) == "" {
		if len(nodeIPs) > 0 {
			return NodePortAddresses{Primary: true}, nil
		}
		value = nodePortsAll
	}
	seen := map[string]bool{}
	var errs []string
	for i, item := range strings.Split(value, ",") {
		item = strings.TrimSpace(item)
		switch item {
		case nodePortsPrimary, nodePortsLocalhost, nodePortsAll:
			if seen[item] {
				errs = append(errs, fmt.Sprintf("item %d %q: keyword given twice", i, item))
				continue
			}
			seen[item] = true
		}
		switch item {
		case nodePortsPrimary:
			if len(nodeIPs) == 0 {
				errs = append(errs, fmt.Sprintf("item %d %q: needs --node-ip (svcproxy learns the node's primary addresses from --node-ip, not from the Node object)", i, item))
			}
			out.Primary = true
		case nodePortsLocalhost:
			out.CIDRs = append(out.CIDRs, netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"))
		case nodePortsAll:
			out.CIDRs = append(out.CIDRs, netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0"))
		default:
			p, err := netip.ParsePrefix(item)
			if err != nil {
				errs = append(errs, fmt.Sprintf("item %d %q: must be a CIDR or one of the keywords primary, localhost, all", i, item))
				continue
			}
			out.CIDRs = append(out.CIDRs, p.Masked())
		}
	}
	if len(errs) > 0 {
		return NodePortAddresses{}, fmt.Errorf("--nodeport-addresses %q: %s", value, strings.Join(errs, "; "))
	}
	return out, nil
}

// NodePorts is --nodeport-addresses seen by one IP family's proxier
// (kube-proxy's NewNodePortAddresses, pkg/proxy/util/nodeport_addresses.go).
type NodePorts struct {
	// All: NodePorts answer on every local address but loopback. A zero CIDR
	// (all) says so, and so does a family the list says nothing about.
	All bool
	// Addrs are the node addresses of the family that answer NodePorts when
	// not All: the --node-ip ones (primary), and the namespace's addresses
	// inside the CIDRs. Loopback addresses are among them only as Loopback.
	Addrs []netip.Addr
	// Loopback: the list names a loopback CIDR of the family explicitly
	// (127.0.0.0/8, ::1/128, localhost; not merely 0.0.0.0/0): nftables mode
	// then serves the family's loopback address with the localhost listeners
	// (kube-proxy's ContainsExplicitLoopback, KEP-6032).
	Loopback bool
}

// ForFamily is the view of fam, with the namespace's addresses local (the
// addresses of its interfaces; loopback ones are ignored).
func (n NodePortAddresses) ForFamily(fam service.Family, nodeIPs, local []netip.Addr) NodePorts {
	var v NodePorts
	var cidrs []netip.Prefix
	for _, p := range n.CIDRs {
		if fam.Has(p.Addr()) {
			cidrs = append(cidrs, p)
		}
	}
	var primary []netip.Addr
	if n.Primary {
		primary = fam.Addrs(nodeIPs)
	}
	for _, p := range cidrs {
		if p.Addr().IsLoopback() {
			v.Loopback = true
		}
		if p.Bits() == 0 {
			v.All = true
		}
	}
	if len(cidrs) == 0 && len(primary) == 0 {
		v.All = true
	}
	if v.All {
		return v
	}
	for _, a := range primary {
		if !a.Unmap().IsLoopback() { // as expandNodePortAddressKeywords: loopback is not a primary address
			v.Addrs = append(v.Addrs, a.Unmap())
		}
	}
	for _, a := range local {
		a = a.Unmap()
		if a.IsLoopback() || slices.Contains(v.Addrs, a) || !fam.Has(a) {
			continue
		}
		if slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Contains(a) }) {
			v.Addrs = append(v.Addrs, a)
		}
	}
	return v
}

// InterfaceAddrs are the addresses of this namespace's interfaces.
func InterfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("--nodeport-addresses: list the node's addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out, nil
}
