package iptables

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// plan says which chains one restore transaction writes. A chain that is declared
// is flushed and rewritten; a chain that is not declared is left as it is
// (--noflush), which is what makes a partial sync cheap.
type plan struct {
	top   map[string]map[string][]byte // table -> top chain -> its rules, if written
	ports []*portRules                 // ports whose own chains are rewritten
	stale []string                     // nat chains to flush and delete (-X)
	hooks []hook                       // jumps from built-in chains to insert (-I)
	// canaries: declare chainCanary in filter and nat with their rules, and
	// in mangle after them (a full sync's last restore).
	canaries bool
}

func (p *plan) empty() bool {
	for _, t := range p.top {
		if len(t) > 0 {
			return false
		}
	}
	return len(p.ports) == 0 && len(p.stale) == 0 && len(p.hooks) == 0 && !p.canaries
}

// coldRestoreBytes bounds the port chains of one restore of a cold start on
// the nf_tables backend (coldPlans).
const coldRestoreBytes = 512 << 10

// coldPlans splits a full plan for a kernel that holds none of our chains
// (a new node) into restores of at most about coldRestoreBytes of port
// chains each: first the filter table and our nat top chains, empty; then
// the ports' chains, which nothing jumps to yet; last the nat top chains'
// rules and the hooks, so that every Service starts to work in that last
// commit, as in one restore. iptables-nft-restore --noflush grows far faster
// than its input: the rules of 10,000 endpoints took 34 s in one restore
// and 1.6 s in ten, on the same machine at the same load.
func coldPlans(p *plan) []*plan {
	first := &plan{top: map[string]map[string][]byte{tableFilter: p.top[tableFilter], tableNAT: {}}}
	for _, c := range topChains[tableNAT] {
		first.top[tableNAT][c] = nil // declared: the port chains jump to SVCP-MARK-MASQ
	}
	plans := []*plan{first}
	var cur *plan
	size := 0
	for _, pr := range p.ports {
		if cur == nil || size >= coldRestoreBytes {
			cur, size = &plan{}, 0
			plans = append(plans, cur)
		}
		cur.ports = append(cur.ports, pr)
		size += len(pr.text)
	}
	return append(plans, &plan{top: map[string]map[string][]byte{tableNAT: p.top[tableNAT]}, stale: p.stale, hooks: p.hooks, canaries: p.canaries})
}

// fullPlan writes every chain and deletes stale ones.
func (rs *ruleset) fullPlan(stale []string) *plan {
	return &plan{top: rs.tops(), ports: rs.ports, stale: stale}
}

// tops returns the rules of every top chain, and in a large cluster those of
// the ClusterIP block chains, which SVCP-SERVICES begins by jumping to.
func (rs *ruleset) tops() map[string]map[string][]byte {
	m := map[string]map[string][]byte{}
	for table, chains := range topChains {
		m[table] = map[string][]byte{}
		for _, c := range chains {
			m[table][c] = rs.topLines(table, c)
		}
	}
	if dispatch := rs.blocks(m[tableNAT]); len(dispatch) > 0 {
		m[tableNAT][chainServices] = append(dispatch, m[tableNAT][chainServices]...)
	}
	return m
}

// blocks adds the ClusterIP block chains of the ports to nat (a large
// cluster's) and returns SVCP-SERVICES' jumps to them, one per block in
// address order: a packet for a ClusterIP walks the blocks' jumps and one
// block's ClusterIPs (at most 256), not every Service's, as in kube-proxy's
// KUBE-SERVICES, where the last of 40,000 Services is the 40,000th rule. A
// packet whose ClusterIP has no rule in its block comes back and goes on
// (externalIPs, NodePorts): as before.
func (rs *ruleset) blocks(nat map[string][]byte) []byte {
	type block struct {
		prefix netip.Prefix
		chain  string
	}
	var order []block
	for _, pr := range rs.ports {
		for _, r := range pr.cips {
			if _, ok := nat[r.chain]; !ok {
				order = append(order, block{r.block, r.chain})
			}
			nat[r.chain] = append(nat[r.chain], r.line...)
		}
	}
	slices.SortFunc(order, func(a, b block) int { return a.prefix.Addr().Compare(b.prefix.Addr()) })
	var b []byte
	for _, bl := range order {
		b = fmt.Appendf(b, "-A %s -m comment --comment \"%s cluster IPs\" -d %s -j %s\n", chainServices, bl.prefix, bl.prefix, bl.chain)
	}
	return b
}

// blockChains are the ClusterIP block chains of a table's top chains, sorted.
func blockChains(top map[string][]byte) []string {
	var out []string
	for c := range top {
		if strings.HasPrefix(c, prefixCIP) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// topLines returns the rules of one top chain: the ports' lines, then the fixed
// ones (so SVCP-SERVICES ends with its NodePort jump).
func (rs *ruleset) topLines(table, chain string) []byte {
	var b bytes.Buffer
	for i, sc := range sharedChains {
		if sc.table == table && sc.chain == chain {
			n := 0
			for _, pr := range rs.ports {
				n += len(pr.shared[i])
			}
			b.Grow(n + len(rs.fixed[table][chain]))
			for _, pr := range rs.ports {
				b.Write(pr.shared[i])
			}
		}
	}
	b.Write(rs.fixed[table][chain])
	return b.Bytes()
}

// text renders a plan as iptables-restore input: per table the chain
// declarations, the rules, the deletions, the hooks, COMMIT; a table with
// nothing to write is left out. The canaries come with the tables' own
// declarations, and last a mangle table with only its canary. Each COMMIT is
// atomic: a packet sees the old table or the new one, hooks and all.
func (rs *ruleset) text(p *plan) []byte {
	var b bytes.Buffer
	size := 256 + 40*len(p.stale)
	for _, t := range p.top {
		for _, rules := range t {
			size += len(rules) + 40
		}
	}
	for _, pr := range p.ports {
		size += len(pr.text) + 40*len(pr.chains)
	}
	b.Grow(size)
	for _, table := range []string{tableFilter, tableNAT} {
		var top []string
		for _, c := range topChains[table] {
			if _, ok := p.top[table][c]; ok {
				top = append(top, c)
			}
		}
		top = append(top, blockChains(p.top[table])...)
		nat := table == tableNAT
		var hooks []hook
		for _, h := range p.hooks {
			if h.table == table {
				hooks = append(hooks, h)
			}
		}
		if len(top) == 0 && len(hooks) == 0 && !p.canaries && (!nat || (len(p.ports) == 0 && len(p.stale) == 0)) {
			continue
		}
		b.WriteString("*" + table + "\n")
		declare := func(c string) { b.WriteString(":" + c + " - [0:0]\n") }
		if p.canaries {
			declare(chainCanary)
		}
		for _, c := range top {
			declare(c)
		}
		if nat {
			for _, pr := range p.ports {
				for _, c := range pr.chains {
					declare(c)
				}
			}
			for _, c := range p.stale {
				declare(c)
			}
		}
		for _, c := range top {
			b.Write(p.top[table][c])
		}
		if nat {
			for _, pr := range p.ports {
				b.Write(pr.text)
			}
			// Deleting after the rewrite: the rules that jumped to a stale
			// chain are gone by now, so -X succeeds in the same transaction.
			for _, c := range p.stale {
				b.WriteString("-X " + c + "\n")
			}
		}
		for _, h := range hooks {
			b.WriteString(h.insert())
		}
		b.WriteString("COMMIT\n")
	}
	if p.canaries {
		b.WriteString("*" + tableMangle + "\n:" + chainCanary + " - [0:0]\nCOMMIT\n")
	}
	return b.Bytes()
}

// chains returns every nat chain of the rule set's ports.
func (rs *ruleset) chains() map[string]bool {
	m := make(map[string]bool, len(rs.ports)*4)
	for _, pr := range rs.ports {
		for _, c := range pr.chains {
			m[c] = true
		}
	}
	return m
}
