package userspace

import (
	"io"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/svcproxy/svcproxy/service"
)

// servicePort is what the proxier keeps for one service port across Syncs: its
// listeners, its counters, and the open connections (or UDP sessions) with the
// endpoint each one goes to, so that an endpoint that leaves takes its
// connections with it and nothing else.
type servicePort struct {
	name     service.PortName
	counters counters

	mu        sync.Mutex
	port      *service.Port // from the latest Snapshot
	listener  listener      // nil when it could not be bound
	nodePort  listener      // nil when none, or when it could not be bound
	err       error         // why a listener could not be bound
	endpoints map[netip.AddrPort]bool
	open      map[io.Closer]netip.AddrPort // connection or session -> endpoint
}

func newServicePort(name service.PortName) *servicePort {
	return &servicePort{name: name, open: make(map[io.Closer]netip.AddrPort)}
}

// setPort records the port's new state and closes the connections to endpoints
// that are gone. An endpoint that is still serving (a terminating pod finishing
// its work) keeps its connections; only new ones avoid it.
func (sp *servicePort) setPort(port *service.Port) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.port = port
	sp.endpoints = make(map[netip.AddrPort]bool, len(port.Endpoints))
	for _, e := range port.Endpoints {
		if e.Ready || e.Serving {
			sp.endpoints[e.Addr] = true
		}
	}
	for c, ep := range sp.open {
		if !sp.endpoints[ep] {
			c.Close()
			delete(sp.open, c)
		}
	}
}

// track registers an open connection to ep, unless ep has left meanwhile (the
// connection was dialled while a Sync removed it): then it returns false and the
// caller closes the connection.
func (sp *servicePort) track(c io.Closer, ep netip.AddrPort) bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if !sp.endpoints[ep] {
		return false
	}
	sp.open[c] = ep
	return true
}

func (sp *servicePort) untrack(c io.Closer) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	delete(sp.open, c)
}

// closeAll closes every open connection and session, and refuses new ones.
func (sp *servicePort) closeAll() {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.endpoints = nil
	for c := range sp.open {
		c.Close()
		delete(sp.open, c)
	}
}

func (sp *servicePort) closeListeners() {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for _, l := range []listener{sp.listener, sp.nodePort} {
		if l != nil {
			l.close()
		}
	}
	sp.listener, sp.nodePort = nil, nil
}

// PortStatus is the state of one service port, for /status and tests.
type PortStatus struct {
	Port service.PortName `json:"-"`
	Name string           `json:"name"` // Port.String(): "default/web:http"
	// Listener is the port the portals redirect to; 0 when it could not be bound.
	Listener uint16 `json:"listener"`
	// NodePort is the node port served on every node address, 0 for none.
	NodePort uint16 `json:"nodePort,omitempty"`
	// Endpoints are the usable endpoints, in round-robin order.
	Endpoints []netip.AddrPort `json:"endpoints"`
	// Error says why a listener could not be bound; the port's other listener and
	// every other port are still served.
	Error    string   `json:"error,omitempty"`
	Counters Counters `json:"counters"`
}

// Status is the state of the proxier, for /status, /healthz and tests.
type Status struct {
	// Synced is true once the first Sync has run.
	Synced bool `json:"synced"`
	// PortalsError is the error of the last failed portal restore, empty once a
	// restore succeeded again; PortalsFailures counts failed restores.
	PortalsError    string       `json:"portalsError,omitempty"`
	PortalsFailures uint64       `json:"portalsFailures"`
	Ports           []PortStatus `json:"ports"` // sorted by name
}

// Status returns the state of every served port.
func (p *Proxier) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := Status{Synced: p.synced, PortalsFailures: p.portals.failures}
	if p.portals.err != nil {
		st.PortalsError = p.portals.err.Error()
	}
	for name, sp := range p.ports {
		ps := PortStatus{
			Port:      name,
			Name:      name.String(),
			Endpoints: p.balancer.Endpoints(name),
			Counters:  sp.counters.snapshot(),
		}
		sp.mu.Lock()
		if sp.listener != nil {
			ps.Listener = sp.listener.port()
		}
		if sp.nodePort != nil {
			ps.NodePort = sp.nodePort.port()
		}
		if sp.err != nil {
			ps.Error = sp.err.Error()
		}
		sp.mu.Unlock()
		st.Ports = append(st.Ports, ps)
	}
	slices.SortFunc(st.Ports, func(a, b PortStatus) int { return compareNames(a.Port, b.Port) })
	return st
}

// Stats returns the counters of every served port: what metrics export and what
// the offload promoter watches.
func (p *Proxier) Stats() map[service.PortName]Counters {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[service.PortName]Counters, len(p.ports))
	for name, sp := range p.ports {
		out[name] = sp.counters.snapshot()
	}
	return out
}

// Healthy reports whether the proxier has synced once and its portals are in
// place: what /healthz serves.
func (p *Proxier) Healthy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.synced && p.portals.err == nil
}

// LastError returns the error of the last failed portal restore, nil once a
// restore succeeded.
func (p *Proxier) LastError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.portals.err
}

func compareNames(a, b service.PortName) int { return strings.Compare(a.String(), b.String()) }
