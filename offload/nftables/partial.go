package nftables

import (
	"net/netip"
	"slices"

	"sigs.k8s.io/knftables"
)

// partialTx writes what differs from the last applied state, and nothing else: the
// chains and sets of changed ports, their elements, the cluster-ips set's
// difference, and the flush of the chains that removed ports and endpoints leave.
// The fixed part of the table and the other 9,999 ports are not touched. It returns
// false when there is nothing to write.
//
// A chain that is no longer used is flushed, not deleted, and its affinity sets and
// counter are left: nft 1.0.6 reads every chain of the namespace before any
// `delete` (0.3 s and more at 10,000 ports), while a flush needs nothing. An empty
// chain that nothing jumps to is inert; the next full sync deletes it with the
// other stale objects it finds in the kernel. kube-proxy also flushes stale chains
// first and deletes them in a later sync (for a different reason: older kernels
// may still hold a reference for a moment).
func (rs *ruleset) partialTx(tx *knftables.Transaction, appliedIPs []string) bool {
	var addEls, delEls []element
	var staleChains []string
	for _, c := range rs.changed {
		addPort(tx, c.Cur, false)
		var oldEls []element
		if c.Old != nil {
			oldEls = c.Old.elements
			staleChains = append(staleChains, missing(chainNames(c.Old), chainNames(c.Cur))...)
		}
		add, del := diffElements(oldEls, c.Cur.elements)
		addEls, delEls = append(addEls, add...), append(delEls, del...)
		// Hairpin elements are added for new endpoint addresses and never
		// deleted here: another port may share the address, and a stale
		// "E . E" is inert (only a packet from E to E after DNAT matches it,
		// which is hairpin traffic whatever Service it went through). The
		// next full sync writes the set anew.
		var had []netip.Addr
		if c.Old != nil {
			had = c.Old.flows.Endpoints
		}
		for _, a := range c.Cur.flows.Endpoints {
			if _, found := slices.BinarySearchFunc(had, a, netip.Addr.Compare); !found {
				addEls = append(addEls, hairpinElement(a))
			}
		}
	}
	for _, old := range rs.removed {
		delEls = append(delEls, old.elements...)
		staleChains = append(staleChains, chainNames(old)...)
	}
	if !sameSlice(appliedIPs, rs.clusterIPs) {
		gone, added := diffSorted(appliedIPs, rs.clusterIPs)
		for _, ip := range gone {
			delEls = append(delEls, element{set: setClusterIPs, key: []string{ip}})
		}
		for _, ip := range added {
			addEls = append(addEls, element{set: setClusterIPs, key: []string{ip}})
		}
	}
	// Elements go before the chains they point to, and are added after the
	// chains they point to exist.
	for _, e := range delEls {
		deleteElement(tx, e)
	}
	addElements(tx, &rs.cfg, addEls)
	slices.Sort(staleChains)
	for _, c := range staleChains {
		tx.Flush(&knftables.Chain{Name: c})
	}
	return tx.NumOperations() > 0
}

// addElements adds els grouped by set, each group after a declaration of its
// set or map (which changes nothing in the kernel: the set exists). nft needs
// only the table for a set declared with its elements, `add set ip svcproxy S {
// ...; elements = { ... } }`, which kernel/nftables writes from these lines,
// while a bare `add element` makes nft 1.0.6 list every chain of the namespace
// first (kernel/nftables: chainBlocks).
func addElements(tx *knftables.Transaction, cfg *Config, els []element) {
	var order []string
	bySet := map[string][]element{}
	for _, e := range els {
		if _, ok := bySet[e.set]; !ok {
			order = append(order, e.set)
		}
		bySet[e.set] = append(bySet[e.set], e)
	}
	for _, set := range order {
		if decl := tableSet(cfg, set); decl != nil {
			tx.Add(decl)
		}
		seen := map[string]bool{}
		for _, e := range bySet[set] {
			if !seen[e.id()] { // two ports may add one hairpin element
				seen[e.id()] = true
				addElement(tx, e)
			}
		}
	}
}

// diffElements returns the elements of cur to add and those of old to delete. An
// element whose verdict changed is deleted and added again: `add element` does not
// replace the value of an existing key.
func diffElements(old, cur []element) (add, del []element) {
	was := make(map[string]element, len(old))
	for _, e := range old {
		was[e.id()] = e
	}
	is := make(map[string]bool, len(cur))
	for _, e := range cur {
		is[e.id()] = true
		o, ok := was[e.id()]
		if !ok || o.value != e.value {
			if ok {
				del = append(del, o)
			}
			add = append(add, e)
		}
	}
	for _, e := range old {
		if !is[e.id()] {
			del = append(del, e)
		}
	}
	return add, del
}

func chainNames(po *portObjects) []string {
	out := make([]string, len(po.chains))
	for i, c := range po.chains {
		out[i] = c.name
	}
	return out
}

// missing returns the strings of a that are not in b.
func missing(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

// diffSorted returns the strings only in old and those only in cur, both sorted, in
// one merge walk: the cluster-ips set has an element per Service.
func diffSorted(old, cur []string) (gone, added []string) {
	i, j := 0, 0
	for i < len(old) || j < len(cur) {
		switch {
		case j == len(cur) || (i < len(old) && old[i] < cur[j]):
			gone = append(gone, old[i])
			i++
		case i == len(old) || cur[j] < old[i]:
			added = append(added, cur[j])
			j++
		default:
			i++
			j++
		}
	}
	return gone, added
}

// sameSlice reports whether a and b are the same slice (not only equal): the
// ClusterIPs a sync did not recompute.
func sameSlice(a, b []string) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
