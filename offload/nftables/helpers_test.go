package nftables

import (
	"net/netip"
	"time"

	"github.com/svcproxy/svcproxy/service"
)

// The test cluster: this node "node-a" at 198.19.0.1, pods in 198.19.1.0/24 (on
// node-a: 198.19.1.0/25; on node-b: 198.19.1.128/25), services in 198.18.0.0/16.
const thisNode = "node-a"

var testConfig = Config{
	NodeName:    thisNode,
	ClusterCIDR: netip.MustParsePrefix("198.19.1.0/24"),
}

// svcOpt changes a test Service.
type svcOpt func(*service.Service)

func withNodePort(np uint16) svcOpt {
	return func(s *service.Service) {
		s.Type = service.TypeNodePort
		s.Ports[0].NodePort = np
	}
}

func withExternalIPs(ips ...string) svcOpt {
	return func(s *service.Service) { s.ExternalIPs = addrs(ips...) }
}

func withLoadBalancer(ips ...string) svcOpt {
	return func(s *service.Service) {
		s.Type = service.TypeLoadBalancer
		s.LoadBalancerIPs = addrs(ips...)
	}
}

func withAffinity(d time.Duration) svcOpt {
	return func(s *service.Service) { s.Affinity = service.Affinity{ClientIP: true, Timeout: d} }
}

func withExternalLocal() svcOpt { return func(s *service.Service) { s.ExternalPolicyLocal = true } }
func withInternalLocal() svcOpt { return func(s *service.Service) { s.InternalPolicyLocal = true } }

func withProtocol(p service.Protocol) svcOpt {
	return func(s *service.Service) {
		s.Ports[0].Protocol = p
		s.Ports[0].Name.Protocol = p
	}
}

func withHeadless() svcOpt {
	return func(s *service.Service) { s.ClusterIPs, s.Headless = nil, true }
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// ep is a ready endpoint "ip:port@node".
func ep(addr, node string) service.Endpoint {
	return service.Endpoint{Addr: netip.MustParseAddrPort(addr), Ready: true, Serving: true, NodeName: node}
}

func terminating(e service.Endpoint) service.Endpoint {
	e.Ready, e.Terminating = false, true
	return e
}

// svc builds a one-port ClusterIP Service "default/<name>:<port name>" (TCP).
func svc(name, clusterIP string, port uint16, eps []service.Endpoint, opts ...svcOpt) *service.Service {
	s := &service.Service{
		NamespacedName: service.NamespacedName{Namespace: "default", Name: name},
		Type:           service.TypeClusterIP,
		ClusterIPs:     addrs(clusterIP),
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

func snapshot(svcs ...*service.Service) *service.Snapshot { return service.NewSnapshot(svcs, nil) }

// threeEndpoints: two on this node, one on node-b.
func threeEndpoints() []service.Endpoint {
	return []service.Endpoint{ep("198.19.1.10:8080", thisNode), ep("198.19.1.11:8080", thisNode), ep("198.19.1.130:8080", "node-b")}
}

func withSourceRanges(ranges ...string) svcOpt {
	return func(s *service.Service) {
		for _, r := range ranges {
			s.LoadBalancerSourceRanges = append(s.LoadBalancerSourceRanges, netip.MustParsePrefix(r))
		}
	}
}

// labPort is the port of svc("web", ...).
var labPort = service.PortName{NamespacedName: service.NamespacedName{Namespace: "default", Name: "web"}, Port: "p", Protocol: service.TCP}
