package kernelsync

import "github.com/svcproxy/svcproxy/service"

// Policy is what a service port's traffic policies decide, the same for the
// iptables and the nftables rules: which of its policy chains it needs, and
// where its internal and external traffic go. It follows kube-proxy's
// syncProxyRules (pkg/proxy/iptables/proxier.go, pkg/proxy/nftables/proxier.go)
// and its ServicePort's UsesClusterEndpoints / UsesLocalEndpoints.
//
// The policy chains: the cluster chain spreads over every usable endpoint
// (iptables SVCP-SVC-, nftables service-), the local chain over this node's
// (SVCP-SVL-, local-).
type Policy struct {
	// ExternallyAccessible: the port has a NodePort, externalIPs or
	// LoadBalancer IPs (of the rules' family).
	ExternallyAccessible bool
	// HasEndpoints: some endpoint is usable, on any node. Without one, all of
	// the port's traffic is rejected.
	HasEndpoints bool
	// UsesClusterChain, UsesLocalChain: the port needs that chain, and it has
	// endpoints. External traffic with policy Local still needs the cluster
	// chain: pods short-circuit to it.
	UsesClusterChain, UsesLocalChain bool
	// InternalLocal: ClusterIP traffic goes to the local chain
	// (internalTrafficPolicy: Local), otherwise to the cluster chain;
	// HasInternal: that chain has endpoints.
	InternalLocal, HasInternal bool
	// ExternalLocal, HasExternal: the same for external traffic
	// (externalTrafficPolicy: Local).
	ExternalLocal, HasExternal bool
	// UsesExtChain: external traffic enters through the port's external chain
	// (SVCP-EXT-, external-). It depends on HasEndpoints, not on HasExternal:
	// the short-circuit rules are needed even when no endpoint is local.
	UsesExtChain bool
}

// Chains returns the chain ClusterIP traffic goes to and the one external
// traffic goes to, given the names of the port's cluster and local chains.
func (pol Policy) Chains(cluster, local string) (internal, external string) {
	internal, external = cluster, cluster
	if pol.InternalLocal {
		internal = local
	}
	if pol.ExternalLocal {
		external = local
	}
	return internal, external
}

// NewPolicy decides the Policy of a port of svc, given whether it is reachable
// from outside the cluster, whether it has a usable endpoint anywhere (hasAny)
// and how many endpoints service.Port.Categorize gave it for policy Cluster
// and for policy Local, all of the rules' family.
func NewPolicy(svc *service.Service, externallyAccessible, hasAny bool, cluster, local int) Policy {
	pol := Policy{ExternallyAccessible: externallyAccessible, HasEndpoints: hasAny}
	// kube-proxy's UsesClusterEndpoints / UsesLocalEndpoints.
	usesCluster := !svc.InternalPolicyLocal || externallyAccessible
	usesLocal := svc.InternalPolicyLocal || (svc.ExternalPolicyLocal && externallyAccessible)
	pol.UsesClusterChain = cluster > 0 && usesCluster
	pol.UsesLocalChain = local > 0 && usesLocal

	pol.InternalLocal, pol.HasInternal = svc.InternalPolicyLocal, hasAny
	if svc.InternalPolicyLocal {
		pol.HasInternal = local > 0
	}
	pol.ExternalLocal, pol.HasExternal = svc.ExternalPolicyLocal, hasAny
	if svc.ExternalPolicyLocal {
		pol.HasExternal = local > 0
	}
	pol.UsesExtChain = pol.HasEndpoints && externallyAccessible
	return pol
}
