package nftables

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/svcproxy/svcproxy/service"
)

// portPlan is what a service port needs, decided before anything is written; it
// follows kube-proxy's syncProxyRules (pkg/proxy/nftables/proxier.go), and makes the
// same decisions as offload/iptables.
type portPlan struct {
	p                      *service.Port
	name, proto            string
	ip                     string // the family's expression prefix: ip or ip6
	base                   string // the readable part of the port's chain names
	svcChain, localChain   string
	extChain, fwChain      string
	cluster, local         []service.Endpoint
	hasEndpoints           bool // usable endpoints anywhere
	hasInternal            bool // ClusterIP traffic has somewhere to go
	hasExternal            bool // external traffic has somewhere to go
	internalChain          string
	externalPolicyChain    string
	usesClusterChain       bool
	usesLocalChain         bool
	usesExtChain           bool
	clusterIPs, extIPs     []netip.Addr
	lbIPs                  []netip.Addr
	sourceRanges           []netip.Prefix
	externallyAccessible   bool
	noEndpointVerdict, why string
}

func planPort(cfg *Config, p *service.Port) *portPlan {
	svc := p.Service
	pp := &portPlan{
		p:            p,
		name:         p.Name.String(),
		proto:        strings.ToLower(string(p.Protocol)),
		ip:           cfg.ip(),
		clusterIPs:   cfg.addrs(svc.ClusterIPs),
		extIPs:       cfg.addrs(svc.ExternalIPs),
		lbIPs:        cfg.addrs(svc.LoadBalancerIPs),
		sourceRanges: cfg.prefixes(svc.LoadBalancerSourceRanges),
		cluster:      cfg.endpoints(p.Usable()),
		local:        cfg.endpoints(p.LocalUsable(cfg.NodeName)),
	}
	if len(pp.clusterIPs) == 0 {
		return nil // headless, ExternalName or of the other family: nothing for this table
	}
	pp.base = portBase(p.Name)
	pp.svcChain, pp.localChain = prefixService+pp.base, prefixLocal+pp.base
	pp.extChain, pp.fwChain = prefixExternal+pp.base, prefixFirewall+pp.base
	pp.externallyAccessible = p.NodePort != 0 || len(pp.extIPs) > 0 || len(pp.lbIPs) > 0
	pp.hasEndpoints = len(pp.cluster) > 0

	// kube-proxy's UsesClusterEndpoints / UsesLocalEndpoints: external traffic
	// with policy Local still needs the cluster chain for pod short-circuiting.
	usesCluster := !svc.InternalPolicyLocal || pp.externallyAccessible
	usesLocal := svc.InternalPolicyLocal || (svc.ExternalPolicyLocal && pp.externallyAccessible)
	pp.usesClusterChain = len(pp.cluster) > 0 && usesCluster
	pp.usesLocalChain = len(pp.local) > 0 && usesLocal

	pp.internalChain, pp.hasInternal = pp.svcChain, pp.hasEndpoints
	if svc.InternalPolicyLocal {
		pp.internalChain, pp.hasInternal = pp.localChain, len(pp.local) > 0
	}
	pp.externalPolicyChain, pp.hasExternal = pp.svcChain, pp.hasEndpoints
	if svc.ExternalPolicyLocal {
		pp.externalPolicyChain, pp.hasExternal = pp.localChain, len(pp.local) > 0
	}
	pp.usesExtChain = pp.hasEndpoints && pp.externallyAccessible

	// Traffic with nowhere to go: REJECT (ICMP port unreachable, the client fails
	// fast) if the port has no endpoints at all, DROP if it has some but none for
	// this traffic policy.
	pp.noEndpointVerdict, pp.why = "goto "+chainReject, pp.name+" has no endpoints"
	if pp.hasEndpoints {
		pp.noEndpointVerdict, pp.why = "drop", pp.name+" has no local endpoints"
	}
	return pp
}

func itoa[T ~uint16 | ~int](n T) string { return strconv.Itoa(int(n)) }
