package userspace

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
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
func (p *Proxier) serveTCP(l *tcpListener) {
	var delay time.Duration
	for {
		c, err := l.ln.AcceptTCP()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// Out of file descriptors, most likely: back off as net/http does
			// (5ms doubling to 1s) instead of spinning.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(delay):
			case <-p.ctx.Done():
				return
			}
			continue
		}
		delay = 0
		p.conns.Add(1)
		p.wg.Go(func() {
			defer p.conns.Done()
			p.proxyTCP(l.sp, c)
		})
	}
}

// proxyTCP connects client to an endpoint of sp and copies bytes both ways until
// both directions have ended.
func (p *Proxier) proxyTCP(sp *servicePort, client *net.TCPConn) {
	sp.counters.connOpened()
	defer sp.counters.connClosed()

	clientIP := client.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	backend, ep, err := p.dialEndpoint(sp, clientIP)
	if err != nil {
		// No endpoint answered: reset rather than close, so the client sees a
		// failure and not an empty reply.
		client.SetLinger(0)
		client.Close()
		return
	}
	c := &tcpConn{client: client, backend: backend}
	defer c.Close()
	if !sp.track(c, ep) {
		return // the endpoint left while we dialled it
	}
	defer sp.untrack(c)

	done := make(chan struct{})
	p.wg.Go(func() {
		defer close(done)
		proxyCopy(backend, client, &sp.counters.fromClients)
	})
	proxyCopy(client, backend, &sp.counters.toClients)
	<-done
}

// dialEndpoint tries endpoints with growing timeouts, as kube-proxy's tryConnect:
// each failure resets the client's affinity, so the next attempt goes
// round-robin to another endpoint, and counts as a dial failure of sp.
func (p *Proxier) dialEndpoint(sp *servicePort, client netip.Addr) (net.Conn, netip.AddrPort, error) {
	var errs []error
	for _, timeout := range p.cfg.DialTimeouts {
		ep, err := p.balancer.Pick(sp.name, client)
		if err != nil {
			return nil, ep, errors.Join(append(errs, err)...)
		}
		conn, err := p.dial("tcp", ep, timeout)
		if err == nil {
			return conn, ep, nil
		}
		sp.counters.dialFailures.Add(1)
		p.balancer.Reset(sp.name, client)
		errs = append(errs, err)
		if p.ctx.Err() != nil {
			break
		}
	}
	return nil, netip.AddrPort{}, fmt.Errorf("service port %s: no endpoint answered: %w", sp.name, errors.Join(errs...))
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

// tcpConn is one proxied connection: closing it closes both sides.
type tcpConn struct {
	client, backend net.Conn
	once            sync.Once
}

func (c *tcpConn) Close() error {
	c.once.Do(func() {
		c.client.Close()
		c.backend.Close()
	})
	return nil
}
