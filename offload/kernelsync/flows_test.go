package kernelsync

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/kernel/conntrack"
	"github.com/svcproxy/svcproxy/service"
)

// StaleEntries: one selection per family, of the UDP ports; a port without
// endpoints selects every entry to its frontends (kubernetes#139629), but not
// to its node port, which would select every entry to that port number.
func TestStaleEntries(t *testing.T) {
	mk := func(fam conntrack.Family, proto, vip string, nodePort uint16, eps ...string) *port {
		o := Flows{Family: fam, Protocol: proto, Port: 53, NodePort: nodePort, Frontends: []netip.Addr{netip.MustParseAddr(vip)}}
		for _, e := range eps {
			o.Endpoints = append(o.Endpoints, netip.MustParseAddr(e))
		}
		o.HasEndpoints = len(eps) > 0
		return &port{flows: o}
	}
	ports := map[service.PortName]*port{
		{Port: "v4"}:   mk(conntrack.IPv4, "udp", "198.18.0.53", 30053, "198.19.1.2"),
		{Port: "v6"}:   mk(conntrack.IPv6, "udp", "2001:db8:18::53", 30053, "2001:db8:19::2"),
		{Port: "tcp"}:  mk(conntrack.IPv4, "tcp", "198.18.0.54", 0, "198.19.1.2"),
		{Port: "none"}: mk(conntrack.IPv4, "udp", "198.18.0.55", 30055),
	}
	// Endpoints, but none these rules lead to (a Local policy without
	// local endpoints): left out.
	elsewhere := mk(conntrack.IPv4, "udp", "198.18.0.56", 30056)
	elsewhere.flows.HasEndpoints = true
	ports[service.PortName{Port: "elsewhere"}] = elsewhere
	got := StaleEntries(ports)
	if len(got) != 2 || got[0].Family != conntrack.IPv4 || got[1].Family != conntrack.IPv6 {
		t.Fatalf("StaleEntries: %v, want IPv4 then IPv6", got)
	}
	v4, v6 := got[0], got[1]
	if len(v4.Frontends) != 2 || len(v4.NodePorts) != 1 || !slices.Equal(v4.NodePorts[30053], []netip.Addr{netip.MustParseAddr("198.19.1.2")}) {
		t.Errorf("IPv4: %+v, want the UDP ports' frontends, and the node port of the one with endpoints", v4)
	}
	if eps, ok := v4.Frontends[netip.MustParseAddrPort("198.18.0.55:53")]; !ok || len(eps) != 0 {
		t.Errorf("IPv4: %+v, want 198.18.0.55:53 without endpoints", v4)
	}
	if eps := v6.Frontends[netip.MustParseAddrPort("[2001:db8:18::53]:53")]; !slices.Equal(eps, []netip.Addr{netip.MustParseAddr("2001:db8:19::2")}) {
		t.Errorf("IPv6: %+v", v6)
	}
}

func TestStaleFlows(t *testing.T) {
	vip, ep1, ep2 := netip.MustParseAddr("198.18.0.53"), netip.MustParseAddr("198.19.1.2"), netip.MustParseAddr("198.19.1.3")
	mk := func(proto string, eps ...netip.Addr) *port {
		return &port{flows: Flows{Protocol: proto, Port: 53, NodePort: 30053, Frontends: []netip.Addr{vip}, Endpoints: eps, HasEndpoints: len(eps) > 0}}
	}
	for _, tt := range []struct {
		name    string
		changed []Change[*port]
		removed []*port
		want    []conntrack.Filter
	}{
		{"an endpoint leaves", []Change[*port]{{Old: mk("udp", ep1, ep2), Cur: mk("udp", ep1)}}, nil, []conntrack.Filter{
			{Protocol: "udp", OrigDstPort: 30053, DstNAT: ep2},
			{Protocol: "udp", OrigDst: vip, OrigDstPort: 53, DstNAT: ep2}}},
		{"first endpoints", []Change[*port]{{Old: mk("udp"), Cur: mk("udp", ep1)}}, nil, []conntrack.Filter{
			{Protocol: "udp", OrigDstPort: 30053},
			{Protocol: "udp", OrigDst: vip, OrigDstPort: 53}}},
		{"a new port with endpoints", []Change[*port]{{Cur: mk("udp", ep1)}}, nil, []conntrack.Filter{
			{Protocol: "udp", OrigDstPort: 30053},
			{Protocol: "udp", OrigDst: vip, OrigDstPort: 53}}},
		{"the last endpoint leaves", []Change[*port]{{Old: mk("udp", ep1), Cur: mk("udp")}}, nil, []conntrack.Filter{
			{Protocol: "udp", OrigDstPort: 30053, DstNAT: ep1},
			{Protocol: "udp", OrigDst: vip, OrigDstPort: 53, DstNAT: ep1}}},
		{"a port removed", nil, []*port{mk("udp", ep1)}, []conntrack.Filter{
			{Protocol: "udp", OrigDstPort: 30053, DstNAT: ep1},
			{Protocol: "udp", OrigDst: vip, OrigDstPort: 53, DstNAT: ep1}}},
		{"TCP: nothing", []Change[*port]{{Old: mk("tcp", ep1, ep2), Cur: mk("tcp")}}, []*port{mk("tcp", ep1)}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := StaleFlows(tt.changed, tt.removed); !slices.Equal(got, tt.want) {
				t.Errorf("StaleFlows = %v\nwant %v", got, tt.want)
			}
		})
	}
}
