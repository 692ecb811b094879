package iptables

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/svcproxy/svcproxy/kernel/conntrack"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
)

// portPlan is what a service port needs, decided before any line is written; it
// follows kube-proxy's syncProxyRules (pkg/proxy/iptables/proxier.go).
type portPlan struct {
	p                   *service.Port
	family              service.Family
	name, proto, port   string
	svcChain, svlChain  string
	extChain, fwChain   string
	cluster, local      []service.Endpoint
	clusterIPs, extIPs  []netip.Addr
	lbIPs               []netip.Addr
	sourceRanges        []netip.Prefix // loadBalancerSourceRanges of the family
	kernelsync.Policy                  // which chains, where traffic goes
	internalChain       string         // ClusterIP traffic: SVCP-SVC- or SVCP-SVL-
	externalPolicyChain string         // external traffic: SVCP-SVC- or SVCP-SVL-
	terse               bool           // a large cluster: the endpoints' rules without comments
}

// endpointComment adds the comment of an endpoint's rule to l, unless the
// cluster is large: kube-proxy leaves these out above 1,000 endpoints
// (appendServiceCommentLocked, largeClusterMode). They are three rules of
// every endpoint, tens of bytes each for iptables-restore to parse and the
// kernel to keep, and with the endpoint's chain name in the rule they say
// nothing a reader cannot find.
func (pp *portPlan) endpointComment(l *lines, s string) *lines {
	if pp.terse {
		return l
	}
	return l.comment(s)
}

// planPort plans p on this node; node is its Node object (nil: unknown), whose
// zone the endpoints' topology hints are matched against.
func planPort(cfg *Config, p *service.Port, node *service.Node) *portPlan {
	svc := p.Service
	fam := cfg.Family
	eps := fam.Port(p).Categorize(cfg.NodeName, node)
	pp := &portPlan{
		p:            p,
		family:       fam,
		name:         p.Name.String(),
		proto:        strings.ToLower(string(p.Protocol)),
		port:         strconv.Itoa(int(p.Port)),
		clusterIPs:   fam.Addrs(svc.ClusterIPs),
		extIPs:       fam.Addrs(svc.ExternalIPs),
		lbIPs:        fam.Addrs(svc.LoadBalancerIPs),
		sourceRanges: fam.Prefixes(svc.LoadBalancerSourceRanges),
		cluster:      eps.Cluster,
		local:        eps.Local,
		terse:        cfg.largeCluster,
	}
	if len(pp.clusterIPs) == 0 {
		return nil // headless, ExternalName or of the other family only: nothing for these rules
	}
	base := portHash(p.Name)
	pp.svcChain, pp.svlChain, pp.extChain, pp.fwChain = prefixSVC+base, prefixSVL+base, prefixEXT+base, prefixFW+base
	external := p.NodePort != 0 || len(pp.extIPs) > 0 || len(pp.lbIPs) > 0
	pp.Policy = kernelsync.NewPolicy(svc, external, eps.HasAny, len(pp.cluster), len(pp.local))
	pp.internalChain, pp.externalPolicyChain = pp.Chains(pp.svcChain, pp.svlChain)
	return pp
}

// usesFirewall: LoadBalancer IPs with loadBalancerSourceRanges go through SVCP-FW-,
// which accepts the sources of service.FirewallSources.
func (pp *portPlan) usesFirewall() bool {
	return len(pp.sourceRanges) > 0 && len(pp.lbIPs) > 0 && pp.HasEndpoints
}

// filterTarget is what the filter table does with traffic that has nowhere to go:
// REJECT (ICMP port unreachable, the client fails fast) if the port has no
// endpoints at all, DROP if it has some but none for this traffic policy.
func (pp *portPlan) filterTarget() (string, string) {
	if !pp.HasEndpoints {
		return "REJECT", pp.name + " has no endpoints"
	}
	return "DROP", pp.name + " has no local endpoints"
}

// match writes the protocol, destination and port matches of a frontend rule.
func (pp *portPlan) match(l *lines, dst, dport string) *lines {
	l.w("-m", pp.proto, "-p", pp.proto)
	if dst != "" {
		l.w("-d", dst)
	}
	return l.w("--dport", dport)
}

// renderPort renders one service port, or returns nil if it has no ClusterIP of the
// rules' family.
func renderPort(cfg *Config, p *service.Port, node *service.Node) *portRules {
	pp := planPort(cfg, p, node)
	if pp == nil {
		return nil
	}
	pr := &portRules{port: p, zone: node.Zone(), name: p.Name, large: cfg.largeCluster,
		status: PortStatus{Port: pp.name, Protocol: string(p.Protocol)}}
	var sh [numShared]lines
	// A port has at most 3 policy chains plus one chain per endpoint.
	own := make(map[string]*lines, 3+len(p.Endpoints))
	chain := func(name string) *lines {
		if own[name] == nil {
			own[name] = &lines{}
			pr.chains = append(pr.chains, name)
		}
		return own[name]
	}
	// Declare in a fixed order, so the text is stable.
	for _, c := range [...]struct {
		name string
		used bool
	}{{pp.svcChain, pp.UsesClusterChain}, {pp.svlChain, pp.UsesLocalChain}, {pp.extChain, pp.UsesExtChain},
		{pp.fwChain, pp.usesFirewall()}} {
		if c.used {
			chain(c.name)
		}
	}
	pr.cips = renderFrontends(cfg, pp, &sh, chain)
	if pp.UsesExtChain {
		renderExternalChain(cfg, pp, chain(pp.extChain))
	}
	if pp.usesFirewall() {
		// The ranges, and the LoadBalancer IPs themselves when the ranges
		// allow this node (service.FirewallSources, kube-proxy's allowFromNode).
		l := chain(pp.fwChain)
		for _, src := range service.FirewallSources(pp.sourceRanges, pp.lbIPs, cfg.NodeIP) {
			l.rule(pp.fwChain).comment(pp.name+" loadbalancer IP").w("-s", src, "-j", pp.extChain).end()
		}
	}
	seps := make(map[netip.AddrPort]string, len(p.Endpoints))
	if pp.UsesClusterChain {
		pr.status.Endpoints = append(pr.status.Endpoints, renderSpread(pp, pp.svcChain, chain(pp.svcChain), pp.cluster, seps)...)
	}
	if pp.UsesLocalChain {
		pr.status.Endpoints = append(pr.status.Endpoints, renderSpread(pp, pp.svlChain, chain(pp.svlChain), pp.local, seps)...)
	}
	renderEndpointChains(pp, seps, chain)
	pr.flows = kernelsync.Flows{Family: conntrack.Family(pp.family), Protocol: pp.proto, Port: p.Port, NodePort: p.NodePort,
		Frontends: slices.Concat(pp.clusterIPs, pp.extIPs, pp.lbIPs), HasEndpoints: pp.HasEndpoints}
	for a := range seps {
		pr.flows.Endpoints = append(pr.flows.Endpoints, a.Addr().Unmap())
	}
	slices.SortFunc(pr.flows.Endpoints, netip.Addr.Compare)

	for i := range sh {
		pr.shared[i] = sh[i].b
	}
	n := 0
	for _, c := range pr.chains {
		n += len(own[c].b)
	}
	pr.text = make([]byte, 0, n)
	for _, c := range pr.chains {
		pr.text = append(pr.text, own[c].b...)
	}
	pr.status.Chains = slices.Clone(pr.chains)
	pr.status.HasEndpoints = pp.HasEndpoints
	return pr
}

// renderFrontends writes the rules that catch a port's destinations: ClusterIPs,
// externalIPs, LoadBalancer IPs and the NodePort, or reject them in filter. In
// a large cluster the ClusterIP jumps go to their blocks' chains: it returns
// them.
func renderFrontends(cfg *Config, pp *portPlan, sh *[numShared]lines, chain func(string) *lines) []cipRule {
	target, why := pp.filterTarget()
	var cips []cipRule
	for _, ip := range pp.clusterIPs {
		dst := ip.String()
		if !pp.HasInternal {
			pp.match(sh[filterServices].rule(chainServices).comment(why), dst, pp.port).w("-j", target).end()
			continue
		}
		if cfg.largeCluster {
			block, name := clusterIPBlock(ip)
			var l lines
			pp.match(l.rule(name).comment(pp.name+" cluster IP"), dst, pp.port).w("-j", pp.internalChain).end()
			cips = append(cips, cipRule{block: block, chain: name, line: l.b})
		} else {
			pp.match(sh[natServices].rule(chainServices).comment(pp.name+" cluster IP"), dst, pp.port).w("-j", pp.internalChain).end()
		}
		// Masquerade ClusterIP traffic from outside the pod network: someone
		// routing the service range to this node may get a reply from an
		// endpoint on another node otherwise (kube-proxy's IfNotLocal rule).
		switch {
		case cfg.MasqueradeAll:
			pp.match(chain(pp.internalChain).rule(pp.internalChain).comment(pp.name+" cluster IP"), dst, pp.port).
				w("-j", chainMarkMasq).end()
		case cfg.ClusterCIDR.IsValid():
			pp.match(chain(pp.internalChain).rule(pp.internalChain).comment(pp.name+" cluster IP"), dst, pp.port).
				w("!", "-s", cfg.ClusterCIDR.Masked().String(), "-j", chainMarkMasq).end()
		}
	}
	external := [...]struct {
		ips  []netip.Addr
		kind string
	}{{pp.extIPs, " external IP"}, {pp.lbIPs, " loadbalancer IP"}}
	for _, e := range external {
		for _, ip := range e.ips {
			if pp.HasEndpoints {
				to := pp.extChain
				if e.kind == " loadbalancer IP" && pp.usesFirewall() {
					to = pp.fwChain
					// kube-proxy's KUBE-PROXY-FIREWALL: SVCP-FW- DNATs only the
					// allowed sources; what is left still has the LB IP as its
					// destination when filter sees it, and is dropped.
					pp.match(sh[filterExternal].rule(chainExternalServices).comment(pp.name+" traffic not accepted by "+pp.fwChain),
						ip.String(), pp.port).w("-j", "DROP").end()
				}
				pp.match(sh[natServices].rule(chainServices).comment(pp.name+e.kind), ip.String(), pp.port).w("-j", to).end()
			}
			if !pp.HasExternal {
				pp.match(sh[filterExternal].rule(chainExternalServices).comment(why), ip.String(), pp.port).w("-j", target).end()
			}
		}
	}
	if hc := pp.p.Service.HealthCheckNodePort; hc != 0 && pp.p.Service.ExternalPolicyLocal && pp.p == pp.p.Service.Ports[0] {
		// The load balancer's health check must reach healthcheck's server even
		// where INPUT's policy is DROP (kube-proxy's KUBE-NODEPORTS in filter).
		sh[filterExternal].rule(chainExternalServices).comment(pp.p.Service.NamespacedName.String()+" health check node port").
			w("-m", "tcp", "-p", "tcp", "--dport", strconv.Itoa(int(hc)), "-m", "addrtype", "--dst-type", "LOCAL", "-j", "ACCEPT").end()
	}
	if pp.p.NodePort == 0 {
		return cips
	}
	np := strconv.Itoa(int(pp.p.NodePort))
	if pp.HasEndpoints {
		pp.match(sh[natNodePorts].rule(chainNodePorts).comment(pp.name), "", np).w("-j", pp.extChain).end()
	}
	if !pp.HasExternal {
		pp.match(sh[filterExternal].rule(chainExternalServices).comment(why).w("-m", "addrtype", "--dst-type", "LOCAL"), "", np).
			w("-j", target).end()
	}
	return cips
}

// renderExternalChain writes SVCP-EXT-: where NodePort, externalIP and LoadBalancer
// traffic goes, by externalTrafficPolicy.
func renderExternalChain(cfg *Config, pp *portPlan, l *lines) {
	if !pp.p.Service.ExternalPolicyLocal {
		// The endpoint may be on another node: SNAT so the reply comes back here.
		l.rule(pp.extChain).comment("masquerade traffic for "+pp.name+" external destinations").w("-j", chainMarkMasq).end()
	} else {
		// Policy Local keeps the client address. Pods reaching an external
		// destination are treated as if they went out to a load balancer and came
		// back: any endpoint. The node itself has the external address as its
		// own, so it needs masquerade (and also goes to any endpoint).
		if cfg.ClusterCIDR.IsValid() {
			l.rule(pp.extChain).comment("pod traffic for "+pp.name+" external destinations").
				w("-s", cfg.ClusterCIDR.Masked().String(), "-j", pp.svcChain).end()
		}
		l.rule(pp.extChain).comment("masquerade LOCAL traffic for "+pp.name+" external destinations").
			w("-m", "addrtype", "--src-type", "LOCAL", "-j", chainMarkMasq).end()
		l.rule(pp.extChain).comment("route LOCAL traffic for "+pp.name+" external destinations").
			w("-m", "addrtype", "--src-type", "LOCAL", "-j", pp.svcChain).end()
	}
	if pp.HasExternal {
		l.rule(pp.extChain).w("-j", pp.externalPolicyChain).end()
	}
}

// renderSpread writes a policy chain's endpoint rules: ClientIP affinity checks
// first, then the statistic spread. It records each endpoint's chain in seps.
func renderSpread(pp *portPlan, chainName string, l *lines, eps []service.Endpoint, seps map[netip.AddrPort]string) []EndpointStatus {
	aff := pp.p.Service.Affinity
	names := make([]string, len(eps))
	addrs := make([]string, len(eps))
	for i, e := range eps {
		if names[i] = seps[e.Addr]; names[i] == "" {
			names[i] = sepChain(pp.p.Name, e.Addr)
			seps[e.Addr] = names[i]
		}
		addrs[i] = e.Addr.String()
	}
	if aff.ClientIP {
		secs := affinitySeconds(aff)
		for i := range eps {
			pp.endpointComment(l.rule(chainName), pp.name+" -> "+addrs[i]).
				w("-m", "recent", "--name", names[i], "--mask", allOnes(pp.family), "--rsource",
					"--rcheck", "--seconds", secs, "--reap", "-j", names[i]).end()
		}
	}
	status := make([]EndpointStatus, len(eps))
	n := len(eps)
	for i, e := range eps {
		pp.endpointComment(l.rule(chainName), pp.name+" -> "+addrs[i])
		prob := "1"
		if i < n-1 {
			prob = probability(n - i)
			l.w("-m", "statistic", "--mode", "random", "--probability", prob)
		}
		l.w("-j", names[i]).end()
		status[i] = EndpointStatus{Addr: addrs[i], Node: e.NodeName, From: chainName, Chain: names[i],
			Probability: prob, Share: 1 / float64(n), Terminating: e.Terminating}
	}
	return status
}

// renderEndpointChains writes one SVCP-SEP- chain per endpoint: mark hairpin
// traffic (a pod reaching itself must see the node, not itself, as the source, or
// it would answer itself directly), remember the client for affinity, DNAT.
func renderEndpointChains(pp *portPlan, seps map[netip.AddrPort]string, chain func(string) *lines) {
	addrs := make([]netip.AddrPort, 0, len(seps))
	for a := range seps {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, func(a, b netip.AddrPort) int { return a.Compare(b) })
	for _, a := range addrs {
		name := seps[a]
		l := chain(name)
		pp.endpointComment(l.rule(name), pp.name).w("-s", a.Addr().Unmap().String(), "-j", chainMarkMasq).end()
		pp.endpointComment(l.rule(name), pp.name)
		if pp.p.Service.Affinity.ClientIP {
			l.w("-m", "recent", "--name", name, "--mask", allOnes(pp.family), "--rsource", "--set")
		}
		l.w("-m", pp.proto, "-p", pp.proto, "-j", "DNAT", "--to-destination", a.String()).end()
	}
}
