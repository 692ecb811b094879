package iptables

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
)

// rendering is one sync's rendering: the ports, and the top chains it writes.
type rendering struct {
	*ruleset
	top map[string]map[string][]byte
}

// sync makes the kernel's rules those of snap: the Syncer's Apply, so one
// sync at a time. The ledger says whether the sync is full and what the last
// one applied; the rules are rendered against that (render: the ports, and the
// top chains SVCP-SERVICES and the others every port writes into, anew only
// when a port came, went or changed its frontends, or when the sync is full)
// and written in one restore (write); the ledger records what the kernel
// holds now and cleans the conntrack entries the change left stale.
func (d *Dataplane) sync(ctx context.Context, snap *service.Snapshot) error {
	n := endpointCount(snap, d.cfg.Carries)
	d.endpoints.Store(int64(n))
	s := d.Ledger.Begin()
	if s.Check {
		d.Ledger.Checked(s, d.check(ctx))
	}
	cfg := d.cfg
	cfg.largeCluster = n > largeClusterEndpoints
	rd := &rendering{render(cfg, snap, s.Applied), d.top} // the common case: endpoints changed, not frontends
	if s.Full || sharedChanged(rd.ruleset) {
		rd.top = rd.tops()
	}
	size, err := d.write(ctx, rd, s.Full, s.Applied)
	if err == nil {
		d.commit(rd)
	}
	return d.Ledger.End(ctx, s, rd.rendered(), size, err)
}

// endpointCount is what kube-proxy measures a cluster's size by (its
// syncProxyRules' totalEndpoints): the endpoints of every service port, of
// those carries accepts when it is not nil.
func endpointCount(snap *service.Snapshot, carries func(service.PortName) bool) int {
	n := 0
	for _, p := range snap.Ports() {
		if carries == nil || carries(p.Name) {
			n += len(p.Endpoints)
		}
	}
	return n
}

// commit keeps what the next partial sync compares with, and the status.
func (d *Dataplane) commit(rd *rendering) {
	d.top = rd.top
	d.forget(rd.removed)
	status := make([]PortStatus, len(rd.ports))
	for i, pr := range rd.ports {
		status[i] = pr.status
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.status = status
}

// write writes rd to the kernel in one restore and returns the size of the
// restore text: when full, every chain, deleting the port chains the kernel
// holds that rd has not; otherwise only what differs from applied.
func (d *Dataplane) write(ctx context.Context, rd *rendering, full bool, applied map[service.PortName]*portRules) (int, error) {
	var pl *plan
	var existing map[string]bool // our nat chains in the kernel, when full
	if full {
		// Per-port chains live only in nat; filter's tell which hooks
		// can be there (missingHooks).
		ours, err := ourChains(ctx, d.cfg.IPTables, tableNAT, tableFilter)
		if err != nil {
			return 0, err
		}
		existing = ours[tableNAT]
		want := rd.chains()
		var stale []string
		for _, c := range slices.Sorted(maps.Keys(existing)) {
			_, block := rd.top[tableNAT][c]
			if (isPortChain(c) && !want[c]) || (strings.HasPrefix(c, prefixCIP) && !block) {
				stale = append(stale, c)
			}
		}
		missing, err := missingHooks(ctx, d.cfg.IPTables, ours)
		if err != nil {
			return 0, err
		}
		pl = &plan{top: rd.top, ports: rd.ports, stale: stale, hooks: missing, canaries: true}
	} else {
		pl = d.partialPlan(rd)
	}
	if pl.empty() {
		return 0, nil
	}
	if full && len(existing) == 0 && d.nfTables() {
		return d.writeCold(ctx, rd, pl)
	}
	if err := d.carryCounts(ctx, pl, applied); err != nil {
		return 0, err
	}
	text := rd.text(pl)
	if err := d.cfg.IPTables.Restore(ctx, text); err != nil {
		return 0, fmt.Errorf("iptables sync (full=%v): %w", full, err)
	}
	return len(text), nil
}

// nfTables says whether the iptables binaries run on nf_tables
// (kiptables.BackendReporter); a Fake does not say, and gets one restore.
func (d *Dataplane) nfTables() bool {
	b, ok := d.cfg.IPTables.(kiptables.BackendReporter)
	return ok && b.Backend() == kiptables.BackendNFTables
}

// writeCold writes a full plan into a kernel that holds none of our chains
// in several restores (coldPlans), on the nf_tables backend only: on the
// legacy one every restore reads and writes back the whole table, so one
// is cheapest there. A restore that fails leaves chains behind that the
// full sync after it deletes or rewrites.
func (d *Dataplane) writeCold(ctx context.Context, rd *rendering, pl *plan) (int, error) {
	size := 0
	for _, p := range coldPlans(pl) {
		text := rd.text(p)
		if err := d.cfg.IPTables.Restore(ctx, text); err != nil {
			return 0, fmt.Errorf("iptables sync (full, cold, in parts): %w", err)
		}
		size += len(text)
	}
	return size, nil
}

// partialPlan writes what differs from the last applied state: the chains of
// changed ports, the top chains whose rules changed, and deletes the chains of
// removed ports and endpoints. Chain names include the port name, so a chain
// belongs to one port only, and only changed or removed ports can leave any.
func (d *Dataplane) partialPlan(rd *rendering) *plan {
	pl := &plan{top: map[string]map[string][]byte{}}
	for table, chains := range rd.top {
		for c, rules := range chains {
			if !bytes.Equal(d.top[table][c], rules) {
				if pl.top[table] == nil {
					pl.top[table] = map[string][]byte{}
				}
				pl.top[table][c] = rules
			}
		}
	}
	// A ClusterIP block left with no ClusterIP: SVCP-SERVICES no longer
	// jumps to it (it was rewritten with the blocks).
	for _, c := range blockChains(d.top[tableNAT]) {
		if _, ok := rd.top[tableNAT][c]; !ok {
			pl.stale = append(pl.stale, c)
		}
	}
	for _, c := range rd.changed {
		if c.Old == nil || !bytes.Equal(c.Old.text, c.Cur.text) || !slices.Equal(c.Old.chains, c.Cur.chains) {
			pl.ports = append(pl.ports, c.Cur)
			if c.Old != nil {
				pl.stale = append(pl.stale, removedChains(c.Old.chains, c.Cur.chains)...)
			}
		}
	}
	for _, old := range rd.removed {
		pl.stale = append(pl.stale, old.chains...)
	}
	slices.Sort(pl.stale)
	return pl
}

// sharedChanged reports whether rs would write the top chains differently than
// what was applied: a port came, went, or changed its frontend rules. (The order
// of ports is the Snapshot's, so the same ports come in the same order.)
func sharedChanged(rs *ruleset) bool {
	if len(rs.removed) > 0 {
		return true
	}
	for _, c := range rs.changed {
		if c.Old == nil {
			return true
		}
		for i := range c.Cur.shared {
			if !bytes.Equal(c.Old.shared[i], c.Cur.shared[i]) {
				return true
			}
		}
		if !slices.EqualFunc(c.Old.cips, c.Cur.cips, func(a, b cipRule) bool { return a.chain == b.chain && bytes.Equal(a.line, b.line) }) {
			return true
		}
	}
	return false
}

func removedChains(old, cur []string) []string {
	var out []string
	for _, c := range old {
		if !slices.Contains(cur, c) {
			out = append(out, c)
		}
	}
	return out
}
