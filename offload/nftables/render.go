package nftables

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy/kernel/conntrack"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
)

// portObjects is what one service port contributes to the table: its own chains and
// affinity sets, and its elements in the shared maps. Chain and set names include
// the port's name, so each belongs to one port only.
type portObjects struct {
	port     *service.Port // what it was rendered from
	zone     string        // and this node's zone then: topology hints depend on it
	name     service.PortName
	chains   []chainRules // its own chains, in declaration order
	sets     []affinitySet
	counter  string    // its named counter ("" unless Config.CountConnections)
	elements []element // in the shared maps
	status   PortStatus
	flows    kernelsync.Flows
}

// chainRules is a chain and its rules, in nft syntax.
type chainRules struct {
	name  string
	rules []string
}

// affinitySet is the dynamic set of one endpoint's clients (ClientIP affinity).
type affinitySet struct {
	name    string
	typ     string // ipv4_addr or ipv6_addr
	timeout time.Duration
}

// element is one element of a shared map: its key and verdict.
type element struct {
	set     string
	key     []string
	value   string
	comment string
}

func (e element) id() string { return e.set + " " + strings.Join(e.key, " . ") }

// chainBuilder collects a port's chains in declaration order.
type chainBuilder struct {
	order []string
	rules map[string][]string
}

func (b *chainBuilder) add(chain string, words ...string) {
	if _, ok := b.rules[chain]; !ok {
		b.order = append(b.order, chain)
	}
	b.rules[chain] = append(b.rules[chain], strings.Join(words, " "))
}

// declare makes chain exist (in declaration order) even before it has rules.
func (b *chainBuilder) declare(chain string) {
	if _, ok := b.rules[chain]; !ok {
		b.order = append(b.order, chain)
		b.rules[chain] = nil
	}
}

// renderPort renders one service port, or returns nil if it has no ClusterIP of the
// table's family.
func renderPort(cfg *Config, p *service.Port, node *service.Node) *portObjects {
	pp := planPort(cfg, p, node)
	if pp == nil {
		return nil
	}
	po := &portObjects{port: p, zone: node.Zone(), name: p.Name, status: PortStatus{Port: pp.name, Protocol: string(p.Protocol)}}
	b := &chainBuilder{rules: map[string][]string{}}
	// Declare in a fixed order, so the text is stable.
	for _, c := range [...]struct {
		name string
		used bool
	}{{pp.svcChain, pp.UsesClusterChain}, {pp.localChain, pp.UsesLocalChain}, {pp.extChain, pp.UsesExtChain},
		{pp.fwChain, len(pp.sourceRanges) > 0 && len(pp.lbIPs) > 0}} {
		if c.used {
			b.declare(c.name)
		}
	}
	po.elements = renderFrontends(cfg, pp, b)
	if pp.UsesExtChain {
		renderExternalChain(cfg, pp, b)
	}
	if len(pp.sourceRanges) > 0 && len(pp.lbIPs) > 0 {
		// The ranges, and the LoadBalancer IPs themselves when the ranges allow
		// this node (service.FirewallSources, kube-proxy's allowFromNode).
		sources := service.FirewallSources(pp.sourceRanges, pp.lbIPs, cfg.NodeIP)
		b.add(pp.fwChain, pp.ip+" saddr != {", strings.Join(sources, ", "), "}", "drop")
	}
	if cfg.CountConnections {
		po.counter = prefixCounter + pp.base
	}
	eps := map[netip.AddrPort]bool{}
	if pp.UsesClusterChain {
		po.status.Endpoints = append(po.status.Endpoints, renderSpread(pp, pp.svcChain, pp.cluster, po.counter, b, eps)...)
	}
	if pp.UsesLocalChain {
		po.status.Endpoints = append(po.status.Endpoints, renderSpread(pp, pp.localChain, pp.local, po.counter, b, eps)...)
	}
	po.sets = renderEndpointChains(pp, eps, po.counter, b)
	for _, name := range b.order {
		po.chains = append(po.chains, chainRules{name: name, rules: b.rules[name]})
		po.status.Chains = append(po.status.Chains, name)
	}
	po.status.HasEndpoints = pp.HasEndpoints
	po.flows = kernelsync.Flows{Family: conntrack.Family(cfg.family()), Protocol: pp.proto, Port: p.Port, NodePort: p.NodePort,
		Frontends: slices.Concat(pp.clusterIPs, pp.extIPs, pp.lbIPs), HasEndpoints: pp.HasEndpoints}
	for a := range eps {
		po.flows.Endpoints = append(po.flows.Endpoints, a.Addr().Unmap())
	}
	slices.SortFunc(po.flows.Endpoints, netip.Addr.Compare)
	return po
}

// renderFrontends returns the map elements that catch a port's destinations
// (ClusterIPs, externalIPs, LoadBalancer IPs, the NodePort) or reject them, and
// writes the ClusterIP masquerade rule.
func renderFrontends(cfg *Config, pp *portPlan, b *chainBuilder) []element {
	var out []element
	port := itoa(pp.p.Port)
	el := func(set string, key []string, value string) {
		out = append(out, element{set: set, key: key, value: value, comment: pp.name})
	}
	for _, ip := range pp.clusterIPs {
		key := []string{ip.String(), pp.proto, port}
		if !pp.HasInternal {
			el(mapNoEndpointServices, key, pp.noEndpointVerdict)
			continue
		}
		el(mapServiceIPs, key, "goto "+pp.internalChain)
		// Masquerade ClusterIP traffic from outside the pod network: someone
		// routing the service range to this node may get a reply from an
		// endpoint on another node otherwise (kube-proxy's IfNotLocal rule).
		match := []string{pp.ip + " daddr", ip.String(), pp.proto, "dport", port}
		switch {
		case cfg.MasqueradeAll:
			b.add(pp.internalChain, slices.Concat(match, []string{"jump", chainMarkMasq})...)
		case cfg.ClusterCIDR.IsValid():
			b.add(pp.internalChain, slices.Concat(match, []string{pp.ip + " saddr !=", cfg.ClusterCIDR.Masked().String(), "jump", chainMarkMasq})...)
		}
	}
	for _, ips := range [][]netip.Addr{pp.extIPs, pp.lbIPs} {
		for _, ip := range ips {
			key := []string{ip.String(), pp.proto, port}
			if pp.HasEndpoints {
				el(mapServiceIPs, key, "goto "+pp.extChain)
			}
			if !pp.HasExternal {
				el(mapNoEndpointServices, key, pp.noEndpointVerdict)
			}
		}
	}
	if len(pp.sourceRanges) > 0 {
		for _, ip := range pp.lbIPs {
			el(mapFirewallIPs, []string{ip.String(), pp.proto, port}, "goto "+pp.fwChain)
		}
	}
	if np := pp.p.NodePort; np != 0 {
		key := []string{pp.proto, itoa(np)}
		if pp.HasEndpoints {
			el(mapServiceNodePorts, key, "goto "+pp.extChain)
		}
		if !pp.HasExternal {
			el(mapNoEndpointNodePort, key, pp.noEndpointVerdict)
		}
		if cfg.LocalhostNodePorts && slices.Contains(localhostRejected, pp.proto) {
			el(mapLocalhostNodePortReject, key, "goto "+prefixLocalhostReject+pp.proto)
		}
	}
	return out
}

// renderExternalChain writes external-: where NodePort, externalIP and LoadBalancer
// traffic goes, by externalTrafficPolicy.
func renderExternalChain(cfg *Config, pp *portPlan, b *chainBuilder) {
	c := pp.extChain
	if !pp.p.Service.ExternalPolicyLocal {
		// The endpoint may be on another node: SNAT so the reply comes back here.
		b.add(c, "jump", chainMarkMasq)
	} else {
		// Policy Local keeps the client address. Pods reaching an external
		// destination are treated as if they went out to a load balancer and came
		// back: any endpoint. The node itself has the external address as its
		// own, so it needs masquerade (and also goes to any endpoint).
		if cfg.ClusterCIDR.IsValid() {
			b.add(c, pp.ip+" saddr", cfg.ClusterCIDR.Masked().String(), "goto", pp.svcChain)
		}
		b.add(c, "fib saddr type local jump", chainMarkMasq)
		b.add(c, "fib saddr type local goto", pp.svcChain)
	}
	if pp.HasExternal {
		b.add(c, "goto", pp.externalPolicyChain)
	}
}

// renderSpread writes a policy chain: ClientIP affinity lookups first, then the
// random spread. It records each endpoint in eps.
//
// kube-proxy spreads with one rule, `numgen random mod N vmap { 0 : goto A, ... }`:
// an anonymous verdict map per service port. The kernel's loop check walks every
// verdict map of the table for each jump it validates, so with 10,000 such maps a
// full sync takes minutes (docs/benchmarks/nftables.md). svcproxy writes one rule
// per endpoint instead, as iptables mode does: endpoint i of n is taken with
// `numgen random mod (n-i) == 0`, 1/n, 1/(n-1), ..., and the last one always, which
// gives each endpoint 1/n of new connections and leaves the table with a handful of
// maps whatever the number of Services.
//
// The rule DNATs to the endpoint itself: a port without ClientIP affinity has no
// endpoint chains (kube-proxy writes one per endpoint). Every commit that adds a
// rule makes the kernel walk all chains reachable from the base chains, so a
// quarter of the chains is a cheaper commit, and a full sync has a third of the
// rules to parse (docs/benchmarks.md). Hairpin traffic, which kube-proxy marks in
// the endpoint chain, is found after DNAT instead: masquerading's hairpin set
// (fixedChains). With affinity an endpoint must also remember its client, so it
// keeps its chain (renderEndpointChains).
func renderSpread(pp *portPlan, chain string, eps []service.Endpoint, counter string, b *chainBuilder, seen map[netip.AddrPort]bool) []EndpointStatus {
	aff := pp.p.Service.Affinity
	names := make([]string, len(eps))
	for i, e := range eps {
		if aff.ClientIP {
			names[i] = prefixEndpoint + endpointBase(pp.p.Name, e.Addr)
		}
		seen[e.Addr] = true
	}
	if aff.ClientIP {
		for i, e := range eps {
			b.add(chain, pp.ip+" saddr @"+prefixAffinity+endpointBase(pp.p.Name, e.Addr), "goto", names[i])
		}
	}
	status := make([]EndpointStatus, len(eps))
	n := len(eps)
	for i, e := range eps {
		var rule []string
		if i < n-1 {
			rule = []string{fmt.Sprintf("numgen random mod %d == 0", n-i)}
		}
		if aff.ClientIP {
			rule = append(rule, "goto", names[i])
		} else {
			rule = append(rule, dnatTo(pp, e.Addr, counter)...)
		}
		b.add(chain, rule...)
		status[i] = EndpointStatus{Addr: e.Addr.String(), Node: e.NodeName, From: chain, Chain: cmp.Or(names[i], chain),
			Share: 1 / float64(n), Terminating: e.Terminating}
	}
	return status
}

// dnatTo is the statement that sends a connection to endpoint a, counting it in
// the port's named counter when there is one.
func dnatTo(pp *portPlan, a netip.AddrPort, counter string) []string {
	dnat := []string{"meta l4proto", pp.proto}
	if counter != "" {
		// Only a connection's first packet meets the nat chains: the
		// counter counts new connections (UDP: new flows).
		dnat = append(dnat, "counter name", `"`+counter+`"`)
	}
	return append(dnat, "dnat to", netip.AddrPortFrom(a.Addr().Unmap(), a.Port()).String())
}

// renderEndpointChains writes one endpoint- chain per endpoint of a port with
// ClientIP affinity: remember the client, DNAT. It returns the affinity sets the
// chains update. (Hairpin traffic is masqueraded through the hairpin set, not
// here: fixedChains.)
func renderEndpointChains(pp *portPlan, eps map[netip.AddrPort]bool, counter string, b *chainBuilder) []affinitySet {
	aff := pp.p.Service.Affinity
	if !aff.ClientIP {
		return nil
	}
	addrs := make([]netip.AddrPort, 0, len(eps))
	for a := range eps {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, netip.AddrPort.Compare)
	var sets []affinitySet
	for _, a := range addrs {
		base := endpointBase(pp.p.Name, a)
		c := prefixEndpoint + base
		set := affinitySet{name: prefixAffinity + base, typ: addrType(pp.ip), timeout: affinityTimeout(aff)}
		sets = append(sets, set)
		b.add(c, "update @"+set.name, "{ "+pp.ip+" saddr }")
		b.add(c, dnatTo(pp, a, counter)...)
	}
	return sets
}

func affinityTimeout(a service.Affinity) time.Duration {
	if a.Timeout <= 0 {
		return service.DefaultAffinityTimeout
	}
	return a.Timeout
}

// addrType is the set key type of addresses in the family whose expressions
// start with ip ("ip" or "ip6").
func addrType(ip string) string {
	if ip == "ip6" {
		return "ipv6_addr"
	}
	return "ipv4_addr"
}
