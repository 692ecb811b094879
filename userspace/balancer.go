package userspace

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/svcproxy/svcproxy/service"
)

// ErrNoEndpoints is returned by Balancer.Pick for a service port that has no
// usable endpoint.
var ErrNoEndpoints = errors.New("no usable endpoints")

// Clock tells the time. The Balancer reads it for session affinity; tests pass a
// fake one so that expiry needs no sleeping.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Balancer chooses an endpoint for each new connection or UDP session:
// round-robin over the endpoints it is given (the Proxier gives it those
// service.Port.Categorize chose: the ready ones, else the serving-and-
// terminating ones, narrowed by topology hints), or, for a Service with
// ClientIP affinity, the endpoint this client used last if it is still there and
// the client has not been idle longer than the Service's timeout.
//
// A Balancer is safe for concurrent use. The zero value is not usable; call
// NewBalancer.
type Balancer struct {
	clock Clock

	mu    sync.Mutex
	ports map[service.PortName]*portBalancer
}

// portBalancer is the state of one service port.
type portBalancer struct {
	endpoints []netip.AddrPort // usable endpoints, in the Snapshot's stable order
	next      int              // round-robin position in endpoints
	affinity  service.Affinity
	clients   map[netip.Addr]*stickyEntry // ClientIP affinity only
}

// stickyEntry is one client's affinity: its endpoint and when it last used it.
type stickyEntry struct {
	endpoint netip.AddrPort
	lastUsed time.Time
}

// NewBalancer returns a Balancer that reads time from clock; if clock is nil,
// the wall clock is used.
func NewBalancer(clock Clock) *Balancer {
	if clock == nil {
		clock = realClock{}
	}
	return &Balancer{clock: clock, ports: make(map[service.PortName]*portBalancer)}
}

// Update makes ports the set of service ports the Balancer serves, each with
// the endpoints its policy Cluster traffic goes to (service.Port.Categorize
// for no node in particular: no hint names it). Ports not in the list are
// forgotten. The Proxier uses SetPort and Forget instead, one port at a time,
// with the endpoints Categorize gives on its node.
func (b *Balancer) Update(ports []*service.Port) {
	seen := make(map[service.PortName]bool, len(ports))
	for _, p := range ports {
		seen[p.Name] = true
		usable := p.Categorize("", nil).Cluster
		eps := make([]netip.AddrPort, len(usable))
		for i, e := range usable {
			eps[i] = e.Addr
		}
		b.SetPort(p.Name, p.Service.Affinity, eps)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for name := range b.ports {
		if !seen[name] {
			delete(b.ports, name)
		}
	}
}

// SetPort makes endpoints (in their stable order) the ones Pick chooses from
// for the service port name. Affinity entries that point at an endpoint no
// longer in the list are purged; the round-robin position is kept, so that an
// endpoint change does not send everybody back to the first endpoint.
func (b *Balancer) SetPort(name service.PortName, affinity service.Affinity, endpoints []netip.AddrPort) {
	b.mu.Lock()
	defer b.mu.Unlock()
	pb := b.ports[name]
	if pb == nil {
		pb = &portBalancer{}
		b.ports[name] = pb
	}
	pb.update(affinity, endpoints)
}

// Forget removes the service port name: Pick fails for it from now on.
func (b *Balancer) Forget(name service.PortName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.ports, name)
}

func (pb *portBalancer) update(affinity service.Affinity, eps []netip.AddrPort) {
	pb.endpoints = slices.Clone(eps)
	if len(eps) > 0 {
		pb.next %= len(eps)
	} else {
		pb.next = 0
	}
	pb.affinity = affinity
	if !pb.affinity.ClientIP {
		pb.clients = nil
		return
	}
	if pb.clients == nil {
		pb.clients = make(map[netip.Addr]*stickyEntry)
	}
	for client, e := range pb.clients {
		if !slices.Contains(eps, e.endpoint) {
			delete(pb.clients, client)
		}
	}
}

// Pick returns the endpoint for a new connection from client to the service
// port name. It returns ErrNoEndpoints (wrapped) when the port has none.
func (b *Balancer) Pick(name service.PortName, client netip.Addr) (netip.AddrPort, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	pb := b.ports[name]
	if pb == nil || len(pb.endpoints) == 0 {
		return netip.AddrPort{}, fmt.Errorf("service port %s: %w", name, ErrNoEndpoints)
	}
	now := b.clock.Now()
	if pb.affinity.ClientIP {
		if e := pb.clients[client]; e != nil && !e.expired(now, pb.affinity.Timeout) {
			e.lastUsed = now
			return e.endpoint, nil
		}
	}
	ep := pb.endpoints[pb.next]
	pb.next = (pb.next + 1) % len(pb.endpoints)
	if pb.affinity.ClientIP {
		pb.clients[client] = &stickyEntry{endpoint: ep, lastUsed: now}
	}
	return ep, nil
}

// Reset forgets client's affinity on the service port name, so that its next
// Pick goes round-robin. The proxier calls it when the client's endpoint failed
// to answer: kube-proxy's "sessionAffinityReset".
func (b *Balancer) Reset(name service.PortName, client netip.Addr) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if pb := b.ports[name]; pb != nil {
		delete(pb.clients, client)
	}
}

// Sweep removes the affinity entries that have been idle longer than their
// Service's timeout and returns how many it removed. The proxier runs it
// periodically so that the tables do not grow with every client ever seen.
func (b *Balancer) Sweep() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	n := 0
	for _, pb := range b.ports {
		for client, e := range pb.clients {
			if e.expired(now, pb.affinity.Timeout) {
				delete(pb.clients, client)
				n++
			}
		}
	}
	return n
}

// Endpoints returns the usable endpoints of a service port, in round-robin order
// from the first.
func (b *Balancer) Endpoints(name service.PortName) []netip.AddrPort {
	b.mu.Lock()
	defer b.mu.Unlock()
	if pb := b.ports[name]; pb != nil {
		return slices.Clone(pb.endpoints)
	}
	return nil
}

func (e *stickyEntry) expired(now time.Time, timeout time.Duration) bool {
	if timeout <= 0 {
		timeout = service.DefaultAffinityTimeout
	}
	return now.Sub(e.lastUsed) >= timeout
}
