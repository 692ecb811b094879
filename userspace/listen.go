package userspace

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/svcproxy/svcproxy/service"
)

// openListeners binds what sp is missing: its listener and, when its NodePort
// changed, the node port listener. It returns the new listeners, not yet
// serving. A failure is recorded on sp (Status shows it) and returned; the other
// ports are not affected.
func (p *Proxier) openListeners(sp *servicePort) ([]listener, error) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	var opened []listener
	var errs []error
	if sp.listener == nil && !p.cfg.LocalhostNodePorts {
		l, err := p.listen(sp, 0, false)
		if err != nil {
			p.bindFails.Add(1)
			errs = append(errs, fmt.Errorf("listener: %w", err))
		} else {
			sp.listener = l
			opened = append(opened, l)
		}
	}
	nodePort := sp.port.NodePort
	if p.cfg.LocalhostNodePorts && !p.hasEndpoints(sp) {
		nodePort = 0 // no endpoint to send to: refused, as kube-proxy's SyncNodePorts leaves it
	}
	if sp.nodePort != nil && sp.nodePort.port() != nodePort {
		sp.nodePort.close()
		sp.nodePort = nil
	}
	if sp.nodePort == nil && nodePort != 0 {
		l, err := p.listen(sp, nodePort, true)
		if err != nil {
			p.bindFails.Add(1)
			errs = append(errs, fmt.Errorf("nodePort %d: %w", nodePort, err))
		} else {
			sp.nodePort = l
			opened = append(opened, l)
		}
	}
	sp.err = nil
	if len(errs) > 0 {
		sp.err = fmt.Errorf("service port %s: %w", sp.name, errors.Join(errs...))
	}
	return opened, sp.err
}

// listener is a bound TCP or UDP socket serving one service port.
type listener interface {
	port() uint16
	// start serves the listener, in goroutines the proxier owns, until close.
	start(p *Proxier)
	close()
}

// listen binds a listener for sp on port, or on a port from the range (or the
// kernel's choice) when port is 0. An external listener (the node port's) takes
// the traffic that externalTrafficPolicy governs.
func (p *Proxier) listen(sp *servicePort, port uint16, external bool) (listener, error) {
	if port != 0 || p.cfg.PortRange.IsZero() {
		return p.listenOn(sp, port, external)
	}
	r := p.cfg.PortRange
	var lastErr error
	for range r.Size() {
		port := p.nextPort
		p.nextPort++
		if p.nextPort > r.Max || p.nextPort < r.Min { // past the end, or wrapped at 65535
			p.nextPort = r.Min
		}
		l, err := p.listenOn(sp, port, external)
		if err == nil {
			return l, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("no free port in range %s: %w", r, lastErr)
}

func (p *Proxier) listenOn(sp *servicePort, port uint16, external bool) (listener, error) {
	addr := netip.AddrPortFrom(p.cfg.BindAddress, port)
	switch sp.name.Protocol {
	case service.TCP:
		var ln *net.TCPListener
		err := p.cfg.NetNS(func() (err error) {
			// An IPv6 address makes an IPv6-only socket ("tcp6", IPV6_V6ONLY):
			// the IPv4 Proxier's listener may have the same port.
			ln, err = listenTCP(addr)
			return err
		})
		if err != nil {
			return nil, err
		}
		return &tcpListener{ln: ln, sp: sp, external: external}, nil
	case service.UDP:
		return p.newUDPListener(sp, addr, external)
	}
	return nil, fmt.Errorf("protocol %s: not supported", sp.name.Protocol)
}

// network is "tcp4" or "tcp6" (proto "tcp"), "udp4" or "udp6" (proto "udp"):
// the network of the proxier's family.
func (p *Proxier) network(proto string) string {
	if p.cfg.Family == service.IPv6 {
		return proto + "6"
	}
	return proto + "4"
}
