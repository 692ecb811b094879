package nftables

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/kernel/conntrack"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
)

// ProxierConfig configures a Proxier. Zero durations take kube-proxy's defaults.
type ProxierConfig struct {
	Rules Config
	// NFT is the table's kernel side: kernel/nftables.New(Table), or a Fake.
	NFT knft.Interface
	// Conntrack deletes stale UDP flows; nil: no conntrack cleanup.
	Conntrack conntrack.Interface

	// SyncPeriod is how often a Sync checks that the table is still as the
	// last full sync wrote it (its base chains' rules), and makes itself full
	// if not (kube-proxy --nftables-sync-period; default 30s;
	// kernelsync.Config).
	SyncPeriod time.Duration
	// FullSyncPeriod is how long after the end of the last full sync a Sync is
	// full again: it writes the whole table and deletes what belongs to
	// nothing (kube-proxy's proxyutil.FullSyncPeriod; default 1h).
	FullSyncPeriod time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Proxier keeps the table in step with the latest Snapshot. How a sync goes
// (full or partial, what was applied, the health record, stale UDP flows) is
// kernelsync.Proxier's, shared with iptables mode; what is nftables' own is the
// kernelsync.Mode below, transactor: a ruleset rendered from the Snapshot,
// written in one nft transaction.
type Proxier struct {
	sync *kernelsync.Proxier[*portObjects, *ruleset]
	t    *transactor
}

// transactor is the nftables side of a sync (kernelsync.Mode). kernelsync.Proxier
// calls it one sync at a time, which guards clusterIPs.
type transactor struct {
	cfg        ProxierConfig
	clusterIPs []string // the cluster-ips set as last applied

	mu    sync.Mutex     // guards ports
	ports []*portObjects // as last applied; each is immutable
}

// Health is a Proxier's sync record, for /status and /metrics.
type Health struct {
	kernelsync.Health
	// Operations is the number of nft commands in the last transaction.
	Operations int `json:"operations"`
}

// NewProxier checks cfg and returns a Proxier with no Snapshot: until the first
// Update, Sync does nothing (a restart must not replace the table of the last
// process with an empty one while the sources are still listing).
func NewProxier(cfg ProxierConfig) (*Proxier, error) {
	if cfg.NFT == nil {
		return nil, errors.New("nftables proxier: NFT is nil")
	}
	if err := cfg.Rules.validate(); err != nil {
		return nil, err
	}
	t := &transactor{cfg: cfg}
	return &Proxier{t: t, sync: kernelsync.New(kernelsync.Config{
		Conntrack:      cfg.Conntrack,
		SyncPeriod:     cfg.SyncPeriod,
		FullSyncPeriod: cfg.FullSyncPeriod,
		Now:            cfg.Now,
	}, t)}, nil
}

// Update makes snap the state the next Sync applies.
func (p *Proxier) Update(snap *service.Snapshot) { p.sync.Update(snap) }

// Sync applies the latest Snapshot now (kernelsync.Proxier.Sync): a full sync
// at first (it adopts whatever table an earlier process left), after a
// failure, FullSyncPeriod after the last full one, and when the check of the
// table (once per SyncPeriod) finds it changed; a partial sync otherwise.
// Before the first Update it does nothing.
func (p *Proxier) Sync(ctx context.Context) error { return p.sync.Sync(ctx) }

// Health returns the sync record.
func (p *Proxier) Health() Health {
	h := p.sync.Health()
	return Health{Health: h, Operations: h.Size}
}

// Status returns the service ports as last applied: chains and endpoint shares.
// It is built when asked for, not at every sync: a sync at 10,000 ports that
// changes one should not copy 10,000 statuses.
func (p *Proxier) Status() []PortStatus {
	p.t.mu.Lock()
	ports := p.t.ports
	p.t.mu.Unlock()
	out := make([]PortStatus, len(ports))
	for i, po := range ports {
		out[i] = po.status
	}
	return out
}

// Render implements kernelsync.Mode: the ports of snap, and the ClusterIPs anew
// when a port came, went or changed them, or when the sync is full.
func (t *transactor) Render(snap *service.Snapshot, applied map[service.PortName]*portObjects, full bool) *ruleset {
	rs := render(t.cfg.Rules, snap, applied)
	if full || rs.ipsChanged() {
		rs.collectClusterIPs()
	} else {
		rs.clusterIPs = t.clusterIPs // the same slice: partialTx skips the set
	}
	return rs
}

// Commit implements kernelsync.Mode.
func (t *transactor) Commit(rs *ruleset, _ map[service.PortName]*portObjects) {
	t.clusterIPs = rs.clusterIPs
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ports = rs.ports
}

// Ports, Changed and Removed implement kernelsync.Rendering.
func (rs *ruleset) Ports() []*portObjects   { return rs.ports }
func (rs *ruleset) Changed() []change       { return rs.changed }
func (rs *ruleset) Removed() []*portObjects { return rs.removed }

// Name and Flows implement kernelsync.Port.
func (po *portObjects) Name() service.PortName   { return po.name }
func (po *portObjects) Flows() *kernelsync.Flows { return &po.flows }

// Apply implements kernelsync.Mode: it writes rs to the kernel in one
// transaction and returns its number of operations.
func (t *transactor) Apply(ctx context.Context, rs *ruleset, _ map[service.PortName]*portObjects, full bool) (int, error) {
	tx := t.cfg.NFT.NewTransaction()
	if full {
		stale, err := t.stale(ctx, rs)
		if err != nil {
			return 0, err
		}
		rs.fullTx(tx, stale)
	} else if !rs.partialTx(tx, t.clusterIPs) {
		return 0, nil
	}
	if err := t.cfg.NFT.Run(ctx, tx); err != nil {
		return tx.NumOperations(), fmt.Errorf("nftables sync (full=%v, %d operations): %w", full, tx.NumOperations(), err)
	}
	return tx.NumOperations(), nil
}

// Check implements kernelsync.Mode: the table exists and each base chain holds
// the rules the last full sync wrote, counted over netlink one chain at a time
// (eight small dumps, not a listing of the table). A table deleted (`nft delete
// table`, `nft flush ruleset`) or flushed (`nft flush table`: every rule gone,
// the chains and maps left) fails it, and the next sync is full. kube-proxy's
// nftables mode has no such check: its table is its own, and a partial sync
// into a deleted table fails and is followed by a full one; but a period with
// no change writes nothing, so the gap could last until its hourly full sync.
func (t *transactor) Check(ctx context.Context) error {
	for _, c := range fixedChains(&t.cfg.Rules)[:len(baseChains)] {
		n, err := t.cfg.NFT.CountRules(ctx, c.name)
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
func (t *transactor) stale(ctx context.Context, rs *ruleset) (staleObjects, error) {
	var out staleObjects
	objs, err := t.cfg.NFT.ListAll(ctx)
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
