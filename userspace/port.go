package userspace

import (
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/svcproxy/svcproxy/service"
)

// servicePort is what the proxier keeps for one service port across Syncs: its
// listeners, its counters, and its UDP sessions with the endpoint each one
// goes to, so that an endpoint that leaves takes its sessions with it.
//
// TCP connections are not here: an established connection is left alone when
// its endpoint stops being ready, leaves, or its Service is deleted (see
// Proxier.Sync); the proxier only stops picking that endpoint.
type servicePort struct {
	name     service.PortName
	counters counters

	// The Service's traffic policies, read on every new connection: Local
	// sends that traffic to the node's own endpoints (Proxier.pickFrom).
	internalLocal, externalLocal atomic.Bool

	mu        sync.Mutex
	port      *service.Port                // from the latest Snapshot
	listener  listener                     // nil when it could not be bound
	nodePort  listener                     // nil when none, or when it could not be bound
	err       error                        // why a listener could not be bound
	endpoints map[netip.AddrPort]bool      // serving endpoints: a UDP session to one of them may stay
	refused   []string                     // endpoints never picked, and why
	sessions  map[io.Closer]netip.AddrPort // UDP session -> endpoint

	// hasAny: the port has a usable endpoint somewhere in the cluster
	// (service.Categorized.HasAny, less those refused as loops). Without
	// one its portals REJECT. noInternal: it has one, but none for its
	// ClusterIP traffic (internalTrafficPolicy Local and none on this
	// node): the ClusterIP is dropped. kube-proxy's hasEndpoints and
	// hasInternalEndpoints (pkg/proxy/iptables/proxier.go).
	hasAny, noInternal bool

	// ctCleared: the port's UDP conntrack entries were deleted since it
	// lost its last endpoint (Proxier.clearRejected). Guarded by Proxier.mu.
	ctCleared bool
}

func newServicePort(name service.PortName) *servicePort {
	return &servicePort{name: name, sessions: make(map[io.Closer]netip.AddrPort)}
}

// setPort records the port's new state from a Snapshot.
func (sp *servicePort) setPort(port *service.Port) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.port = port
}

// setEndpoints brings the port's endpoints into force, under sp.mu and in this
// order, so that a session is never refused for an endpoint the Balancer just
// offered:
//
//  1. the serving endpoints become the ones a new UDP session may track;
//  2. the Balancer b picks from those for traffic policy Cluster, local from
//     those for policy Local (service.Port.Categorize on node, whose Node
//     object is nodeObj: topology hints apply to the first), but neither from
//     those check refuses (they lead back into the proxier: the error says
//     why, and Status shows it);
//  3. UDP sessions to endpoints that stopped serving end: the next datagram of
//     their client opens a session to a usable endpoint. kube-proxy's iptables
//     and ipvs modes do the same by deleting those endpoints' UDP conntrack
//     entries, and so do svcproxy's kernel paths.
//
// A session opened meanwhile tracks itself under sp.mu (track), so it sees
// either the old state or the new one, never half of each.
//
// It returns the refused endpoints when they changed (for a log line).
func (sp *servicePort) setEndpoints(b, local *Balancer, node string, nodeObj *service.Node, check func(netip.AddrPort) error) (refused []string, changed bool) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.endpoints = make(map[netip.AddrPort]bool, len(sp.port.Endpoints))
	for _, e := range sp.port.Endpoints {
		if e.Ready || e.Serving {
			sp.endpoints[e.Addr] = true
		}
	}
	before := sp.refused
	sp.refused = nil
	eps := sp.port.Categorize(node, nodeObj)
	usable := func(list []service.Endpoint) []netip.AddrPort {
		var out []netip.AddrPort
		for _, e := range list {
			if err := check(e.Addr); err != nil {
				why := fmt.Sprintf("service port %s: %v", sp.name, err)
				if !slices.Contains(sp.refused, why) {
					sp.refused = append(sp.refused, why)
				}
				continue
			}
			out = append(out, e.Addr)
		}
		return out
	}
	// Categorize leaves Cluster nil when the port never uses policy Cluster
	// (internalTrafficPolicy Local, ClusterIP only), Local nil when it never
	// uses policy Local; each Balancer gets the list its traffic uses.
	svc := sp.port.Service
	cluster := usable(eps.Cluster)
	b.SetPort(sp.name, svc.Affinity, cluster)
	var mine []netip.AddrPort
	if sp.port.UsesLocalEndpoints() {
		mine = usable(eps.Local)
		local.SetPort(sp.name, svc.Affinity, mine)
	} else {
		local.Forget(sp.name)
	}
	internal := cluster
	if svc.InternalPolicyLocal {
		internal = mine
	}
	// Reachable endpoints that all lead back into the proxier count as none:
	// the port is rejected, as before it had any.
	sp.hasAny = eps.HasAny && (len(eps.Reachable) == 0 || len(cluster) > 0 || len(mine) > 0)
	sp.noInternal = sp.hasAny && len(internal) == 0
	sp.internalLocal.Store(svc.InternalPolicyLocal)
	sp.externalLocal.Store(svc.ExternalPolicyLocal)
	for s, ep := range sp.sessions {
		if !sp.endpoints[ep] {
			s.Close()
			delete(sp.sessions, s)
		}
	}
	return sp.refused, !slices.Equal(before, sp.refused)
}

// track registers a UDP session to ep, unless ep has stopped serving meanwhile
// (the session was opened while a Sync removed it): then it returns false and
// the caller closes the session.
func (sp *servicePort) track(s io.Closer, ep netip.AddrPort) bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if !sp.endpoints[ep] {
		return false
	}
	sp.sessions[s] = ep
	return true
}

func (sp *servicePort) untrack(s io.Closer) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	delete(sp.sessions, s)
}

// closeSessions ends every UDP session, and refuses new ones.
func (sp *servicePort) closeSessions() {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.endpoints = nil
	for s := range sp.sessions {
		s.Close()
		delete(sp.sessions, s)
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
	// LocalEndpoints are those on this node, which the traffic a Local policy
	// governs goes to; only for a Service with such a policy.
	LocalEndpoints []netip.AddrPort `json:"localEndpoints,omitempty"`
	// Error says why a listener could not be bound; the port's other listener and
	// every other port are still served.
	Error string `json:"error,omitempty"`
	// Refused are the usable endpoints the proxier does not pick, each with
	// why: they lead back into the proxier (ErrEndpointLoop).
	Refused  []string `json:"refused,omitempty"`
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
	// Unserved are the service ports of the Snapshot that get no listener, and
	// why (an IPv6-only Service, SCTP).
	Unserved []UnservedPort `json:"unserved,omitempty"`
	// FDExhausted counts connections and UDP sessions refused, and socket
	// calls failed, for lack of file descriptors (see FDExhausted).
	FDExhausted uint64 `json:"fdExhausted"`
}

// UnservedPort is a service port the proxier does not serve.
type UnservedPort struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Status returns the state of every served port.
func (p *Proxier) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := Status{Synced: p.synced, PortalsFailures: p.portals.failures, Unserved: slices.Clone(p.unserved),
		FDExhausted: p.fdRefusals.Load()}
	if p.portals.err != nil {
		st.PortalsError = p.portals.err.Error()
	}
	for name, sp := range p.ports {
		ps := PortStatus{
			Port:           name,
			Name:           name.String(),
			Endpoints:      p.balancer.Endpoints(name),
			LocalEndpoints: p.local.Endpoints(name),
			Counters:       sp.counters.snapshot(),
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
		ps.Refused = slices.Clone(sp.refused)
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

// FDExhausted counts the connections and UDP sessions refused, and the socket
// calls (accept, dial) that failed, for lack of file descriptors. The
// proxier's connections keep a reserve of the process's descriptors free for
// everything else (the HTTP endpoints, the watch); a connection that would eat
// into it is reset at once.
func (p *Proxier) FDExhausted() uint64 { return p.fdRefusals.Load() }

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
