package nftables

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/svcproxy/svcproxy/offload/kernelsync"
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
	clusterIPs, extIPs     []netip.Addr
	lbIPs                  []netip.Addr
	sourceRanges           []netip.Prefix
	kernelsync.Policy             // which chains, where traffic goes
	internalChain          string // ClusterIP traffic: service- or local-
	externalPolicyChain    string // external traffic: service- or local-
	noEndpointVerdict, why string
}

// planPort plans p on this node; node is its Node object (nil: unknown), whose
// zone the endpoints' topology hints are matched against.
func planPort(cfg *Config, p *service.Port, node *service.Node) *portPlan {
	svc := p.Service
	eps := cfg.family().Port(p).Categorize(cfg.NodeName, node)
	pp := &portPlan{
		p:            p,
		name:         p.Name.String(),
		proto:        strings.ToLower(string(p.Protocol)),
		ip:           cfg.ip(),
		clusterIPs:   cfg.addrs(svc.ClusterIPs),
		extIPs:       cfg.addrs(svc.ExternalIPs),
		lbIPs:        cfg.addrs(svc.LoadBalancerIPs),
		sourceRanges: cfg.prefixes(svc.LoadBalancerSourceRanges),
		cluster:      eps.Cluster,
		local:        eps.Local,
	}
	if len(pp.clusterIPs) == 0 {
		return nil // headless, ExternalName or of the other family: nothing for this table
	}
	pp.base = portBase(p.Name)
	pp.svcChain, pp.localChain = prefixService+pp.base, prefixLocal+pp.base
	pp.extChain, pp.fwChain = prefixExternal+pp.base, prefixFirewall+pp.base
	external := p.NodePort != 0 || len(pp.extIPs) > 0 || len(pp.lbIPs) > 0
	pp.Policy = kernelsync.NewPolicy(svc, external, eps.HasAny, len(pp.cluster), len(pp.local))
	pp.internalChain, pp.externalPolicyChain = pp.Chains(pp.svcChain, pp.localChain)

	// Traffic with nowhere to go: REJECT (ICMP port unreachable, the client fails
	// fast) if the port has no endpoints at all, DROP if it has some but none for
	// this traffic policy.
	pp.noEndpointVerdict, pp.why = "goto "+chainReject, pp.name+" has no endpoints"
	if pp.HasEndpoints {
		pp.noEndpointVerdict, pp.why = "drop", pp.name+" has no local endpoints"
	}
	return pp
}

func itoa[T ~uint16 | ~int](n T) string { return strconv.Itoa(int(n)) }
