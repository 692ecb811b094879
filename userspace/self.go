package userspace

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/service"
)

// ErrEndpointLoop is the error (wrapped) of an endpoint that leads back into
// this proxier: one of its own listeners, or a virtual address its portals
// redirect to them. Dialling one would be accepted by the proxier itself, which
// would dial it again, and so on until the file descriptors run out.
var ErrEndpointLoop = errors.New("endpoint leads back to this proxy")

// selfAddrs is what leads back into the proxier, rebuilt by each Sync once
// the listeners are bound, and read (through an atomic pointer) before every
// dial.
type selfAddrs struct {
	// local are the addresses of this network namespace: a listener bound to
	// 0.0.0.0 answers on each of them, and on all of 127.0.0.0/8 (one bound to
	// ::, on ::1).
	local map[netip.Addr]bool
	// listeners are the ports of the listeners and node ports, per protocol.
	listeners map[service.Protocol]map[uint16]service.PortName
	// vips are the virtual addresses (of the proxier's family) the portals redirect (ClusterIPs,
	// external and load-balancer IPs, with the service port). Kubernetes
	// documents that endpoints must not be virtual IPs; kube-proxy does not
	// support them either.
	vips map[service.VIP]service.PortName
}

// check returns an ErrEndpointLoop error if a connection of protocol proto to
// ep would come back to the proxier.
func (s *selfAddrs) check(proto service.Protocol, ep netip.AddrPort) error {
	if s == nil {
		return nil
	}
	a := ep.Addr().Unmap()
	if name, ok := s.vips[service.VIP{Protocol: proto, Addr: netip.AddrPortFrom(a, ep.Port())}]; ok {
		return fmt.Errorf("endpoint %s: %w: it is a virtual address of %s", ep, ErrEndpointLoop, name)
	}
	if name, ok := s.listeners[proto][ep.Port()]; ok && (a.IsLoopback() || a.IsUnspecified() || s.local[a]) {
		return fmt.Errorf("endpoint %s: %w: it is the listener of %s", ep, ErrEndpointLoop, name)
	}
	return nil
}

// newSelfAddrs collects what leads back into the proxier from the served
// ports and the namespace's addresses (previous: the last ones known, kept
// if they cannot be read now).
func (p *Proxier) newSelfAddrs(previous *selfAddrs) *selfAddrs {
	s := &selfAddrs{
		listeners: map[service.Protocol]map[uint16]service.PortName{service.TCP: {}, service.UDP: {}},
		vips:      map[service.VIP]service.PortName{},
	}
	var ifAddrs []net.Addr
	err := p.cfg.NetNS(func() (err error) {
		ifAddrs, err = net.InterfaceAddrs()
		return err
	})
	if err != nil && previous != nil {
		s.local = previous.local
	} else {
		s.local = make(map[netip.Addr]bool, len(ifAddrs))
		for _, a := range ifAddrs {
			if pfx, err := netip.ParsePrefix(a.String()); err == nil {
				s.local[pfx.Addr().Unmap()] = true
			}
		}
	}
	for name, sp := range p.ports {
		sp.mu.Lock()
		for _, l := range []listener{sp.listener, sp.nodePort} {
			if l != nil {
				s.listeners[name.Protocol][l.port()] = name
			}
		}
		svc := sp.port.Service
		for _, ip := range p.cfg.Family.Addrs(slices.Concat(svc.ClusterIPs, svc.ExternalIPs, svc.LoadBalancerIPs)) {
			s.vips[service.VIP{Protocol: name.Protocol, Addr: netip.AddrPortFrom(ip, sp.port.Port)}] = name
		}
		sp.mu.Unlock()
	}
	return s
}
