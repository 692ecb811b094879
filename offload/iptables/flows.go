package iptables

import (
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/kernel/conntrack"
)

// flowInfo is what conntrack cleanup needs to know of a service port.
type flowInfo struct {
	family       conntrack.Family // the rules' family: a NodePort's entries are searched there only
	proto        string
	port         uint16
	nodePort     uint16
	frontends    []netip.Addr // ClusterIPs, externalIPs, LoadBalancer IPs
	endpoints    []netip.Addr // every endpoint with a SVCP-SEP- chain, sorted
	hasEndpoints bool
}

// staleFlows returns the conntrack deletions a change from old to new needs, as
// kube-proxy's conntrack cleanup (pkg/proxy/conntrack/cleanup.go) does, for UDP only:
// TCP clients notice a dead endpoint (RST or timeout) and reconnect, UDP clients
// keep sending into the old entry forever.
//
//   - an endpoint that no longer has a chain: entries DNATed to it, per frontend
//     address and for the NodePort;
//   - a port that goes from no endpoints to some: entries to its frontends and
//     NodePort, which (with the REJECT rule gone) would otherwise keep the client
//     on a flow that was never DNATed.
func staleFlows(changed []change, removed []*portRules) []conntrack.Filter {
	var out []conntrack.Filter
	gone := func(o *portRules, keep []netip.Addr) {
		if o.flows.proto != "udp" {
			return
		}
		for _, ep := range o.flows.endpoints {
			if _, found := slices.BinarySearchFunc(keep, ep, netip.Addr.Compare); found {
				continue
			}
			for _, fe := range o.flows.frontends {
				out = append(out, conntrack.Filter{Protocol: "udp", OrigDst: fe, OrigDstPort: o.flows.port, DstNAT: ep, Family: o.flows.family})
			}
			if o.flows.nodePort != 0 {
				out = append(out, conntrack.Filter{Protocol: "udp", OrigDstPort: o.flows.nodePort, DstNAT: ep, Family: o.flows.family})
			}
		}
	}
	for _, o := range removed {
		gone(o, nil)
	}
	for _, c := range changed {
		n := c.cur
		if c.old != nil {
			var keep []netip.Addr
			if n.flows.proto == c.old.flows.proto {
				keep = n.flows.endpoints
			}
			gone(c.old, keep)
		}
		// A port new to this process counts as "had no endpoints": no rule
		// caught its addresses, yet a client may already have sent.
		if n.flows.proto != "udp" || !n.flows.hasEndpoints || (c.old != nil && c.old.flows.hasEndpoints) {
			continue
		}
		for _, fe := range n.flows.frontends {
			out = append(out, conntrack.Filter{Protocol: "udp", OrigDst: fe, OrigDstPort: n.flows.port, Family: n.flows.family})
		}
		if n.flows.nodePort != 0 {
			out = append(out, conntrack.Filter{Protocol: "udp", OrigDstPort: n.flows.nodePort, Family: n.flows.family})
		}
	}
	return compact(out)
}

func compact(fs []conntrack.Filter) []conntrack.Filter {
	slices.SortFunc(fs, compareFilters)
	return slices.Compact(fs)
}

func compareFilters(a, b conntrack.Filter) int {
	if c := a.OrigDst.Compare(b.OrigDst); c != 0 {
		return c
	}
	if a.OrigDstPort != b.OrigDstPort {
		return int(a.OrigDstPort) - int(b.OrigDstPort)
	}
	return a.DstNAT.Compare(b.DstNAT)
}
