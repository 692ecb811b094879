package userspace

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/svcproxy/svcproxy/service"
)

// udpListener serves the UDP datagrams of one service port. UDP has no
// connections, so the listener makes sessions: one per client address, each with
// its own socket connected to the endpoint the Balancer chose, closed after
// Config.UDPIdleTimeout of silence in both directions (kube-proxy's --udp-timeout).
type udpListener struct {
	conn *net.UDPConn
	pc   *ipv4.PacketConn // conn, with IP_PKTINFO: the address each datagram was sent to
	sp   *servicePort

	mu       sync.Mutex
	sessions map[netip.AddrPort]*udpSession
}

// udpSession is one client address talking to one endpoint.
type udpSession struct {
	client   netip.AddrPort
	local    net.IP // where the client's datagrams arrived: replies leave from there
	endpoint netip.AddrPort
	backend  *net.UDPConn
}

func (s *udpSession) Close() error { return s.backend.Close() }

func (p *Proxier) newUDPListener(sp *servicePort, addr netip.AddrPort) (*udpListener, error) {
	var conn *net.UDPConn
	err := p.cfg.NetNS(func() (err error) {
		conn, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(addr))
		return err
	})
	if err != nil {
		return nil, err
	}
	pc := ipv4.NewPacketConn(conn)
	if err := pc.SetControlMessage(ipv4.FlagDst, true); err != nil {
		conn.Close()
		return nil, err
	}
	return &udpListener{conn: conn, pc: pc, sp: sp, sessions: make(map[netip.AddrPort]*udpSession)}, nil
}

func (l *udpListener) port() uint16 { return uint16(l.conn.LocalAddr().(*net.UDPAddr).Port) }
func (l *udpListener) close()       { l.conn.Close() }

func (l *udpListener) start(p *Proxier) { p.wg.Go(func() { p.serveUDP(l) }) }

// serveUDP reads client datagrams until the listener is closed and forwards each
// to its session's endpoint, opening a session for a new client address. When it
// returns, every session of the listener is closed: their replies could not leave.
func (p *Proxier) serveUDP(l *udpListener) {
	defer l.closeSessions()
	buf := make([]byte, 64<<10)
	for {
		n, cm, src, err := l.pc.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil || cm == nil {
			continue
		}
		p.forwardUDP(l, src.(*net.UDPAddr).AddrPort(), cm.Dst, buf[:n])
	}
}

// forwardUDP sends one client datagram to its session's endpoint.
func (p *Proxier) forwardUDP(l *udpListener, client netip.AddrPort, local net.IP, b []byte) {
	for range 2 { // a second time if the session ended (idle) as we took it
		s := l.session(client)
		if s == nil {
			if s = p.openSession(l, client, local); s == nil {
				return // no endpoint: the datagram is dropped
			}
		}
		s.backend.SetReadDeadline(time.Now().Add(p.cfg.UDPIdleTimeout))
		_, err := s.backend.Write(b)
		if err == nil {
			l.sp.counters.fromClients.Add(uint64(len(b)))
			return
		}
		s.Close()
		l.forget(s)
		if !errors.Is(err, net.ErrClosed) {
			// The endpoint refused an earlier datagram (ICMP port unreachable):
			// the next datagram gets another endpoint.
			l.sp.counters.dialFailures.Add(1)
			p.balancer.Reset(l.sp.name, client.Addr().Unmap())
			return
		}
	}
}

func (l *udpListener) session(client netip.AddrPort) *udpSession {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sessions[client]
}

// openSession picks an endpoint for client, connects a socket to it and starts
// the goroutine that carries its replies back. It returns nil if there is no
// endpoint or it cannot be reached.
func (p *Proxier) openSession(l *udpListener, client netip.AddrPort, local net.IP) *udpSession {
	sp := l.sp
	ep, err := p.balancer.Pick(sp.name, client.Addr().Unmap())
	if err != nil {
		return nil
	}
	if !p.fds.take(1) {
		p.fdExhausted("UDP session", nil)
		return nil
	}
	err = p.self.Load().check(service.UDP, ep)
	var conn net.Conn
	if err == nil {
		conn, err = p.dial("udp", ep, p.cfg.DialTimeouts[0])
	}
	if err != nil {
		p.fds.give(1)
		if isFDExhaustion(err) {
			p.fdExhausted("UDP session", err)
		}
		sp.counters.dialFailures.Add(1)
		p.balancer.Reset(sp.name, client.Addr().Unmap())
		return nil
	}
	s := &udpSession{client: client, local: local, endpoint: ep, backend: conn.(*net.UDPConn)}
	if !sp.track(s, ep) {
		s.Close()
		p.fds.give(1)
		return nil
	}
	l.mu.Lock()
	l.sessions[client] = s
	l.mu.Unlock()
	sp.counters.connOpened()
	p.wg.Go(func() { p.udpReplies(l, s) })
	return s
}

// udpReplies copies the endpoint's datagrams back to the client until the session
// has been idle for the timeout, or is closed. Replies are written on the listener
// socket, from the address the client wrote to: conntrack then recognises them
// as replies of the REDIRECTed flow and rewrites their source back to the
// Service's address, which is the only one the client accepts.
func (p *Proxier) udpReplies(l *udpListener, s *udpSession) {
	defer p.endSession(l, s)
	buf := make([]byte, 64<<10)
	client := net.UDPAddrFromAddrPort(s.client)
	cm := &ipv4.ControlMessage{Src: s.local}
	for {
		s.backend.SetReadDeadline(time.Now().Add(p.cfg.UDPIdleTimeout))
		n, err := s.backend.Read(buf)
		if err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				if !errors.Is(err, net.ErrClosed) { // refused: the endpoint is not there
					l.sp.counters.dialFailures.Add(1)
					p.balancer.Reset(l.sp.name, s.client.Addr().Unmap())
				}
			}
			return
		}
		if _, err := l.pc.WriteTo(buf[:n], cm, client); err != nil {
			return
		}
		l.sp.counters.toClients.Add(uint64(n))
	}
}

func (p *Proxier) endSession(l *udpListener, s *udpSession) {
	s.Close()
	p.fds.give(1)
	l.sp.untrack(s)
	l.forget(s)
	l.sp.counters.connClosed()
}

// forget removes s from the session table, unless a newer session took its place.
func (l *udpListener) forget(s *udpSession) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sessions[s.client] == s {
		delete(l.sessions, s.client)
	}
}

func (l *udpListener) closeSessions() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.sessions {
		s.Close()
	}
}
