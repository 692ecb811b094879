package socklb

import (
	"context"
	"maps"
	"net/netip"
	"sync"
)

// Fake is an in-memory socket LB: the services map, and Connect, which answers
// what connect4 would do with a connect() from inside the cgroup.
type Fake struct {
	mu       sync.Mutex
	services map[Service]netip.AddrPort
}

var _ Interface = (*Fake)(nil)

// NewFake returns a Fake with an empty map.
func NewFake() *Fake {
	return &Fake{services: make(map[Service]netip.AddrPort)}
}

// SetService implements Interface.
func (f *Fake) SetService(_ context.Context, svc Service, backend netip.AddrPort) error {
	if err := validate(svc, &backend); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.services[svc] = backend
	return nil
}

// DeleteService implements Interface.
func (f *Fake) DeleteService(_ context.Context, svc Service) error {
	if err := validate(svc, nil); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.services, svc)
	return nil
}

// Services implements Interface.
func (f *Fake) Services(_ context.Context) (map[Service]netip.AddrPort, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.services), nil
}

// Connect returns where a socket of protocol p created inside the cgroup ends
// up connecting when it calls connect(dst): the backend when (dst, p) is in
// the map, dst itself otherwise. It mirrors connect4 step by step: build the
// key from the destination and protocol, look it up, rewrite on a hit.
func (f *Fake) Connect(p Protocol, dst netip.AddrPort) netip.AddrPort {
	if !dst.Addr().Is4() {
		return dst // connect6 is not attached: IPv6 goes untranslated
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if b, ok := f.services[Service{VIP: dst.Addr(), Port: dst.Port(), Protocol: p}]; ok {
		return b
	}
	return dst
}
