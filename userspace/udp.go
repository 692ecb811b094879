package userspace

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/service"
)

// udpListener serves the UDP datagrams of one service port. UDP has no
// connections, so the listener makes sessions: one per client address, each with
// its own socket connected to the endpoint the Balancer chose, ended after
// Config.UDPIdleTimeout of silence in both directions (kube-proxy's
// --udp-timeout), or to make room when the listener holds
// Config.UDPMaxSessions (the one idle longest goes).
//
// Three goroutines serve it, whatever the number of sessions:
//
//   - serveUDP reads the clients' datagrams and writes each to its session's
//     socket; it never waits for anything but the next datagram, so that the
//     listener's receive buffer does not overflow while a session is set up;
//   - openSessions makes the sockets of new sessions (a Balancer pick, a
//     socket, a connect) and sends what their clients sent meanwhile;
//   - serveReplies waits for the endpoints' replies on every session socket at
//     once (epoll) and writes them back through the listener socket; it also
//     ends idle sessions.
//
// A goroutine per session (what kube-proxy did) costs a stack and a buffer per
// client address; 20,000 clients of a DNS Service made 160 MiB of them.
// Here a session is a socket and a few hundred bytes.
type udpListener struct {
	conn     *net.UDPConn
	sp       *servicePort
	external bool // the node port's: externalTrafficPolicy applies
	fds      *fdBudget

	sessions *sessionTable
	opens    chan *udpSession // new sessions, from serveUDP to openSessions
	replies  *replyLoop
	closed   atomic.Bool
}

func (p *Proxier) newUDPListener(sp *servicePort, addr netip.AddrPort, external bool) (*udpListener, error) {
	var conn *net.UDPConn
	err := p.cfg.NetNS(func() (err error) {
		conn, err = net.ListenUDP(p.network("udp"), net.UDPAddrFromAddrPort(addr))
		return err
	})
	if err != nil {
		return nil, err
	}
	// IP_PKTINFO (IPV6_PKTINFO): each datagram says the address it was sent
	// to, so that the replies can leave from it.
	if err := setPacketInfo(conn, p.cfg.Family); err != nil {
		conn.Close()
		return nil, err
	}
	replies, err := newReplyLoop()
	if err != nil {
		conn.Close()
		return nil, err
	}
	l := &udpListener{
		conn:     conn,
		sp:       sp,
		external: external,
		fds:      p.fds,
		// Room for a burst of new clients while a few sessions are set up; beyond
		// it a new client's first datagram is dropped (it will retry), never the
		// listener's read loop blocked.
		opens:   make(chan *udpSession, 1024),
		replies: replies,
	}
	l.sessions = newSessionTable(l, p.cfg.UDPMaxSessions, p.cfg.UDPIdleTimeout)
	return l, nil
}

func (l *udpListener) port() uint16 { return uint16(l.conn.LocalAddr().(*net.UDPAddr).Port) }

func (l *udpListener) close() {
	l.closed.Store(true)
	l.conn.Close()
}

// start runs the three goroutines; they end, and every session with them, once
// the listener is closed: the reader first, then the opener (it drains what the
// reader handed over), then the replies loop, which ends the sessions.
func (l *udpListener) start(p *Proxier) {
	p.wg.Go(func() { p.serveUDP(l) })
	p.wg.Go(func() { p.openSessions(l) })
	p.wg.Go(func() { p.serveReplies(l) })
}

// serveUDP reads client datagrams until the listener is closed and forwards each
// to its session, making a new session for a new client address.
func (p *Proxier) serveUDP(l *udpListener) {
	defer close(l.opens)
	buf := make([]byte, maxDatagram)
	oob := make([]byte, packetInfoSpace)
	for {
		n, oobn, _, client, err := l.conn.ReadMsgUDPAddrPort(buf, oob)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		local, ok := parsePacketInfo(oob[:oobn], p.cfg.Family)
		if !ok {
			continue
		}
		p.forwardUDP(l, client, local, buf[:n])
	}
}

// maxDatagram is the largest UDP payload over IPv6 (without jumbograms); over
// IPv4 it is 20 bytes less.
const maxDatagram = 65527

// forwardUDP sends one client datagram to its session's endpoint, or queues it
// for a session being opened.
func (p *Proxier) forwardUDP(l *udpListener, client netip.AddrPort, local localAddr, b []byte) {
	now := time.Now()
	for range 2 { // a second time if the session ended as we took it
		s, isNew, evicted := l.sessions.getOrAdd(client, now)
		if evicted != nil {
			l.endSession(evicted, true)
		}
		if isNew {
			s.local = local
			s.queue(b)
			select {
			case l.opens <- s:
			default: // too many sessions being opened: drop, the client retries
				l.endSession(s, true)
			}
			return
		}
		sent, err := s.send(b, now)
		if err == nil {
			if sent {
				l.sp.counters.fromClients.Add(uint64(len(b)))
			}
			return
		}
		if !errors.Is(err, errSessionEnded) {
			// The endpoint refused an earlier datagram (ICMP port unreachable):
			// the next datagram gets another endpoint.
			l.sp.counters.dialFailures.Add(1)
			clientIP := client.Addr().Unmap()
			p.pickFrom(l.sp, l.external, clientIP).Reset(l.sp.name, clientIP)
			l.endSession(s, true)
			return
		}
	}
}

// openSessions opens the sessions serveUDP hands over, until the listener is
// closed.
func (p *Proxier) openSessions(l *udpListener) {
	defer l.replies.stop()
	for s := range l.opens {
		if l.closed.Load() {
			l.endSession(s, true)
			continue
		}
		if err := p.openSession(l, s); err != nil {
			l.endSession(s, true) // its queued datagrams are dropped; the next one tries again
		}
	}
}

// openSession picks an endpoint for s, connects a socket to it, registers it
// with the replies loop, and sends what the client sent meanwhile.
func (p *Proxier) openSession(l *udpListener, s *udpSession) error {
	sp := l.sp
	clientIP := s.client.Addr().Unmap()
	b := p.pickFrom(sp, l.external, clientIP)
	ep, err := b.Pick(sp.name, clientIP)
	if err != nil {
		return err
	}
	if err := p.self.Load().check(service.UDP, ep); err != nil {
		sp.counters.dialFailures.Add(1)
		b.Reset(sp.name, clientIP)
		return err
	}
	if !p.fds.take(1) && !l.makeRoom() {
		p.fdExhausted("UDP session", nil)
		return errFDBudget
	}
	fd, err := p.udpSocket(ep)
	if err != nil {
		p.fds.give(1)
		if isFDExhaustion(err) {
			p.fdExhausted("UDP session", err)
		}
		sp.counters.dialFailures.Add(1)
		b.Reset(sp.name, clientIP)
		return err
	}
	if !sp.track(s, ep) { // the endpoint left while we picked it
		unix.Close(fd)
		p.fds.give(1)
		return errSessionEnded
	}
	sent, err := s.open(fd, ep, l.replies)
	if err != nil { // ended meanwhile (evicted, or its endpoint left)
		unix.Close(fd)
		p.fds.give(1)
		sp.untrack(s)
		return err
	}
	sp.counters.connOpened()
	sp.counters.fromClients.Add(uint64(sent))
	return nil
}

var errFDBudget = errors.New("file descriptor budget spent")

// udpSocket makes a non-blocking UDP socket in the proxier's namespace,
// connected to ep: it then receives only ep's datagrams, and an ICMP port
// unreachable from ep fails the next read or write with ECONNREFUSED.
func (p *Proxier) udpSocket(ep netip.AddrPort) (int, error) {
	var family int
	var sa unix.Sockaddr
	if a := ep.Addr().Unmap(); a.Is4() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Addr: a.As4(), Port: int(ep.Port())}
	} else {
		family, sa = unix.AF_INET6, &unix.SockaddrInet6{Addr: a.As16(), Port: int(ep.Port())}
	}
	var fd int
	err := p.cfg.NetNS(func() (err error) {
		fd, err = unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return -1, err
	}
	if err := unix.Connect(fd, sa); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// makeRoom ends the listener's idlest session to take its file descriptor, as
// when the listener holds UDPMaxSessions: idle sessions must not keep new
// clients out. It reports whether it got one.
func (l *udpListener) makeRoom() bool {
	for range 2 { // another session may take the descriptor first
		victim := l.sessions.takeIdlest()
		if victim == nil {
			return false
		}
		l.endSession(victim, true)
		if l.fds.take(1) {
			return true
		}
	}
	return false
}

// endSession ends s (it may already have ended) and forgets it: in the table,
// and, when untrack, in its service port's sessions (Close, called by the
// service port itself, does not).
func (l *udpListener) endSession(s *udpSession, untrack bool) {
	l.sessions.remove(s)
	if s.end(l.replies) {
		l.fds.give(1)
		l.sp.counters.connClosed()
	}
	if untrack {
		l.sp.untrack(s)
	}
}

// datagramPool holds the buffers of datagrams queued while their session
// opens: most datagrams are small, and a session opens in microseconds, so a
// few pooled buffers serve every new client.
var datagramPool = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}
