// Package servicetest builds the Services and Snapshots that the kernel
// modes' unit tests render and trace (offload/iptables, offload/nftables), so
// that both read the same test cluster:
//
//   - this node, ThisNode, at 198.19.0.1; pods in 198.19.1.0/24 (on
//     ThisNode: 198.19.1.0/25, on "node-b": 198.19.1.128/25);
//   - Services in 198.18.0.0/16, each built by Service with one TCP port
//     named "p" and changed by Opts.
//
// It is for tests only: every address must parse, or it panics.
package servicetest

import (
	"net/netip"
	"time"

	"github.com/svcproxy/svcproxy/service"
)

// ThisNode is the name of the node the tests' proxier runs on.
const ThisNode = "node-a"

// Opt changes a test Service.
type Opt func(*service.Service)

// WithNodePort makes the Service a NodePort Service with its port on np.
func WithNodePort(np uint16) Opt {
	return func(s *service.Service) {
		s.Type = service.TypeNodePort
		s.Ports[0].NodePort = np
	}
}

// WithExternalIPs sets spec.externalIPs.
func WithExternalIPs(ips ...string) Opt {
	return func(s *service.Service) { s.ExternalIPs = Addrs(ips...) }
}

// WithLoadBalancer makes the Service a LoadBalancer Service with these
// status.loadBalancer.ingress IPs.
func WithLoadBalancer(ips ...string) Opt {
	return func(s *service.Service) {
		s.Type = service.TypeLoadBalancer
		s.LoadBalancerIPs = Addrs(ips...)
	}
}

// WithSourceRanges sets spec.loadBalancerSourceRanges.
func WithSourceRanges(ranges ...string) Opt {
	return func(s *service.Service) {
		for _, r := range ranges {
			s.LoadBalancerSourceRanges = append(s.LoadBalancerSourceRanges, netip.MustParsePrefix(r))
		}
	}
}

// WithHealthCheck sets spec.healthCheckNodePort.
func WithHealthCheck(port uint16) Opt {
	return func(s *service.Service) { s.HealthCheckNodePort = port }
}

// WithAffinity sets ClientIP session affinity with timeout d.
func WithAffinity(d time.Duration) Opt {
	return func(s *service.Service) { s.Affinity = service.Affinity{ClientIP: true, Timeout: d} }
}

// WithExternalLocal sets externalTrafficPolicy: Local.
func WithExternalLocal() Opt { return func(s *service.Service) { s.ExternalPolicyLocal = true } }

// WithInternalLocal sets internalTrafficPolicy: Local.
func WithInternalLocal() Opt { return func(s *service.Service) { s.InternalPolicyLocal = true } }

// WithProtocol sets the port's protocol.
func WithProtocol(p service.Protocol) Opt {
	return func(s *service.Service) {
		s.Ports[0].Protocol = p
		s.Ports[0].Name.Protocol = p
	}
}

// WithDualStack makes the Service dual-stack: clusterIP6, an IPv6 ClusterIP,
// after its IPv4 one, and ipFamilyPolicy RequireDualStack.
func WithDualStack(clusterIP6 string) Opt {
	return func(s *service.Service) {
		s.ClusterIPs = append(s.ClusterIPs, netip.MustParseAddr(clusterIP6))
		s.IPFamilies, s.IPFamilyPolicy = []service.Family{service.IPv4, service.IPv6}, service.RequireDualStack
	}
}

// WithHeadless makes the Service headless (clusterIP: None).
func WithHeadless() Opt {
	return func(s *service.Service) { s.ClusterIPs, s.Headless = nil, true }
}

// Addrs parses addresses.
func Addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// Endpoint is a ready, serving endpoint at addr ("ip:port") on node.
func Endpoint(addr, node string) service.Endpoint {
	return service.Endpoint{Addr: netip.MustParseAddrPort(addr), Ready: true, Serving: true, NodeName: node}
}

// Terminating is e, terminating: not ready any more.
func Terminating(e service.Endpoint) service.Endpoint {
	e.Ready, e.Terminating = false, true
	return e
}

// Hinted is e with topology hints, as the EndpointSlice controller writes
// them: forNodes (PreferSameNode) and forZones (PreferSameZone, PreferClose,
// the topology-mode annotation); an empty argument gives no hint of that kind.
func Hinted(e service.Endpoint, forNode, forZone string) service.Endpoint {
	if forNode != "" {
		e.ForNodes = []string{forNode}
	}
	if forZone != "" {
		e.ForZones = []string{forZone}
	}
	return e
}

// HintedEndpoints are ThreeEndpoints hinted by zone: 198.19.1.10 for zone-a,
// the other two for zone-b; with forNodes, each also for its node.
func HintedEndpoints(forNodes bool) []service.Endpoint {
	eps := ThreeEndpoints()
	for i, zone := range []string{"zone-a", "zone-b", "zone-b"} {
		node := ""
		if forNodes {
			node = eps[i].NodeName
		}
		eps[i] = Hinted(eps[i], node, zone)
	}
	return eps
}

// InZone is this node's Node object (ThisNode) labelled with zone.
func InZone(zone string) *service.Node {
	return &service.Node{Name: ThisNode, Labels: map[string]string{"topology.kubernetes.io/zone": zone}}
}

// ThreeEndpoints are two endpoints on ThisNode and one on node-b, on port 8080.
func ThreeEndpoints() []service.Endpoint {
	return []service.Endpoint{
		Endpoint("198.19.1.10:8080", ThisNode),
		Endpoint("198.19.1.11:8080", ThisNode),
		Endpoint("198.19.1.130:8080", "node-b"),
	}
}

// Service builds the one-port ClusterIP Service "default/<name>:p" (TCP) on
// clusterIP:port with eps, then applies opts.
func Service(name, clusterIP string, port uint16, eps []service.Endpoint, opts ...Opt) *service.Service {
	s := &service.Service{
		NamespacedName: service.NamespacedName{Namespace: "default", Name: name},
		Type:           service.TypeClusterIP,
		ClusterIPs:     Addrs(clusterIP),
	}
	p := &service.Port{
		Name:     service.PortName{NamespacedName: s.NamespacedName, Port: "p", Protocol: service.TCP},
		Service:  s,
		Port:     port,
		Protocol: service.TCP,
	}
	p.Endpoints = eps
	s.Ports = []*service.Port{p}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Snapshot is a Snapshot of svcs, without errors.
func Snapshot(svcs ...*service.Service) *service.Snapshot { return service.NewSnapshot(svcs, nil) }
