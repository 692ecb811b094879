package service

import (
	"slices"

	v1 "k8s.io/api/core/v1"
)

// Endpoint selection happens here and nowhere else: every path (the userspace
// proxier, iptables, nftables, IPVS, and hybrid through them) asks
// Port.Categorize which endpoints this node sends a port's traffic to. It is
// kube-proxy's CategorizeEndpoints (pkg/proxy/topology.go, v1.37.2) with its
// helpers topologyModeFromHints and availableForTopology, which every
// kube-proxy mode calls too.

// The topology modes Categorize may put in force (v1.ServiceTrafficDistribution
// values). PreferClose is the older name of PreferSameZone: the EndpointSlice
// controller gives both the same zone hints, and the proxy reads only hints.
const (
	TopologyPreferSameNode = v1.ServiceTrafficDistributionPreferSameNode
	TopologyPreferSameZone = v1.ServiceTrafficDistributionPreferSameZone
)

// Categorized is a service port's endpoints as this node's proxy uses them.
type Categorized struct {
	// Cluster are the endpoints for traffic policy Cluster, narrowed by the
	// topology hints when they apply: the ready ones, or, when none is ready
	// anywhere, the serving terminating ones (KEP-1669). nil when the port
	// never uses policy Cluster (internalTrafficPolicy Local and reachable
	// only through its ClusterIP).
	Cluster []Endpoint
	// Local are the endpoints on this node for traffic policy Local: its ready
	// ones, or, when none of them is ready, its serving terminating ones.
	// Topology does not narrow them. nil when the port never uses policy
	// Local.
	Local []Endpoint
	// Reachable is the union of Cluster and Local, in the Port's order.
	Reachable []Endpoint
	// HasAny: the port has a usable endpoint somewhere in the cluster, even
	// when Reachable is empty. Without one its traffic is rejected; with one
	// but none for a policy, that policy's traffic is dropped.
	HasAny bool
	// Topology is the hint mode in force for Cluster: TopologyPreferSameNode,
	// TopologyPreferSameZone, or "" (every ready endpoint).
	Topology string
}

// ExternallyAccessible reports whether the port is reachable through more
// than its ClusterIP: a NodePort, externalIPs or LoadBalancer IPs (kube-proxy's
// ServicePort.ExternallyAccessible).
func (p *Port) ExternallyAccessible() bool {
	svc := p.Service
	return p.NodePort != 0 || len(svc.ExternalIPs) > 0 || len(svc.LoadBalancerIPs) > 0
}

// UsesClusterEndpoints reports whether some of the port's traffic follows
// policy Cluster: internalTrafficPolicy is Cluster, or the port takes external
// traffic at all (even with externalTrafficPolicy Local, pods and the node
// short-circuit to every endpoint). kube-proxy's UsesClusterEndpoints.
func (p *Port) UsesClusterEndpoints() bool {
	return !p.Service.InternalPolicyLocal || p.ExternallyAccessible()
}

// UsesLocalEndpoints reports whether some of the port's traffic follows
// policy Local. kube-proxy's UsesLocalEndpoints.
func (p *Port) UsesLocalEndpoints() bool {
	return p.Service.InternalPolicyLocal || (p.Service.ExternalPolicyLocal && p.ExternallyAccessible())
}

// Categorize returns the endpoints this node sends the port's traffic to.
// nodeName is this node's name (an endpoint whose nodeName it is is local,
// and forNodes hints name it); node is its Node object, whose
// topology.kubernetes.io/zone label the forZones hints are matched against,
// or nil when unknown (then zone hints are ignored, as for a node without the
// label).
//
// It follows kube-proxy's CategorizeEndpoints step by step; the Port's order
// is kept in every list, where kube-proxy's merged list has map order.
func (p *Port) Categorize(nodeName string, node *Node) Categorized {
	var c Categorized
	if len(p.Endpoints) == 0 {
		return c
	}
	zone := node.Zone()
	isLocal := func(e Endpoint) bool { return e.NodeName != "" && e.NodeName == nodeName }
	servingTerminating := func(e Endpoint) bool { return e.Serving && e.Terminating }

	if p.UsesClusterEndpoints() {
		c.Topology = topologyModeFromHints(p.Endpoints, nodeName, zone)
		c.Cluster = filterEndpoints(p.Endpoints, func(e Endpoint) bool {
			return e.Ready && availableForTopology(e, c.Topology, nodeName, zone)
		})
		// No ready endpoint for the topology means none anywhere: the mode
		// needs one (topologyModeFromHints). Fall back to terminating ones.
		if len(c.Cluster) == 0 {
			c.Cluster = filterEndpoints(p.Endpoints, servingTerminating)
		}
		c.HasAny = len(c.Cluster) > 0
	}
	if !p.UsesLocalEndpoints() {
		c.Reachable = c.Cluster
		return c
	}

	var localReady, localTerminating bool
	for _, e := range p.Endpoints {
		switch {
		case e.Ready:
			c.HasAny = true
			localReady = localReady || isLocal(e)
		case servingTerminating(e):
			c.HasAny = true
			localTerminating = localTerminating || isLocal(e)
		}
	}
	useTerminating := !localReady && localTerminating
	switch {
	case localReady:
		c.Local = filterEndpoints(p.Endpoints, func(e Endpoint) bool { return isLocal(e) && e.Ready })
	case useTerminating:
		c.Local = filterEndpoints(p.Endpoints, func(e Endpoint) bool { return isLocal(e) && servingTerminating(e) })
	default:
		c.Local = []Endpoint{} // used, and empty
	}

	switch {
	case !p.UsesClusterEndpoints():
		c.Reachable = c.Local
	case c.Topology == "" && !useTerminating:
		// Local holds ready endpoints only and Cluster every ready one: the
		// union is Cluster.
		c.Reachable = c.Cluster
	default:
		// Cluster may hold remote endpoints Local lacks, Local terminating or
		// topologically unavailable ones Cluster lacks.
		c.Reachable = filterEndpoints(p.Endpoints, func(e Endpoint) bool {
			return contains(c.Cluster, e) || contains(c.Local, e)
		})
	}
	return c
}

// topologyModeFromHints returns the hint mode for the endpoints, as
// kube-proxy's topologyModeFromHints: PreferSameNode when every ready endpoint
// has a node hint and one names this node; else PreferSameZone when every
// ready endpoint has a zone hint and one names this node's zone; else "".
// (kube-proxy checks node hints only with the PreferSameTrafficDistribution
// feature gate, GA and locked on since 1.35.)
func topologyModeFromHints(eps []Endpoint, nodeName, zone string) string {
	hasReady := false
	allNodeHints, forNode := true, false
	allZoneHints, forZone := true, false
	for _, e := range eps {
		if !e.Ready {
			continue
		}
		hasReady = true
		if len(e.ForNodes) == 0 {
			allNodeHints = false
		} else if slices.Contains(e.ForNodes, nodeName) {
			forNode = true
		}
		if len(e.ForZones) == 0 {
			allZoneHints = false
		} else if slices.Contains(e.ForZones, zone) {
			forZone = true
		}
	}
	switch {
	case !hasReady:
		return ""
	case allNodeHints && forNode:
		return TopologyPreferSameNode
	case allZoneHints && forZone:
		// A node without a zone label (zone "") gets here only if a hint
		// names the zone "", as in kube-proxy.
		return TopologyPreferSameZone
	}
	return ""
}

// availableForTopology reports whether e serves this node under mode
// (kube-proxy's availableForTopology). The fallback is in choosing the mode,
// not here.
func availableForTopology(e Endpoint, mode, nodeName, zone string) bool {
	switch mode {
	case "":
		return true
	case TopologyPreferSameNode:
		return slices.Contains(e.ForNodes, nodeName)
	case TopologyPreferSameZone:
		return slices.Contains(e.ForZones, zone)
	}
	return false
}

// filterEndpoints returns the endpoints of eps that keep accepts, in order; an
// empty list, not nil, when none does.
func filterEndpoints(eps []Endpoint, keep func(Endpoint) bool) []Endpoint {
	out := make([]Endpoint, 0, len(eps))
	for _, e := range eps {
		if keep(e) {
			out = append(out, e)
		}
	}
	return out
}

// contains reports whether eps holds an endpoint with e's address.
func contains(eps []Endpoint, e Endpoint) bool {
	return slices.ContainsFunc(eps, func(x Endpoint) bool { return x.Addr == e.Addr })
}
