package userspace

import (
	"net"
	"net/netip"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/svcproxy/svcproxy/service"
)

// A UDP listener is bound to the wildcard address, and a client wrote to a
// Service's address that a portal REDIRECTed to one of the node's own (the
// address of the interface the datagram came in on, or 127.0.0.1 or ::1 for
// the node's own datagrams). A reply must leave from that very address, or
// conntrack cannot turn its source back into the Service's and the client
// drops it. The packet info of each datagram (IP_PKTINFO, IPV6_PKTINFO)
// says where it arrived; the replies carry it back as their source.

// localAddr is where a client's datagram arrived.
type localAddr struct {
	addr netip.Addr
	// ifIndex is the interface it came in on, kept for an IPv6 link-local
	// address only: such an address means nothing without its link.
	ifIndex int
}

// packetInfoSpace is room for the packet info of either family.
var packetInfoSpace = max(len(ipv4.NewControlMessage(ipv4.FlagDst)), len(ipv6.NewControlMessage(ipv6.FlagDst|ipv6.FlagInterface)))

// setPacketInfo asks the kernel for the packet info of every datagram conn
// receives.
func setPacketInfo(conn *net.UDPConn, fam service.Family) error {
	if fam == service.IPv6 {
		return ipv6.NewPacketConn(conn).SetControlMessage(ipv6.FlagDst|ipv6.FlagInterface, true)
	}
	return ipv4.NewPacketConn(conn).SetControlMessage(ipv4.FlagDst, true)
}

// parsePacketInfo returns where a datagram arrived, from its control messages.
func parsePacketInfo(oob []byte, fam service.Family) (localAddr, bool) {
	var dst net.IP
	var ifIndex int
	if fam == service.IPv6 {
		var cm ipv6.ControlMessage
		if cm.Parse(oob) != nil {
			return localAddr{}, false
		}
		dst, ifIndex = cm.Dst, cm.IfIndex
	} else {
		var cm ipv4.ControlMessage
		if cm.Parse(oob) != nil {
			return localAddr{}, false
		}
		dst = cm.Dst
	}
	a, ok := netip.AddrFromSlice(dst)
	if !ok {
		return localAddr{}, false
	}
	a = a.Unmap()
	if !a.IsLinkLocalUnicast() || !a.Is6() {
		ifIndex = 0
	}
	return localAddr{addr: a, ifIndex: ifIndex}, true
}

// replyInfo is the control message that makes a reply leave from l.
func (l localAddr) replyInfo() []byte {
	if l.addr.Is4() {
		return (&ipv4.ControlMessage{Src: l.addr.AsSlice()}).Marshal()
	}
	return (&ipv6.ControlMessage{Src: l.addr.AsSlice(), IfIndex: l.ifIndex}).Marshal()
}
