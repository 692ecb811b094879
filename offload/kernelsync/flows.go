package kernelsync

import (
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/kernel/conntrack"
	"github.com/svcproxy/svcproxy/service"
)

// Flows is what conntrack cleanup needs to know of a service port.
type Flows struct {
	// Family is the rules' family: a NodePort's entries are searched in its
	// conntrack table only ("": both).
	Family       conntrack.Family
	Protocol     string // "tcp", "udp", "sctp"
	Port         uint16
	NodePort     uint16
	Frontends    []netip.Addr // ClusterIPs, externalIPs, LoadBalancer IPs
	Endpoints    []netip.Addr // every endpoint with a DNAT rule of its own, sorted
	HasEndpoints bool
}

// StaleFlows returns the conntrack deletions a sync that made changed and
// removed needs, as kube-proxy's conntrack cleanup
// (pkg/proxy/conntrack/cleanup.go) does, for UDP only: TCP clients notice a
// dead endpoint (RST or timeout) and reconnect, UDP clients keep sending into
// the old entry forever.
//
//   - an endpoint that no longer has a DNAT rule: entries DNATed to it, per
//     frontend address and for the NodePort;
//   - a port that goes from no endpoints to some: entries to its frontends and
//     NodePort, which (with the REJECT gone) would otherwise keep the client on
//     a flow that was never DNATed.
func StaleFlows[P Port](changed []Change[P], removed []P) []conntrack.Filter {
	var out []conntrack.Filter
	gone := func(o *Flows, keep []netip.Addr) {
		if o.Protocol != "udp" {
			return
		}
		for _, ep := range o.Endpoints {
			if _, found := slices.BinarySearchFunc(keep, ep, netip.Addr.Compare); found {
				continue
			}
			for _, fe := range o.Frontends {
				out = append(out, conntrack.Filter{Protocol: "udp", OrigDst: fe, OrigDstPort: o.Port, DstNAT: ep, Family: o.Family})
			}
			if o.NodePort != 0 {
				out = append(out, conntrack.Filter{Protocol: "udp", OrigDstPort: o.NodePort, DstNAT: ep, Family: o.Family})
			}
		}
	}
	for _, o := range removed {
		gone(o.Flows(), nil)
	}
	var none P
	for _, c := range changed {
		n := c.Cur.Flows()
		var old *Flows
		if c.Old != none {
			old = c.Old.Flows()
			var keep []netip.Addr
			if n.Protocol == old.Protocol {
				keep = n.Endpoints
			}
			gone(old, keep)
		}
		// A port new to this process counts as "had no endpoints": no rule
		// caught its addresses, yet a client may already have sent.
		if n.Protocol != "udp" || !n.HasEndpoints || (old != nil && old.HasEndpoints) {
			continue
		}
		for _, fe := range n.Frontends {
			out = append(out, conntrack.Filter{Protocol: "udp", OrigDst: fe, OrigDstPort: n.Port, Family: n.Family})
		}
		if n.NodePort != 0 {
			out = append(out, conntrack.Filter{Protocol: "udp", OrigDstPort: n.NodePort, Family: n.Family})
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

// StaleEntries returns what a full sync reconciles the conntrack table with,
// one selection per family: every UDP port the kernel now serves, its
// frontends and node port with the endpoints its entries may lead to, as
// kube-proxy's CleanStaleEntries (pkg/proxy/conntrack/cleanup.go) builds them.
// A port without endpoints (its traffic rejected) is there too, with none:
// every entry to its frontends goes, the entries DNATed to its last endpoint
// among them, which its REJECT rule (new flows only) never sees; a one-way
// sender would keep such an entry alive for ever (kubernetes#139629). Its
// node port is left out, as kube-proxy does: matched by port alone, it would
// select other hosts' entries too. kube-proxy runs the same reconciliation
// after every sync; svcproxy runs it after a full one (the first of a process
// included), where no change list says what came before, and keeps
// StaleFlows' exact deletions for partial syncs.
func StaleEntries[P Port](ports map[service.PortName]P) []conntrack.Stale {
	byFamily := map[conntrack.Family]*conntrack.Stale{}
	for _, port := range ports {
		o := port.Flows()
		if o.Protocol != "udp" || (o.HasEndpoints && len(o.Endpoints) == 0) {
			// The second: endpoints, but none these rules lead to (a Local
			// policy without local endpoints): entries to the others stay,
			// as kube-proxy keeps every serving endpoint's.
			continue
		}
		s := byFamily[o.Family]
		if s == nil {
			s = &conntrack.Stale{Family: o.Family, Frontends: map[netip.AddrPort][]netip.Addr{}, NodePorts: map[uint16][]netip.Addr{}}
			byFamily[o.Family] = s
		}
		for _, fe := range o.Frontends {
			s.Frontends[netip.AddrPortFrom(fe, o.Port)] = o.Endpoints
		}
		if o.NodePort != 0 && len(o.Endpoints) > 0 {
			s.NodePorts[o.NodePort] = o.Endpoints
		}
	}
	var out []conntrack.Stale
	for _, f := range []conntrack.Family{conntrack.IPv4, conntrack.IPv6} {
		if s := byFamily[f]; s != nil {
			out = append(out, *s)
		}
	}
	return out
}
