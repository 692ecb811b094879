package service

import (
	"net/netip"
	"slices"
)

// FirewallSources are the source addresses a LoadBalancer IP with
// loadBalancerSourceRanges accepts, as every path that filters by them writes
// them (iptables, nftables, the userspace portals): each range, and,
// when one of the ranges holds nodeIP (this node's own address of the family),
// each of the port's LoadBalancer IPs itself.
//
// The second half is kube-proxy's allowFromNode (syncProxyRules in
// pkg/proxy/iptables/proxier.go and pkg/proxy/nftables/proxier.go, v1.37.2):
// a VIP-like load balancer often has its IP routed to the node as a local
// address, so a connection from the node (or a pod on it) to that IP does not
// reach the load balancer but loops back with the LoadBalancer IP as its source.
// The node was allowed by the ranges, so that connection is too. An invalid
// nodeIP (unknown) allows nothing more, as kube-proxy's loopback fallback does.
func FirewallSources(ranges []netip.Prefix, lbIPs []netip.Addr, nodeIP netip.Addr) []string {
	out := make([]string, 0, len(ranges)+len(lbIPs))
	for _, r := range ranges {
		out = append(out, r.String())
	}
	nodeIP = nodeIP.Unmap()
	if !slices.ContainsFunc(ranges, func(r netip.Prefix) bool { return r.Contains(nodeIP) }) {
		return out
	}
	for _, ip := range lbIPs {
		out = append(out, ip.Unmap().String())
	}
	return out
}
