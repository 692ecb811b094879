package dnsresolve

import (
	"net"
	"net/netip"
	"sync"
	"time"
	"unsafe"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// This file is the UDP socket as miekg/dns's server reads and writes it.
//
// Given a *net.UDPConn, the server reads each query into a SessionUDP: a
// fresh buffer for the control message that says which of the host's
// addresses the query was sent to, the client's *net.UDPAddr, and the
// session itself; each answer then parses that control message again
// (golang.org/x/net) to write one that sends it from the same address.
// Those were 13 of the 21 allocations a query cost (TestAllocsPerQuery),
// while the handler allocated none. Given any other net.PacketConn, the server asks its Reader
// for the query and a net.Addr, and hands that net.Addr back to WriteTo
// with the answer: udpConn is that PacketConn and udpReader that Reader.
// A query is read into a pooled udpSession, the buffer and both addresses
// in one, which the handler returns to the pool once it has answered
// (Server.ServeDNS); a socket bound to one address reads no control
// message at all, since its answers can only leave from that address.

// udpConn is the server's UDP socket, no longer a *net.UDPConn to
// miekg/dns's server, so that it reads through udpReader.
type udpConn struct {
	*net.UDPConn
	// pktinfo: the socket is bound to every address of the host, and
	// queries come with the address they were sent to (IP_PKTINFO,
	// IPV6_PKTINFO), which their answers are sent from: a client
	// drops an answer from another address than the one it asked.
	pktinfo bool

	mu   sync.RWMutex
	oobs map[netip.Addr][]byte // the control message that sends from each address
}

// newUDPConn returns c as miekg/dns's server is to read it, asking the
// kernel for each query's destination address when c is bound to every
// address. As miekg/dns does, it asks for both families (an IPv6 socket
// also receives IPv4) and fails only when neither can be set.
func newUDPConn(c *net.UDPConn) (*udpConn, error) {
	u := &udpConn{UDPConn: c}
	if ap, err := netip.ParseAddrPort(c.LocalAddr().String()); err != nil || !ap.Addr().IsUnspecified() {
		return u, nil
	}
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var err4, err6 error
	if err := raw.Control(func(fd uintptr) {
		err4 = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
		err6 = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
	}); err != nil {
		return nil, err
	}
	if err4 != nil && err6 != nil {
		return nil, err4
	}
	u.pktinfo = true
	return u, nil
}

// udpSession is one query read from the socket: its bytes, its client and
// the address it was sent to. It is the net.Addr miekg/dns's server hands
// to WriteTo, and the ResponseWriter's RemoteAddr.
type udpSession struct {
	remote netip.AddrPort
	local  netip.Addr // invalid: the socket's own address
	buf    [serverUDPSize]byte
	// oob holds both control messages (72 bytes on Linux): an IPv6
	// socket may receive an IPv4 query with both.
	oob [128]byte
}

func (s *udpSession) Network() string { return "udp" }

// String is the client's address, an IPv4 one without its IPv6 mapping
// (as a *net.UDPAddr prints it).
func (s *udpSession) String() string {
	return netip.AddrPortFrom(s.remote.Addr().Unmap(), s.remote.Port()).String()
}

var udpSessions = sync.Pool{New: func() any { return new(udpSession) }}

// release returns s to the pool: the handler has answered, and nothing
// reads the query's bytes any more.
func (s *udpSession) release() {
	s.local = netip.Addr{}
	udpSessions.Put(s)
}

// udpReader reads queries into udpSessions: miekg/dns's server's Reader
// (TCP keeps the server's own, embedded) for a socket that is a udpConn.
type udpReader struct{ dns.Reader }

// ReadPacketConn reads one query. It sets no read deadline, where
// miekg/dns's own Reader sets one per read: the server's shutdown sets one
// in the past to end the read, and one set here after it (miekg/dns orders
// the two under a lock of its own) would keep the shutdown waiting.
func (udpReader) ReadPacketConn(pc net.PacketConn, _ time.Duration) ([]byte, net.Addr, error) {
	c := pc.(*udpConn)
	s := udpSessions.Get().(*udpSession)
	var oob []byte
	if c.pktinfo {
		oob = s.oob[:]
	}
	n, oobn, _, remote, err := c.ReadMsgUDPAddrPort(s.buf[:], oob)
	if err != nil {
		udpSessions.Put(s)
		return nil, nil, err
	}
	s.remote = remote
	if c.pktinfo {
		s.local = destination(oob[:oobn])
	}
	// The slice's capacity is the buffer's, serverUDPSize, and not the
	// server's UDPSize (Serve): miekg/dns leaves it to us.
	return s.buf[:n], s, nil
}

// Offsets of the destination address in the two control messages (struct
// in_pktinfo's ipi_addr, struct in6_pktinfo's ipi6_addr).
var (
	pktinfo4Addr = int(unsafe.Offsetof(unix.Inet4Pktinfo{}.Addr))
	pktinfo6Addr = int(unsafe.Offsetof(unix.Inet6Pktinfo{}.Addr))
)

// destination is the address a query was sent to, from its control
// messages; the invalid Addr when they do not say.
func destination(oob []byte) netip.Addr {
	for len(oob) > 0 {
		h, data, rest, err := unix.ParseOneSocketControlMessage(oob)
		if err != nil {
			break
		}
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			return netip.AddrFrom4([4]byte(data[pktinfo4Addr : pktinfo4Addr+4]))
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			return netip.AddrFrom16([16]byte(data[pktinfo6Addr : pktinfo6Addr+16])).Unmap()
		}
		oob = rest
	}
	return netip.Addr{}
}

// WriteTo sends an answer to the client of the query it answers, from the
// address that query was sent to.
func (c *udpConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	s, ok := addr.(*udpSession)
	if !ok {
		return c.UDPConn.WriteTo(b, addr)
	}
	n, _, err := c.WriteMsgUDPAddrPort(b, c.sourceOOB(s.local), s.remote)
	return n, err
}

// maxSourceOOBs bounds the control messages kept: one per address of the
// host that queries come to (all of 127.0.0.0/8 is one host's).
const maxSourceOOBs = 64

// sourceOOB returns the control message that sends from local (nil for
// the invalid Addr: the socket's own address), made once per address.
func (c *udpConn) sourceOOB(local netip.Addr) []byte {
	if !local.IsValid() {
		return nil
	}
	c.mu.RLock()
	oob, ok := c.oobs[local]
	c.mu.RUnlock()
	if ok {
		return oob
	}
	if local.Is4() {
		oob = unix.PktInfo4(&unix.Inet4Pktinfo{Spec_dst: local.As4()})
	} else {
		oob = unix.PktInfo6(&unix.Inet6Pktinfo{Addr: local.As16()})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.oobs == nil {
		c.oobs = make(map[netip.Addr][]byte)
	}
	if len(c.oobs) < maxSourceOOBs {
		c.oobs[local] = oob
	}
	return oob
}

// isUDP reports whether a is the client of a UDP query: as the server
// read it into a udpSession, or as another ResponseWriter gives it.
func isUDP(a net.Addr) bool {
	switch a.(type) {
	case *udpSession, *net.UDPAddr:
		return true
	}
	return false
}
