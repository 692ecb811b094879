package nftables

import (
	"iter"
	"maps"
	"net/netip"
	"slices"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
)

// ruleset is a rendered Snapshot: every port, and the ClusterIPs they make up.
type ruleset struct {
	cfg        Config
	ports      []*portObjects
	clusterIPs []string // sorted, for the cluster-ips set

	// Against the previous rendering (when there was one): the ports rendered
	// anew (with what they replace, nil for a new port) and the ports gone. A
	// port reused as it was is in neither.
	changed []change
	removed []*portObjects
}

// change is a port rendered anew: Old is its previous rendering, or nil.
type change = kernelsync.Change[*portObjects]

// render renders snap: the table's objects, every port as
// kernelsync.RenderPorts reuses or renders it (renderPort). A port that renders
// the same, in the same zone of this node (topology hints), as the one a
// rendering in prev was made from reuses that rendering: a sync after one
// change renders one port, not 10,000.
func render(cfg Config, snap *service.Snapshot, prev map[service.PortName]*portObjects) *ruleset {
	ports := kernelsync.RenderPorts(snap, prev, cfg.Carries, func(p *service.Port) *portObjects { return renderPort(&cfg, p, snap.Node()) })
	return &ruleset{cfg: cfg, ports: ports.All, changed: ports.Changed, removed: ports.Removed}
}

// rendered is what rs rendered, as the Ledger records it.
func (rs *ruleset) rendered() kernelsync.Ports[*portObjects] {
	return kernelsync.Ports[*portObjects]{All: rs.ports, Changed: rs.changed, Removed: rs.removed}
}

// Name, RenderedFrom and Flows implement kernelsync.Port.
func (po *portObjects) Name() service.PortName                { return po.name }
func (po *portObjects) RenderedFrom() (*service.Port, string) { return po.port, po.zone }
func (po *portObjects) Flows() *kernelsync.Flows              { return &po.flows }

// ipsChanged reports whether the ClusterIPs of the rendered ports may differ from
// the previous rendering's: a port came, went, or changed its Service's ClusterIPs.
func (rs *ruleset) ipsChanged() bool {
	if len(rs.removed) > 0 {
		return true
	}
	for _, c := range rs.changed {
		if c.Old == nil || !slices.Equal(c.Old.port.Service.ClusterIPs, c.Cur.port.Service.ClusterIPs) {
			return true
		}
	}
	return false
}

// collectClusterIPs fills rs.clusterIPs from the ports: the cluster-ips set.
func (rs *ruleset) collectClusterIPs() {
	ips := map[string]bool{}
	for _, po := range rs.ports {
		for _, ip := range rs.cfg.addrs(po.port.Service.ClusterIPs) {
			ips[ip.String()] = true
		}
	}
	rs.clusterIPs = slices.Sorted(maps.Keys(ips))
}

// addTable writes the table's fixed part: the table, its base chains, the shared
// chains with their rules, the sets and maps (flushed: a full sync adds every
// element again). Into a new table (fresh) nothing is flushed: there is nothing
// to flush, and a `flush` line is one more command for nft to parse and the
// kernel to run (10,000 of them at 10,000 service ports, one per port chain).
func addTable(tx *knftables.Transaction, cfg *Config, fresh bool) {
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("rules for svcproxy")})
	for _, bc := range baseChains {
		tx.Add(&knftables.Chain{Name: bc.name, Type: knftables.PtrTo(bc.typ), Hook: knftables.PtrTo(bc.hook),
			Priority: knftables.PtrTo(bc.priority)})
	}
	for _, obj := range tableSets(cfg) {
		tx.Add(obj)
		if !fresh {
			tx.Flush(obj)
		}
	}
	for _, ip := range cfg.nodeIPs() {
		tx.Add(&knftables.Element{Set: setNodePortIPs, Key: []string{ip.String()}})
	}
	if cfg.LocalhostNodePorts {
		for _, proto := range localhostRejected {
			tx.Add(&knftables.Counter{Name: prefixLocalhostRejected + proto}) // an existing counter keeps its count
		}
	}
	fixed := fixedChains(cfg)
	for _, c := range fixed[len(baseChains):] { // base chains were added above, with their hooks
		tx.Add(&knftables.Chain{Name: c.name})
	}
	for _, c := range fixed {
		if !fresh {
			tx.Flush(&knftables.Chain{Name: c.name})
		}
		for _, r := range c.rules {
			tx.Add(&knftables.Rule{Chain: c.name, Rule: r})
		}
	}
}

// tableSets are the table's shared sets and maps, declared as addTable writes
// them. partialTx declares a set again before it adds elements: that is how
// nft gets to write them in one block (kernel/nftables).
func tableSets(cfg *Config) []knftables.Object {
	addr := cfg.addrType()
	var out []knftables.Object
	for _, s := range []struct {
		name, typ, comment string
		isMap              bool
	}{
		{setClusterIPs, addr, "ClusterIPs with at least one port", false},
		{setNodePortIPs, addr, "addresses that accept NodePort traffic", false},
		{setHairpin, addr + " . " + addr, "endpoints (source . destination) that may reach themselves through a Service: masquerade", false},
		{mapServiceIPs, addr + " . inet_proto . inet_service : verdict", "ClusterIP, external IP and LoadBalancer IP traffic", true},
		{mapServiceNodePorts, "inet_proto . inet_service : verdict", "NodePort traffic", true},
		{mapNoEndpointServices, addr + " . inet_proto . inet_service : verdict", "REJECT or DROP service traffic without endpoints", true},
		{mapNoEndpointNodePort, "inet_proto . inet_service : verdict", "REJECT or DROP NodePort traffic without endpoints", true},
		{mapFirewallIPs, addr + " . inet_proto . inet_service : verdict", "LoadBalancer IPs with loadBalancerSourceRanges", true},
		{mapLocalhostNodePortReject, "inet_proto . inet_service : verdict", "localhost NodePorts rejected by svcproxy", true},
	} {
		if s.name == mapLocalhostNodePortReject && !cfg.LocalhostNodePorts {
			continue
		}
		if s.name == setNodePortIPs && !cfg.nodePortSet() {
			continue
		}
		if s.isMap {
			out = append(out, &knftables.Map{Name: s.name, Type: s.typ, Comment: knftables.PtrTo(s.comment)})
		} else {
			out = append(out, &knftables.Set{Name: s.name, Type: s.typ, Comment: knftables.PtrTo(s.comment)})
		}
	}
	return out
}

// tableSet returns the declaration of one of tableSets.
func tableSet(cfg *Config, name string) knftables.Object {
	for _, obj := range tableSets(cfg) {
		if m, ok := obj.(*knftables.Map); ok && m.Name == name {
			return obj
		}
		if s, ok := obj.(*knftables.Set); ok && s.Name == name {
			return obj
		}
	}
	return nil
}

// baseChain is where the table hooks into the packet's path.
type baseChain struct {
	name     string
	typ      knftables.BaseChainType
	hook     knftables.BaseChainHook
	priority knftables.BaseChainPriority
}

// natPriority is one before dstnat (-100), where iptables' nat table sits. When
// two nat chains at one hook could DNAT a new connection, the kernel runs them in
// priority order and stops at the first that binds: at dstnat-1 svcproxy's table is
// met before any iptables nat rule, so in hybrid mode a promoted port's DNAT wins
// over its userspace REDIRECT portal while both exist (install the kernel path
// first, then remove the portal). kube-proxy uses dstnat; nothing else changes.
const natPriority = knftables.DNATPriority + "-1"

// baseChains are kube-proxy's: filter chains just before DNAT (dstnat-10), so that
// they see the address the client sent to, and one just after it in output.
var baseChains = []baseChain{
	{chainFilterPrerouting, knftables.FilterType, knftables.PreroutingHook, knftables.DNATPriority + "-10"},
	{chainFilterInput, knftables.FilterType, knftables.InputHook, knftables.DNATPriority + "-10"},
	{chainFilterForward, knftables.FilterType, knftables.ForwardHook, knftables.DNATPriority + "-10"},
	{chainFilterOutput, knftables.FilterType, knftables.OutputHook, knftables.DNATPriority + "-10"},
	{chainFilterOutputPostDNAT, knftables.FilterType, knftables.OutputHook, knftables.DNATPriority + "+10"},
	{chainNATPrerouting, knftables.NATType, knftables.PreroutingHook, natPriority},
	{chainNATOutput, knftables.NATType, knftables.OutputHook, natPriority},
	{chainNATPostrouting, knftables.NATType, knftables.PostroutingHook, knftables.SNATPriority},
}

// fixedChains are the chains every full sync writes whole: the base chains first,
// in the order of baseChains, then the shared regular chains.
func fixedChains(cfg *Config) []chainRules {
	mark, ip := cfg.mark(), cfg.ip()
	// NodePorts: on the configured node addresses, or on every local one but
	// loopback (a NodePort on 127.0.0.1 would need route_localnet).
	nodePorts := "fib daddr type local " + ip + " daddr != " + cfg.loopback()
	if cfg.nodePortSet() {
		nodePorts = ip + " daddr @" + setNodePortIPs
	}
	const isNew = "ct state new "
	nodePortChecks := []string{nodePorts + " meta l4proto . th dport vmap @" + mapNoEndpointNodePort}
	var localhost []chainRules
	if cfg.LocalhostNodePorts {
		// kube-proxy's setupNFTables: packets to loopback for a node port
		// the listeners do not serve are counted and rejected.
		nodePortChecks = append(nodePortChecks, ip+" daddr "+cfg.loopback()+" meta l4proto . th dport vmap @"+mapLocalhostNodePortReject)
		for _, proto := range localhostRejected {
			localhost = append(localhost, chainRules{prefixLocalhostReject + proto,
				[]string{`counter name "` + prefixLocalhostRejected + proto + `" reject`}})
		}
	}
	return append([]chainRules{
		{chainFilterPrerouting, []string{isNew + "jump " + chainFirewallCheck}},
		{chainFilterInput, []string{isNew + "jump " + chainNodePortEndpointsCheck, isNew + "jump " + chainServiceEndpointsCheck}},
		{chainFilterForward, []string{isNew + "jump " + chainServiceEndpointsCheck, isNew + "jump " + chainClusterIPsCheck}},
		{chainFilterOutput, []string{isNew + "jump " + chainServiceEndpointsCheck, isNew + "jump " + chainFirewallCheck}},
		{chainFilterOutputPostDNAT, []string{isNew + "jump " + chainClusterIPsCheck}},
		{chainNATPrerouting, []string{"jump " + chainServices}},
		{chainNATOutput, []string{"jump " + chainServices}},
		{chainNATPostrouting, []string{"jump " + chainMasquerading}},
		{chainServices, []string{
			ip + " daddr . meta l4proto . th dport vmap @" + mapServiceIPs,
			nodePorts + " meta l4proto . th dport vmap @" + mapServiceNodePorts,
		}},
		{chainServiceEndpointsCheck, []string{ip + " daddr . meta l4proto . th dport vmap @" + mapNoEndpointServices}},
		{chainNodePortEndpointsCheck, nodePortChecks},
		{chainFirewallCheck, []string{ip + " daddr . meta l4proto . th dport vmap @" + mapFirewallIPs}},
		// A ClusterIP answers only on its Services' ports; anything else is
		// refused at once rather than routed out towards the service range.
		// (kube-proxy also drops traffic to unallocated ClusterIPs of its
		// --service-cluster-ip-range; svcproxy is not told that range.)
		{chainClusterIPsCheck, []string{ip + " daddr @" + setClusterIPs + " reject"}},
		{chainMarkMasq, []string{"mark set mark or " + mark}},
		{chainMasquerading, []string{
			// Hairpin: an endpoint that reached itself through a Service must
			// see the node as the source, or it would answer itself directly
			// and the client would drop the reply. After DNAT its source is
			// its destination: the set holds "E . E" for every endpoint E.
			// kube-proxy marks this in each endpoint's chain; svcproxy has
			// endpoint chains only for ClientIP affinity (renderSpread).
			ip + " saddr . " + ip + " daddr @" + setHairpin + " jump " + chainMarkMasq,
			"mark and " + mark + " == 0 return",
			// Clear the mark so a packet re-entering the stack (e.g. after an
			// IPsec transform) is not masqueraded twice, as kube-proxy does.
			"mark set mark xor " + mark,
			"masquerade fully-random",
		}},
		{chainReject, []string{"reject"}},
	}, localhost...)
}

// addPort writes a port's sets and chains (each chain flushed unless the table is
// new (fresh), then its rules).
func addPort(tx *knftables.Transaction, po *portObjects, fresh bool) {
	if po.counter != "" {
		tx.Add(&knftables.Counter{Name: po.counter}) // an existing counter keeps its count
	}
	for _, s := range po.sets {
		tx.Add(&knftables.Set{Name: s.name, Type: s.typ, Flags: []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag},
			Timeout: knftables.PtrTo(s.timeout)})
	}
	for _, c := range po.chains {
		ch := &knftables.Chain{Name: c.name}
		tx.Add(ch)
		if !fresh {
			tx.Flush(ch)
		}
	}
	for _, c := range po.chains {
		for _, r := range c.rules {
			tx.Add(&knftables.Rule{Chain: c.name, Rule: r})
		}
	}
}

func addElement(tx *knftables.Transaction, e element) {
	el := &knftables.Element{Key: e.key, Value: []string{e.value}, Comment: knftables.PtrTo(e.comment)}
	if isSet(e.set) {
		el.Set, el.Value, el.Comment = e.set, nil, nil
	} else {
		el.Map = e.set
	}
	tx.Add(el)
}

func deleteElement(tx *knftables.Transaction, e element) {
	el := &knftables.Element{Key: e.key}
	if isSet(e.set) {
		el.Set = e.set
	} else {
		el.Map = e.set
	}
	tx.Delete(el)
}

// deleteObjects flushes and deletes chains, then deletes sets: the chains may
// jump to one another and update the sets, and within one transaction the kernel
// lets an object go once nothing refers to it any more.
func deleteObjects(tx *knftables.Transaction, chains, sets, counters []string) {
	for _, c := range chains {
		tx.Flush(&knftables.Chain{Name: c})
	}
	for _, c := range chains {
		tx.Delete(&knftables.Chain{Name: c})
	}
	for _, s := range sets {
		tx.Delete(&knftables.Set{Name: s})
	}
	for _, c := range counters {
		tx.Delete(&knftables.Counter{Name: c})
	}
}

// fullTx writes everything into tx: fullParts, in one transaction (Render's).
func (rs *ruleset) fullTx(tx *knftables.Transaction, stale staleObjects) {
	for fill := range rs.fullParts(stale) {
		fill(tx)
	}
}

// A full sync is written in parts (kernel/nftables' RunParts: one nft
// transaction, each part let go once nft has it): partPorts ports' chains
// a part, partElements elements. At 10,000 service ports the transaction
// made whole is ~76,000 knftables objects and ~7 MB of text, and its peak,
// on top of everything else the process holds, is what the garbage
// collector then lets the heap double (docs/benchmarks/kubeproxy.md); a part
// of these sizes is a few hundred kilobytes, and the parts cost no more
// operations than the whole: a set's declaration again every partElements
// elements.
const (
	partPorts    = 256
	partElements = 2048
)

// fullParts writes everything, part by part: the fixed part, every port, every
// element, and the deletion of stale port chains and sets (found in the kernel
// by the caller).
func (rs *ruleset) fullParts(stale staleObjects) iter.Seq[func(*knftables.Transaction)] {
	return func(yield func(func(*knftables.Transaction)) bool) {
		fresh := stale.noTable
		if !yield(func(tx *knftables.Transaction) { addTable(tx, &rs.cfg, fresh) }) {
			return
		}
		for ports := range slices.Chunk(rs.ports, partPorts) {
			if !yield(func(tx *knftables.Transaction) {
				for _, po := range ports {
					addPort(tx, po, fresh)
				}
			}) {
				return
			}
		}
		// Grouped by set, each group after its set's declaration: nft then
		// reads each set's elements as one command (kernel/nftables).
		for els := range rs.elementParts {
			if !yield(func(tx *knftables.Transaction) { addElements(tx, &rs.cfg, els) }) {
				return
			}
		}
		yield(func(tx *knftables.Transaction) {
			for _, m := range stale.maps {
				tx.Delete(&knftables.Map{Name: m})
			}
			deleteObjects(tx, stale.chains, stale.sets, stale.counters)
		})
	}
}

// elementParts yields every element of the shared sets and maps, the set of
// each first met first (cluster-ips, hairpin, then as the ports have them),
// each element once, in runs of at most partElements of one set.
func (rs *ruleset) elementParts(yield func([]element) bool) {
	var order []string
	if len(rs.clusterIPs) > 0 {
		order = append(order, setClusterIPs)
	}
	hairpin := hairpinAddrs(rs.ports)
	if len(hairpin) > 0 {
		order = append(order, setHairpin)
	}
	for _, po := range rs.ports {
		for _, e := range po.elements {
			if !slices.Contains(order, e.set) {
				order = append(order, e.set)
			}
		}
	}
	run := make([]element, 0, partElements)
	flush := func() bool {
		if len(run) == 0 {
			return true
		}
		ok := yield(run)
		run = make([]element, 0, partElements) // run is the part's now
		return ok
	}
	add := func(e element) bool {
		run = append(run, e)
		return len(run) < partElements || flush()
	}
	for _, set := range order {
		switch set {
		case setClusterIPs:
			for _, ip := range rs.clusterIPs {
				if !add(element{set: setClusterIPs, key: []string{ip}}) {
					return
				}
			}
		case setHairpin:
			for _, a := range hairpin {
				if !add(hairpinElement(a)) {
					return
				}
			}
		default:
			seen := map[string]bool{} // two ports may name one key (an external IP they share)
			for _, po := range rs.ports {
				for _, e := range po.elements {
					if e.set == set && !seen[e.id()] {
						seen[e.id()] = true
						if !add(e) {
							return
						}
					}
				}
			}
		}
		if !flush() {
			return
		}
	}
}

// isSet reports whether a shared set's elements have no value.
func isSet(name string) bool { return name == setClusterIPs || name == setHairpin }

// hairpinElement is endpoint address a's element of the hairpin set.
func hairpinElement(a netip.Addr) element {
	return element{set: setHairpin, key: []string{a.String(), a.String()}}
}

// hairpinAddrs returns the endpoint addresses of ports, sorted, each once.
func hairpinAddrs(ports []*portObjects) []netip.Addr {
	var out []netip.Addr
	for _, po := range ports {
		out = append(out, po.flows.Endpoints...)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}
