package nftables

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/knftables"

	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/service"
)

// sync makes the table carry snap: the Syncer's Apply, so one sync at a
// time. The ledger says whether the sync is full and what the last one
// applied; the table's objects are rendered against that (render: the ports,
// and the ClusterIPs anew when a port came, went or changed them, or when the
// sync is full) and written in one nft transaction (write); the ledger
// records what the kernel holds now and cleans the conntrack entries the
// change left stale.
func (d *Dataplane) sync(ctx context.Context, snap *service.Snapshot) error {
	s := d.Ledger.Begin()
	if s.Check {
		d.Ledger.Checked(s, d.check(ctx))
	}
	rs := render(d.cfg, snap, s.Applied)
	if s.Full || rs.ipsChanged() {
		rs.collectClusterIPs()
	} else {
		rs.clusterIPs = d.clusterIPs // the same slice: partialTx skips the set
	}
	size, err := d.write(ctx, rs, s.Full)
	if err == nil {
		d.clusterIPs = rs.clusterIPs
		d.mu.Lock()
		d.ports = rs.ports
		d.mu.Unlock()
	}
	return d.Ledger.End(ctx, s, rs.rendered(), size, err)
}

// write writes rs to the kernel in one transaction and returns its number of
// operations: when full, the whole table, deleting the port objects the
// kernel holds that rs has not; otherwise only what differs from the last
// sync.
func (d *Dataplane) write(ctx context.Context, rs *ruleset, full bool) (int, error) {
	if full {
		stale, err := d.stale(ctx, rs)
		if err != nil {
			return 0, err
		}
		n, err := d.cfg.NFT.RunParts(ctx, rs.fullParts(stale))
		if err != nil {
			return n, fmt.Errorf("nftables sync (full=true, %d operations): %w", n, err)
		}
		return n, nil
	}
	tx := d.cfg.NFT.NewTransaction()
	if !rs.partialTx(tx, d.clusterIPs) {
		return 0, nil
	}
	if err := d.cfg.NFT.Run(ctx, tx); err != nil {
		return tx.NumOperations(), fmt.Errorf("nftables sync (full=false, %d operations): %w", tx.NumOperations(), err)
	}
	return tx.NumOperations(), nil
}

// check says whether the table exists and each base chain holds the rules
// the last full sync wrote (the frame kernelsync's Ledger has checked once per
// SyncPeriod), counted over netlink one chain at a time
// (eight small dumps, not a listing of the table). A table deleted (`nft delete
// table`, `nft flush ruleset`) or flushed (`nft flush table`: every rule gone,
// the chains and maps left) fails it, and the next sync is full. kube-proxy's
// nftables mode has no such check: its table is its own, and a partial sync
// into a deleted table fails and is followed by a full one; but a period with
// no change writes nothing, so the gap could last until its hourly full sync.
func (d *Dataplane) check(ctx context.Context) error {
	for _, c := range fixedChains(&d.cfg)[:len(baseChains)] {
		n, err := d.cfg.NFT.CountRules(ctx, c.name)
		if err != nil {
			return fmt.Errorf("table %s: %w", Table, err)
		}
		if n != len(c.rules) {
			return fmt.Errorf("table %s: chain %s holds %d rules, want %d", Table, c.name, n, len(c.rules))
		}
	}
	return nil
}

// staleObjects are port objects in the kernel that no port of a rendering has,
// or, with noTable, the news that there is no table yet.
type staleObjects struct {
	chains, sets, counters []string
	maps                   []string // deleted before the chains their elements go to
	noTable                bool     // nothing to flush: every object is new
}

// stale reads the table and returns the port chains, affinity sets and counters in
// it that rs does not have: those of ports removed while no process was syncing,
// or before a failure. No table yet: nothing is stale.
func (d *Dataplane) stale(ctx context.Context, rs *ruleset) (staleObjects, error) {
	var out staleObjects
	objs, err := d.cfg.NFT.ListAll(ctx)
	if knft.IsNotFound(err) {
		out.noTable = true
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("read table %s: %w", Table, err)
	}
	want := map[string]bool{}
	for _, po := range rs.ports {
		for _, c := range po.chains {
			want[c.name] = true
		}
		for _, s := range po.sets {
			want[s.name] = true
		}
		want[po.counter] = true
	}
	for _, c := range objs["chain"] {
		if isPortChain(c) && !want[c] {
			out.chains = append(out.chains, c)
		}
	}
	for _, s := range objs["set"] {
		if strings.HasPrefix(s, prefixAffinity) && !want[s] {
			out.sets = append(out.sets, s)
		}
	}
	for _, c := range objs["counter"] {
		if strings.HasPrefix(c, prefixCounter) && !want[c] {
			out.counters = append(out.counters, c)
		}
	}
	if !rs.cfg.LocalhostNodePorts {
		out.addLocalhostLeftovers(objs)
	}
	slices.Sort(out.chains)
	slices.Sort(out.sets)
	slices.Sort(out.counters)
	return out, nil
}

// addLocalhostLeftovers adds the localhost NodePort objects (the reject map,
// its chains and counters) of a process that had Config.LocalhostNodePorts,
// when this one has not: kube-proxy's setupNFTables deletes them too.
func (out *staleObjects) addLocalhostLeftovers(objs map[string][]string) {
	for _, m := range objs["map"] {
		if m == mapLocalhostNodePortReject {
			out.maps = append(out.maps, m)
		}
	}
	for _, c := range objs["chain"] {
		if strings.HasPrefix(c, prefixLocalhostReject) {
			out.chains = append(out.chains, c)
		}
	}
	for _, c := range objs["counter"] {
		if strings.HasPrefix(c, prefixLocalhostRejected) {
			out.counters = append(out.counters, c)
		}
	}
}

// Render returns the transaction (as `nft -f` text) of a full sync of snap into an
// empty kernel: every object the Snapshot needs. It is a pure function.
func Render(cfg Config, snap *service.Snapshot) (string, error) {
	if err := cfg.validate(); err != nil {
		return "", err
	}
	rs := render(cfg, snap, nil)
	rs.collectClusterIPs()
	tx := knftables.NewFake(TableFamily(cfg.Family), Table).NewTransaction()
	rs.fullTx(tx, staleObjects{noTable: true})
	return tx.String(), nil
}

// Cleanup deletes the table (svcproxy --cleanup): every chain, set and map of
// svcproxy's nftables path goes with it, in one transaction. Running it twice is
// harmless.
func Cleanup(ctx context.Context, nft knft.Interface) error {
	if _, err := nft.ListAll(ctx); knft.IsNotFound(err) {
		return nil
	}
	tx := nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	if err := nft.Run(ctx, tx); err != nil && !knft.IsNotFound(err) {
		return fmt.Errorf("delete table %s: %w", Table, err)
	}
	return nil
}
