package service

import (
	"cmp"
	"slices"
	"sync"
)

// Snapshot is the state of every valid Service at one moment. It is immutable:
// neither the Snapshot nor anything reached from it may be modified, so it can be
// shared between goroutines without locks. A newer state is a new Snapshot; what
// it carries besides its Services (this node's Node, the source's change counts)
// is given when it is built (SnapshotOption), or to a new one (With).
type Snapshot struct {
	services []*Service // sorted by namespace/name
	ports    []*Port    // sorted by PortName

	// The lookup maps, made on first use: a proxy asks them for every
	// connection, the DNS never (it indexes the Services itself), and at
	// 20,000 Services they are about 6 MB.
	lookups struct {
		once   sync.Once
		byName map[NamespacedName]*Service
		byPort map[PortName]*Port
		byVIP  map[VIP]*Port
	}

	// errs are the objects Build skipped, each naming its object and field.
	errs []error

	// node is this node's Node object, nil when unknown (WithNode).
	node *Node

	// namespaces and pods are what a DNS server reads beside Services, nil
	// when the source does not follow them (WithNamespaces, WithPodIPs).
	namespaces Namespaces
	pods       PodIPs

	// changes are the source's cumulative change counts this Snapshot
	// includes (WithChanges).
	changes changeCounts

	// views are the per-family views (Family), IPv4 and IPv6, made on first use.
	views [2]struct {
		once sync.Once
		snap *Snapshot
	}
}

// SnapshotOption gives a Snapshot what it carries besides its Services: this
// node's Node (WithNode), the source's change counts (WithChanges), the
// namespaces and pods a DNS server reads (WithNamespaces, WithPodIPs). Options
// are applied while the Snapshot is built, never after.
type SnapshotOption func(*Snapshot)

// NewSnapshot indexes services (which it then owns) into a Snapshot. errs are
// the validation errors of objects that were skipped, kept for reporting.
func NewSnapshot(services []*Service, errs []error, opts ...SnapshotOption) *Snapshot {
	s := &Snapshot{errs: errs}
	for _, o := range opts {
		o(s)
	}
	s.services = slices.Clone(services)
	slices.SortFunc(s.services, func(a, b *Service) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	n := 0
	for _, svc := range s.services {
		n += len(svc.Ports)
	}
	s.ports = make([]*Port, 0, n)
	for _, svc := range s.services {
		s.ports = append(s.ports, svc.Ports...)
	}
	return s
}

// With returns a Snapshot of the same Services as s, with opts applied: the
// Node or the change counts a source learns after it built s. s itself is not
// changed; the two share what is immutable (the Services, their order).
func (s *Snapshot) With(opts ...SnapshotOption) *Snapshot {
	c := &Snapshot{services: s.services, ports: s.ports, errs: s.errs, node: s.node, changes: s.changes,
		namespaces: s.namespaces, pods: s.pods}
	for _, o := range opts {
		o(c)
	}
	return c
}

// index makes the lookup maps, once.
func (s *Snapshot) index() {
	s.lookups.once.Do(func() {
		l := &s.lookups
		l.byName = make(map[NamespacedName]*Service, len(s.services))
		l.byPort = make(map[PortName]*Port, len(s.ports))
		l.byVIP = make(map[VIP]*Port, len(s.ports))
		for _, svc := range s.services {
			l.byName[svc.NamespacedName] = svc
			for _, p := range svc.Ports {
				l.byPort[p.Name] = p
				for _, ip := range svc.ClusterIPs {
					l.byVIP[VIP{Protocol: p.Protocol, Addr: addrPort(ip, p.Port)}] = p
				}
			}
		}
	})
}

// Services returns every Service, sorted by namespace and name.
func (s *Snapshot) Services() []*Service { return s.services }

// Ports returns every service port, sorted by Service, then in spec order.
func (s *Snapshot) Ports() []*Port { return s.ports }

// Service returns the Service named n.
func (s *Snapshot) Service(n NamespacedName) (*Service, bool) {
	s.index()
	svc, ok := s.lookups.byName[n]
	return svc, ok
}

// Port returns the service port named n.
func (s *Snapshot) Port(n PortName) (*Port, bool) {
	s.index()
	p, ok := s.lookups.byPort[n]
	return p, ok
}

// PortByVIP returns the service port that owns a ClusterIP:port for a protocol:
// the question a proxy asks of every new connection to a virtual address.
func (s *Snapshot) PortByVIP(v VIP) (*Port, bool) {
	s.index()
	p, ok := s.lookups.byVIP[v]
	return p, ok
}

// Errors returns the validation errors of the objects this Snapshot skipped.
func (s *Snapshot) Errors() []error { return s.errs }

// Len is the number of Services.
func (s *Snapshot) Len() int { return len(s.services) }
