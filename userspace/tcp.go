package userspace

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/svcproxy/svcproxy/service"
)

// tcpListener accepts the connections of one service port: those the portals
// redirect to it, or those sent to a node port.
type tcpListener struct {
	ln *net.TCPListener
	sp *servicePort
}

func (l *tcpListener) port() uint16 { return uint16(l.ln.Addr().(*net.TCPAddr).Port) }
func (l *tcpListener) close()       { l.ln.Close() }

// serveTCP accepts until the listener is closed, one goroutine per connection.
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
		c := &tcpConn{client: client, sp: l.sp}
		if !p.conns.add(c) {
			c.abort() // shutting down
			p.fds.give(2)
			continue
		}
		p.wg.Go(func() { p.proxyTCP(c) })
	}
}

// proxyTCP connects c to an endpoint of its service port, then starts one
// goroutine per direction to copy the bytes (copyHalf) and returns: its own
// stack, grown by the dial, goes back to the runtime instead of sitting under
// an idle connection. The last of the two copies to end closes c.
func (p *Proxier) proxyTCP(c *tcpConn) {
	sp := c.sp
	sp.counters.connOpened()
	clientIP := c.client.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	backend, err := p.dialEndpoint(sp, clientIP)
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
	c.copying.Store(2)
	p.wg.Go(func() { p.copyAndEnd(c, backend, c.client, &sp.counters.fromClients) })
	p.wg.Go(func() { p.copyAndEnd(c, c.client, backend, &sp.counters.toClients) })
}

// copyAndEnd copies one direction; the second to finish ends the connection.
func (p *Proxier) copyAndEnd(c *tcpConn, dst, src *net.TCPConn, bytes *atomic.Uint64) {
	copyHalf(c, dst, src, bytes)
	if c.copying.Add(-1) == 0 {
		c.close()
		p.endTCP(c)
	}
}

// endTCP forgets an ended connection: its counters, its place in the open
// set, its file descriptors.
func (p *Proxier) endTCP(c *tcpConn) {
	c.sp.counters.connClosed()
	p.conns.remove(c)
	p.fds.give(2)
}

// dialEndpoint tries endpoints with growing timeouts, as kube-proxy's tryConnect:
// each failure resets the client's affinity, so the next attempt goes
// round-robin to another endpoint, and counts as a dial failure of sp. Dials end
// when the proxier's context does (the shutdown grace period is over).
func (p *Proxier) dialEndpoint(sp *servicePort, client netip.Addr) (*net.TCPConn, error) {
	var errs []error
	for _, timeout := range p.cfg.DialTimeouts {
		ep, err := p.balancer.Pick(sp.name, client)
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
		p.balancer.Reset(sp.name, client)
		errs = append(errs, err)
		if p.ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("service port %s: no endpoint answered: %w", sp.name, errors.Join(errs...))
}

// dial connects to ep inside the proxier's namespace.
func (p *Proxier) dial(network string, ep netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(p.ctx, timeout)
	defer cancel()
	var conn net.Conn
	err := p.cfg.NetNS(func() (err error) {
		var d net.Dialer
		conn, err = d.DialContext(ctx, network, ep.String())
		return err
	})
	return conn, err
}

func (l *tcpListener) start(p *Proxier) { p.wg.Go(func() { p.serveTCP(l) }) }
