package service

import (
	"maps"
	"slices"
)

// RendersSameAs reports whether a kernel path renders q exactly as it rendered
// p, so that a partial sync may keep p's rules for q instead of writing them
// again (kernelsync.RenderPorts). Every renderer asks this one question, so a
// field a renderer starts to read is added here once, for all of them.
//
// It compares every field that some renderer reads (offload/iptables,
// offload/nftables, offload/socklb and offload/ipvs, Categorize and the
// family views included):
//   - of the port: Name, Port, Protocol, NodePort, and its Endpoints in order,
//     each by Addr, Ready, Serving, Terminating, NodeName, ForZones and
//     ForNodes (Endpoint.RendersSameAs);
//   - of its Service: NamespacedName, Type, ClusterIPs, ExternalIPs,
//     LoadBalancerIPs, LoadBalancerSourceRanges, HealthCheckNodePort,
//     Affinity, ExternalPolicyLocal, InternalPolicyLocal and Annotations
//     (IPVS's per-Service scheduler and weights), and of its Ports only
//     whether p is the first: iptables writes the Service's health check
//     node port rule with its first port.
//
// It leaves out the fields no renderer reads: the port's TargetPort (its
// endpoints carry the resolved port), the Service's Headless, IPFamilies,
// IPFamilyPolicy (its ClusterIPs say which families it has), ExternalName,
// PublishNotReadyAddresses and Endpoints (the DNS's), TrafficDistribution
// (the endpoints' hints carry it) and Triggers (metrics), and an endpoint's
// Zone and Hostname. servicetest.Unrendered lists them with these reasons;
// a test varies every field of Port, Service and Endpoint and fails when
// one is neither compared here nor on that list, and each renderer's tests
// check that varying a listed field changes nothing they write.
//
// This node's zone, which topology hints are matched against, is not a field
// of the port: a path compares it beside. Snapshots are immutable, so the
// same pointer is the same port.
func (p *Port) RendersSameAs(q *Port) bool {
	if p == q {
		return true
	}
	ps, qs := p.Service, q.Service
	return p.Name == q.Name && p.Port == q.Port && p.Protocol == q.Protocol && p.NodePort == q.NodePort &&
		slices.EqualFunc(p.Endpoints, q.Endpoints, Endpoint.RendersSameAs) &&
		p.first() == q.first() &&
		ps.NamespacedName == qs.NamespacedName && ps.Type == qs.Type &&
		slices.Equal(ps.ClusterIPs, qs.ClusterIPs) && slices.Equal(ps.ExternalIPs, qs.ExternalIPs) &&
		slices.Equal(ps.LoadBalancerIPs, qs.LoadBalancerIPs) &&
		slices.Equal(ps.LoadBalancerSourceRanges, qs.LoadBalancerSourceRanges) &&
		ps.HealthCheckNodePort == qs.HealthCheckNodePort && ps.Affinity == qs.Affinity &&
		ps.ExternalPolicyLocal == qs.ExternalPolicyLocal && ps.InternalPolicyLocal == qs.InternalPolicyLocal &&
		maps.Equal(ps.Annotations, qs.Annotations)
}

// first reports whether p is the first port of its Service.
func (p *Port) first() bool { return len(p.Service.Ports) > 0 && p.Service.Ports[0] == p }

// RendersSameAs reports whether a renderer writes the same for e as for o:
// every field but Zone and Hostname, which none reads, is equal (see
// Port.RendersSameAs).
func (e Endpoint) RendersSameAs(o Endpoint) bool {
	return e.Addr == o.Addr && e.Ready == o.Ready && e.Serving == o.Serving && e.Terminating == o.Terminating &&
		e.NodeName == o.NodeName && slices.Equal(e.ForZones, o.ForZones) && slices.Equal(e.ForNodes, o.ForNodes)
}
