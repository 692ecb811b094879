package conntrack

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

func TestFilterString(t *testing.T) {
	tests := []struct {
		f    Filter
		want string
	}{
		{Filter{Protocol: "udp", OrigDst: netip.MustParseAddr("198.18.0.53"), OrigDstPort: 53, DstNAT: netip.MustParseAddr("198.19.1.10")},
			"-p udp --orig-dst 198.18.0.53 --orig-port-dst 53 --dst-nat 198.19.1.10"},
		{Filter{Protocol: "udp", OrigDstPort: 30053}, "-p udp --orig-port-dst 30053"},
	}
	for _, tt := range tests {
		if got := tt.f.String(); got != tt.want {
			t.Errorf("String() %q, want %q", got, tt.want)
		}
	}
}

func TestFake(t *testing.T) {
	a := Flow{Protocol: "udp", Src: netip.MustParseAddrPort("198.19.1.50:5000"), OrigDst: netip.MustParseAddrPort("198.18.0.53:53"), DstNAT: netip.MustParseAddrPort("198.19.1.10:53")}
	b := a
	b.DstNAT = netip.MustParseAddrPort("198.19.1.11:53")
	c := a
	c.Protocol = "tcp"
	f := NewFake(a, b, c)
	n, err := f.Delete(context.Background(), Filter{Protocol: "udp", OrigDst: a.OrigDst.Addr(), OrigDstPort: 53, DstNAT: a.DstNAT.Addr()})
	if err != nil || n != 1 {
		t.Fatalf("Delete: %d, %v; want 1", n, err)
	}
	if got := f.Flows(); !slices.Equal(got, []Flow{b, c}) {
		t.Errorf("flows %v", got)
	}
	if _, err := f.Delete(context.Background(), Filter{}); err == nil {
		t.Error("Delete without a protocol: no error")
	}
}

// Netlink deletes UDP flows in a namespace, by destination and port and by
// the address they were DNATed to, and counts; no match is not an error.
func TestNetlink(t *testing.T) {
	netnstest.RequireRoot(t, "iptables")
	ns := netnstest.New(t)
	ns.AddAddr(t, "lo", netip.MustParsePrefix("198.19.0.1/32"))
	// A namespace tracks connections only once a rule needs it; the DNAT
	// makes one flow whose reply comes from another address.
	ns.AddAddr(t, "lo", netip.MustParsePrefix("198.19.0.2/32"))
	ns.Run(t, "iptables", "-t", "nat", "-A", "OUTPUT", "-d", "198.18.0.53", "-p", "udp", "-j", "DNAT", "--to-destination", "198.19.0.2:53")
	ns.Run(t, "ip", "route", "add", "198.18.0.0/16", "dev", "lo")
	var conns []net.Conn
	send := func(dst string) {
		t.Helper()
		if err := ns.Do(func() error {
			c, err := net.Dial("udp4", dst) // nobody listens: the flow exists anyway
			if err == nil {
				conns = append(conns, c)
				_, err = c.Write([]byte("x"))
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	send("198.19.0.1:9")
	send("198.18.0.53:53")
	del := func(f Filter) (n int, err error) {
		err = ns.Do(func() error { n, err = Netlink{}.Delete(context.Background(), f); return err })
		return n, err
	}
	if n, err := del(Filter{Protocol: "udp", OrigDst: netip.MustParseAddr("198.19.0.3")}); err != nil || n != 0 {
		t.Errorf("no match: %d, %v; want 0, nil", n, err)
	}
	if n, err := del(Filter{Protocol: "udp", OrigDst: netip.MustParseAddr("198.19.0.1"), OrigDstPort: 9}); err != nil || n != 1 {
		t.Errorf("by destination: %d, %v; want 1, nil", n, err)
	}
	if n, err := del(Filter{Protocol: "udp", OrigDstPort: 53, DstNAT: netip.MustParseAddr("198.19.0.3")}); err != nil || n != 0 {
		t.Errorf("DNATed elsewhere: %d, %v; want 0, nil", n, err)
	}
	if n, err := del(Filter{Protocol: "udp", OrigDst: netip.MustParseAddr("198.18.0.53"), OrigDstPort: 53, DstNAT: netip.MustParseAddr("198.19.0.2")}); err != nil || n != 1 {
		t.Errorf("by DNAT: %d, %v; want 1, nil", n, err)
	}
}

// The IPv6 table: a DNATed IPv6 flow is deleted by address, and a filter by
// port only deletes in the family it names, leaving the other family's flow.
func TestNetlinkIPv6(t *testing.T) {
	netnstest.RequireRoot(t, "iptables", "ip6tables")
	ns := netnstest.New(t)
	ns.AddAddr(t, "lo", netip.MustParsePrefix("2001:db8:19::2/128"))
	ns.AddAddr(t, "lo", netip.MustParsePrefix("198.19.0.2/32"))
	ns.Run(t, "ip6tables", "-t", "nat", "-A", "OUTPUT", "-d", "2001:db8:18::53", "-p", "udp", "-j", "DNAT", "--to-destination", "[2001:db8:19::2]:53")
	ns.Run(t, "iptables", "-t", "nat", "-A", "OUTPUT", "-d", "198.18.0.53", "-p", "udp", "-j", "DNAT", "--to-destination", "198.19.0.2:53")
	ns.Run(t, "ip", "-6", "route", "add", "2001:db8:18::/112", "dev", "lo")
	ns.Run(t, "ip", "route", "add", "198.18.0.0/16", "dev", "lo")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	send := func(network, dst string) {
		t.Helper()
		if err := ns.Do(func() error {
			c, err := net.Dial(network, dst)
			if err == nil {
				conns = append(conns, c)
				_, err = c.Write([]byte("x"))
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	del := func(f Filter) (n int, err error) {
		err = ns.Do(func() error { n, err = Netlink{}.Delete(context.Background(), f); return err })
		return n, err
	}
	send("udp6", "[2001:db8:18::53]:53")
	send("udp4", "198.18.0.53:53")
	if n, err := del(Filter{Protocol: "udp", OrigDst: netip.MustParseAddr("2001:db8:18::53"), OrigDstPort: 53, DstNAT: netip.MustParseAddr("2001:db8:19::2")}); err != nil || n != 1 {
		t.Errorf("IPv6 by DNAT: %d, %v; want 1, nil", n, err)
	}
	send("udp6", "[2001:db8:18::53]:53")
	if n, err := del(Filter{Protocol: "udp", OrigDstPort: 53, Family: IPv6}); err != nil || n != 1 {
		t.Errorf("IPv6 by port: %d, %v; want 1 (the IPv4 flow stays), nil", n, err)
	}
	if n, err := del(Filter{Protocol: "udp", OrigDstPort: 53, Family: IPv4}); err != nil || n != 1 {
		t.Errorf("IPv4 by port: %d, %v; want the IPv4 flow, nil", n, err)
	}
	if _, err := del(Filter{Protocol: "udp", OrigDst: netip.MustParseAddr("198.18.0.53"), Family: IPv6}); err == nil {
		t.Error("an IPv4 address with Family IPv6: want an error")
	}
}

// DeleteStale deletes a frontend's and a node port's entries that did not go
// to one of their endpoints, in the family it names, and nothing else.
func TestFakeDeleteStale(t *testing.T) {
	flow := func(dst, nat string) Flow {
		return Flow{Protocol: "udp", Src: netip.MustParseAddrPort("198.19.1.50:5000"), OrigDst: netip.MustParseAddrPort(dst), DstNAT: netip.MustParseAddrPort(nat)}
	}
	live := flow("198.18.0.53:53", "198.19.1.10:53")
	gone := flow("198.18.0.53:53", "198.19.1.11:53")
	redirected := flow("198.18.0.53:53", "198.19.0.1:40000")
	neverNATed := flow("198.18.0.53:53", "198.18.0.53:53")
	otherPort := flow("198.18.0.53:5353", "198.19.1.11:53")
	nodePortGone := flow("198.19.0.1:30053", "198.19.1.11:53")
	nodePortLive := flow("198.19.0.1:30053", "198.19.1.10:53")
	tcp := gone
	tcp.Protocol = "tcp"
	v6 := flow("[2001:db8:18::53]:53", "[2001:db8:19::11]:53")
	f := NewFake(live, gone, redirected, neverNATed, otherPort, nodePortGone, nodePortLive, tcp, v6)
	eps := []netip.Addr{netip.MustParseAddr("198.19.1.10")}
	s := Stale{Family: IPv4,
		Frontends: map[netip.AddrPort][]netip.Addr{netip.MustParseAddrPort("198.18.0.53:53"): eps},
		NodePorts: map[uint16][]netip.Addr{30053: eps}}
	n, err := f.DeleteStale(context.Background(), s)
	if err != nil || n != 4 {
		t.Fatalf("DeleteStale: %d, %v; want 4, nil", n, err)
	}
	if got, want := f.Flows(), []Flow{live, otherPort, nodePortLive, tcp, v6}; !slices.Equal(got, want) {
		t.Errorf("flows left %v, want %v", got, want)
	}
	if _, err := f.DeleteStale(context.Background(), Stale{}); err == nil {
		t.Error("DeleteStale without a family: no error")
	}
	if _, err := f.DeleteStale(context.Background(), Stale{Family: IPv4, NodePorts: map[uint16][]netip.Addr{30053: nil}}); err == nil {
		t.Error("DeleteStale of a node port without endpoints (every entry to that port): no error")
	}
	s.Family = IPv6
	if _, err := f.DeleteStale(context.Background(), s); err == nil {
		t.Error("DeleteStale of IPv4 frontends in the IPv6 table: no error")
	}
}

// A frontend without endpoints selects every UDP entry sent to it: the entry
// DNATed to its last endpoint (kubernetes#139629) and one never DNATed.
func TestFakeDeleteStaleWithoutEndpoints(t *testing.T) {
	flow := func(sport uint16, dst, nat string) Flow {
		return Flow{Protocol: "udp", Src: netip.AddrPortFrom(netip.MustParseAddr("198.19.1.50"), sport), OrigDst: netip.MustParseAddrPort(dst), DstNAT: netip.MustParseAddrPort(nat)}
	}
	toDeleted := flow(5000, "198.18.0.53:53", "198.19.1.10:53")
	neverNATed := flow(5001, "198.18.0.53:53", "198.18.0.53:53")
	otherPort := flow(5002, "198.18.0.53:5353", "198.19.1.10:5353")
	nodePort := flow(5003, "198.19.0.1:30053", "198.19.1.10:53")
	f := NewFake(toDeleted, neverNATed, otherPort, nodePort)
	s := Stale{Family: IPv4, Frontends: map[netip.AddrPort][]netip.Addr{netip.MustParseAddrPort("198.18.0.53:53"): nil}}
	n, err := f.DeleteStale(context.Background(), s)
	if err != nil || n != 2 {
		t.Fatalf("DeleteStale: %d, %v; want 2, nil", n, err)
	}
	if got, want := f.Flows(), []Flow{otherPort, nodePort}; !slices.Equal(got, want) {
		t.Errorf("flows left %v, want %v", got, want)
	}
}

// The kernel's table: flows sent to one frontend from different source ports
// are DNATed to an endpoint, to an address that is not one, REDIRECTed to a
// local port, or sent to the node port, and one is DNATed to the last endpoint
// of a frontend that has none now; DeleteStale leaves the endpoint's flow and
// the flow to another address, and deletes the rest.
func TestNetlinkDeleteStale(t *testing.T) {
	netnstest.RequireRoot(t, "iptables")
	ns := netnstest.New(t)
	for _, a := range []string{"198.19.0.1/32", "198.19.0.2/32", "198.19.0.3/32"} {
		ns.AddAddr(t, "lo", netip.MustParsePrefix(a))
	}
	ns.Run(t, "ip", "route", "add", "198.18.0.0/16", "dev", "lo")
	for _, r := range [][]string{
		{"--sport", "5001", "-j", "DNAT", "--to-destination", "198.19.0.2:53"},
		{"--sport", "5002", "-j", "DNAT", "--to-destination", "198.19.0.3:53"},
		{"--sport", "5003", "-j", "REDIRECT", "--to-ports", "10053"},
	} {
		ns.Run(t, "iptables", append([]string{"-t", "nat", "-A", "OUTPUT", "-d", "198.18.0.53", "-p", "udp", "--dport", "53"}, r...)...)
	}
	// 198.18.0.54's endpoint went away: the port has none now.
	ns.Run(t, "iptables", "-t", "nat", "-A", "OUTPUT", "-d", "198.18.0.54", "-p", "udp", "-j", "DNAT", "--to-destination", "198.19.0.2:53")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	send := func(sport int, dst string) {
		t.Helper()
		if err := ns.Do(func() error {
			c, err := net.DialUDP("udp4", &net.UDPAddr{Port: sport}, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(dst)))
			if err == nil {
				conns = append(conns, c)
				_, err = c.Write([]byte("x"))
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	send(5001, "198.18.0.53:53")   // to the endpoint: stays
	send(5002, "198.18.0.53:53")   // to an address that is no endpoint: deleted
	send(5003, "198.18.0.53:53")   // REDIRECTed, as the userspace mode does: deleted
	send(5004, "198.19.0.1:30053") // the node port, not NATed: deleted
	send(5005, "198.19.0.1:9")     // neither: stays
	send(5006, "198.18.0.54:53")   // to the last endpoint of a port without endpoints now: deleted
	eps := []netip.Addr{netip.MustParseAddr("198.19.0.2")}
	s := Stale{Family: IPv4,
		Frontends: map[netip.AddrPort][]netip.Addr{netip.MustParseAddrPort("198.18.0.53:53"): eps, netip.MustParseAddrPort("198.18.0.54:53"): nil},
		NodePorts: map[uint16][]netip.Addr{30053: eps}}
	var n int
	err := ns.Do(func() (err error) { n, err = Netlink{}.DeleteStale(context.Background(), s); return err })
	if err != nil || n != 4 {
		t.Errorf("DeleteStale: %d, %v; want 4, nil", n, err)
	}
	// What is left: deleting by destination finds the two flows that stayed.
	for _, f := range []Filter{
		{Protocol: "udp", OrigDst: netip.MustParseAddr("198.18.0.53"), DstNAT: netip.MustParseAddr("198.19.0.2")},
		{Protocol: "udp", OrigDst: netip.MustParseAddr("198.19.0.1"), OrigDstPort: 9},
	} {
		err := ns.Do(func() (err error) { n, err = Netlink{}.Delete(context.Background(), f); return err })
		if err != nil || n != 1 {
			t.Errorf("after DeleteStale, %s: %d, %v; want the flow that stayed", f, n, err)
		}
	}
	err = ns.Do(func() (err error) { n, err = Netlink{}.DeleteStale(context.Background(), s); return err })
	if err != nil || n != 0 {
		t.Errorf("DeleteStale again: %d, %v; want 0, nil", n, err)
	}
}
