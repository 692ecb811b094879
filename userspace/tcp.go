package userspace

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/service"
)

// tcpListener accepts the connections of one service port: those the portals
// redirect to it, or those sent to a node port.
type tcpListener struct {
	ln       *net.TCPListener
	sp       *servicePort
	external bool // the node port's: externalTrafficPolicy applies
}

// Keep-alive of the client side of every proxied connection: Go's defaults
// (net's defaultTCPKeepAlive*: 15s idle, then 15s between probes, 9 probes),
// which kube-proxy's userspace proxier got from net.Listen. A client that
// vanished without a FIN is found within about 2.5 minutes, and its
// connection (both sockets) ends.
const (
	keepAliveIdle     = 15 // seconds
	keepAliveInterval = 15 // seconds
	keepAliveCount    = 9
)

// listenTCP binds the listener of a service port.
//
// Keep-alive is set on the listening socket, once: Linux copies a listening
// socket's options into each socket it accepts (SO_KEEPALIVE and the three
// TCP_KEEP* values included; TestAcceptedSocketsInheritKeepAlive checks it),
// so the accepted connections have it without four setsockopt calls each,
// which net.TCPListener would otherwise make for every connection (a tenth of
// the proxy's CPU per new connection, in bench/userspace's profile).
func listenTCP(addr netip.AddrPort) (*net.TCPListener, error) {
	network := "tcp4"
	if addr.Addr().Is6() && !addr.Addr().Is4In6() {
		network = "tcp6"
	}
	lc := net.ListenConfig{
		KeepAlive: -1, // inherited from the listener, see above
		Control: func(_, _ string, rc syscall.RawConn) error {
			var err error
			cerr := rc.Control(func(fd uintptr) { err = setKeepAlive(int(fd)) })
			return errors.Join(cerr, err)
		},
	}
	ln, err := lc.Listen(context.Background(), network, addr.String())
	if err != nil {
		return nil, err
	}
	return ln.(*net.TCPListener), nil
}

func setKeepAlive(fd int) error {
	for _, o := range []struct{ level, name, value int }{
		{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
		{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, keepAliveIdle},
		{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, keepAliveInterval},
		{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, keepAliveCount},
	} {
		if err := unix.SetsockoptInt(fd, o.level, o.name, o.value); err != nil {
			return fmt.Errorf("setsockopt keep-alive: %w", err)
		}
	}
	return nil
}

func (l *tcpListener) port() uint16 { return uint16(l.ln.Addr().(*net.TCPAddr).Port) }
func (l *tcpListener) close()       { l.ln.Close() }

// serveTCP accepts until the listener is closed, and hands each connection to
// an idle dialler, or to a new one when none is idle.
// A connection is registered before its goroutine starts; once Shutdown has
// begun, or when the file descriptor budget is spent, it is reset instead.
func (p *Proxier) serveTCP(l *tcpListener) {
	var delay time.Duration
	for {
		client, err := l.ln.AcceptTCP()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			if isFDExhaustion(err) {
				p.fdExhausted("accept", err)
			}
			// Back off as net/http does (5ms doubling to 1s) instead of
			// spinning: the connection waits in the backlog meanwhile.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(delay):
			case <-p.ctx.Done():
				return
			}
			continue
		}
		delay = 0
		if !p.fds.take(2) { // the client's socket and the endpoint's
			reset(client)
			p.fdExhausted("connection", nil)
			continue
		}
		c := &tcpConn{client: client, sp: l.sp, external: l.external}
		if !p.conns.add(c) {
			c.abort() // shutting down
			p.fds.give(2)
			continue
		}
		select {
		case p.dialq <- c: // an idle dialler takes it
		default:
			p.wg.Go(func() { p.dialler(c) })
		}
	}
}

// dialler runs proxyTCP for c, then waits for the next connection that
// serveTCP hands over, until it has waited diallerIdle for one.
//
// Why not a new goroutine per connection: net.Dialer.DialContext runs about
// 3 KiB deep, so a fresh goroutine (its stack starts at 2 KiB) grows its stack
// twice on every dial, and growing a stack (runtime.newstack copies it and
// adjusts every frame) cost up to a tenth of the proxy's CPU per new
// connection in bench/userspace's profile. A dialler keeps the stack it grew
// while connections keep coming, and ends when they stop: no goroutine and no
// grown stack stays behind under idle connections.
func (p *Proxier) dialler(c *tcpConn) {
	idle := time.NewTimer(diallerIdle)
	defer idle.Stop()
	for {
		p.proxyTCP(c)
		idle.Reset(diallerIdle)
		select {
		case c = <-p.dialq:
		case <-idle.C:
			return
		case <-p.ctx.Done():
			return
		}
	}
}

// diallerIdle is how long a dialler waits for the next connection.
const diallerIdle = time.Second

// proxyTCP connects c to an endpoint of its service port, then starts one
// goroutine per direction to copy the bytes (halfCopy.run) and returns: the
// dialler's stack, grown by the dial, does not sit under an idle connection.
// The last of the two copies to end closes c.
func (p *Proxier) proxyTCP(c *tcpConn) {
	sp := c.sp
	sp.counters.connOpened()
	clientIP := c.client.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	backend, err := p.dialEndpoint(sp, p.pickFrom(sp, c.external, clientIP), clientIP)
	if err != nil {
		c.abort() // no endpoint answered: the client sees a reset, not an empty reply
		p.endTCP(c)
		return
	}
	if !c.setBackend(backend) {
		reset(backend) // aborted while we dialled (the grace period is over)
		p.endTCP(c)
		return
	}
	clientRaw, err1 := c.client.SyscallConn()
	backendRaw, err2 := backend.SyscallConn()
	if err1 != nil || err2 != nil { // closed meanwhile: aborted
		c.abort()
		p.endTCP(c)
		return
	}
	c.up = halfCopy{c: c, dstConn: backend, srcConn: c.client, dst: backendRaw, src: clientRaw, bytes: &sp.counters.fromClients}
	c.down = halfCopy{c: c, dstConn: c.client, srcConn: backend, dst: clientRaw, src: backendRaw, bytes: &sp.counters.toClients}
	c.copying.Store(2)
	// go statements, not p.wg.Go: wg.Go wraps its function in a closure of
	// its own, one more allocation per goroutine.
	p.wg.Add(2)
	go p.copyAndEnd(c, &c.up)
	go p.copyAndEnd(c, &c.down)
}

// copyAndEnd copies one direction; the second to finish ends the connection.
// The end of the stream is passed on as a half-close (a FIN to dst's peer)
// while the other direction still copies; when it is the last direction to
// end, closing both sockets sends that FIN, and the shutdown(2) is saved.
func (p *Proxier) copyAndEnd(c *tcpConn, h *halfCopy) {
	defer p.wg.Done()
	eof := h.run()
	if c.copying.Add(-1) == 0 {
		c.close()
		p.endTCP(c)
		return
	}
	if eof {
		h.dstConn.CloseWrite()
	}
}

// endTCP forgets an ended connection: its counters, its place in the open
// set, its file descriptors.
func (p *Proxier) endTCP(c *tcpConn) {
	c.sp.counters.connClosed()
	p.conns.remove(c)
	p.fds.give(2)
}

// dialEndpoint tries endpoints that b picks with growing timeouts, as
// kube-proxy's tryConnect: each failure resets the client's affinity, so the
// next attempt goes round-robin to another endpoint, and counts as a dial
// failure of sp. Dials end when the proxier's context does (the shutdown grace
// period is over).
func (p *Proxier) dialEndpoint(sp *servicePort, b *Balancer, client netip.Addr) (*net.TCPConn, error) {
	var errs []error
	for _, timeout := range p.cfg.DialTimeouts {
		ep, err := b.Pick(sp.name, client)
		if err != nil {
			return nil, errors.Join(append(errs, err)...)
		}
		// Sync keeps such endpoints out of the Balancer; this catches one that
		// became a loop since (an address added to the node).
		err = p.self.Load().check(service.TCP, ep)
		if err == nil {
			var conn net.Conn
			if conn, err = p.dial("tcp", ep, timeout); err == nil {
				return conn.(*net.TCPConn), nil
			}
		}
		if isFDExhaustion(err) {
			p.fdExhausted("dial", err)
		}
		sp.counters.dialFailures.Add(1)
		b.Reset(sp.name, client)
		errs = append(errs, err)
		if p.ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("service port %s: no endpoint answered: %w", sp.name, errors.Join(errs...))
}

// endpointDialer dials the endpoints. Their sockets get SO_KEEPALIVE with the
// kernel's timers (net.ipv4.tcp_keepalive_time, _intvl, _probes of the
// namespace: by default 2 hours idle, then 9 probes 75s apart), one
// setsockopt instead of net.Dialer's four (Go's 15s, 15s, 9).
//
// Why keep-alive at all, and why the kernel's: when an endpoint vanishes
// without a FIN or a reset (its node died) while its client waits silently,
// nothing else ends the proxied connection, and its two sockets would be held
// for as long as the client keeps waiting. Keep-alive ends it, and the client
// gets a reset. It is a backstop against holding descriptors forever, not a
// failure detector: clients have their own timeouts, and a client that
// vanishes is found by the client side's keep-alive (Go's timers, inherited
// from the listener, see listenTCP). kube-proxy's userspace proxier had Go's
// timers here too, at four system calls per connection (about 5% of the
// proxy's CPU per new connection in bench/userspace); HAProxy sets no
// keep-alive on its server sockets unless told to (option srvtcpka).
var endpointDialer = net.Dialer{
	KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: -1, Interval: -1, Count: -1}, // -1: the kernel's value
}

// dial connects to ep inside the proxier's namespace.
func (p *Proxier) dial(network string, ep netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(p.ctx, timeout)
	defer cancel()
	var conn net.Conn
	err := p.cfg.NetNS(func() (err error) {
		conn, err = endpointDialer.DialContext(ctx, network, ep.String())
		return err
	})
	return conn, err
}

func (l *tcpListener) start(p *Proxier) { p.wg.Go(func() { p.serveTCP(l) }) }
