package conntrack

import (
	"fmt"
	"net/netip"
	"slices"
)

// Stale selects, in one family's table, the UDP entries sent to a Service
// that did not go to one of its endpoints: an entry whose original destination
// is a frontend (or whose destination port is a node port) and whose reply
// comes from an address that is not one of that port's endpoints. It is the
// whole-table reconciliation kube-proxy runs (pkg/proxy/conntrack/cleanup.go),
// for what a change-by-change Filter cannot know: what happened before this
// process's first sync. Examples of such entries:
//
//   - a flow the userspace mode REDIRECTed to its own listener (its reply
//     comes from the node) before a kernel mode took over;
//   - a flow DNATed to an endpoint that went away while no proxy ran;
//   - a flow sent while the port had no endpoint (never DNATed: its reply
//     would come from the frontend itself);
//   - a flow DNATed to the last endpoint of a port that has none now: a
//     frontend with no endpoints selects every entry sent to it. The REJECT
//     rule of such a port matches new flows only, and a one-way sender's
//     datagrams keep its entry alive forever (kubernetes#139628, fixed in
//     kube-proxy's CleanStaleEntries by kubernetes#139629).
//
// A node port is matched by its port alone, so the caller leaves out node
// ports without endpoints, as kube-proxy's CleanStaleEntries does: an empty
// list would select every UDP entry to that port number, other hosts' too.
type Stale struct {
	// Family is the table searched: IPv4 or IPv6. Required: the same node
	// port can have endpoints of both families, one proxier each.
	Family Family
	// Frontends maps a frontend (a ClusterIP, external IP or LoadBalancer IP,
	// with the Service's port) to its endpoints' addresses, sorted; none:
	// every entry sent to the frontend goes.
	Frontends map[netip.AddrPort][]netip.Addr
	// NodePorts maps a node port to its endpoints' addresses, sorted; never
	// empty (see above).
	NodePorts map[uint16][]netip.Addr
}

// String is the selection in a few words, for log lines.
func (s Stale) String() string {
	return fmt.Sprintf("stale %s udp entries of %d frontends and %d node ports", s.Family, len(s.Frontends), len(s.NodePorts))
}

func (s Stale) validate() error {
	if s.Family != IPv4 && s.Family != IPv6 {
		return fmt.Errorf("conntrack: %s: family %q: want IPv4 or IPv6", s, s.Family)
	}
	for fe := range s.Frontends {
		if fe.Addr().Is4() != (s.Family == IPv4) {
			return fmt.Errorf("conntrack: %s: frontend %s is not an %s address", s, fe, s.Family)
		}
	}
	for np, eps := range s.NodePorts {
		if len(eps) == 0 {
			return fmt.Errorf("conntrack: %s: node port %d without endpoints would select every entry to that port", s, np)
		}
	}
	return nil
}

// matches reports whether s selects a UDP entry sent to origDst whose reply
// came from replySrc: a frontend's or a node port's entry that did not go
// to one of its endpoints.
func (s Stale) matches(origDst netip.AddrPort, replySrc netip.Addr) bool {
	if origDst.Addr().Is4() != (s.Family == IPv4) {
		return false
	}
	gone := func(eps []netip.Addr) bool {
		_, found := slices.BinarySearchFunc(eps, replySrc, netip.Addr.Compare)
		return !found
	}
	if eps, ok := s.Frontends[origDst]; ok && gone(eps) {
		return true
	}
	eps, ok := s.NodePorts[origDst.Port()]
	return ok && gone(eps)
}
