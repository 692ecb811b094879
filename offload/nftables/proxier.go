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
	"github.com/svcproxy/svcproxy/service"
)

// ProxierConfig configures a Proxier. Zero durations take kube-proxy's defaults.
type ProxierConfig struct {
	Rules Config
	// NFT is the table's kernel side: kernel/nftables.New(Table), or a Fake.
	NFT knft.Interface
	// Conntrack deletes stale UDP flows; nil: no conntrack cleanup.
	Conntrack conntrack.Interface

	// SyncPeriod is how long after the end of the last full sync a Sync is full
	// again: it writes the whole table and deletes what belongs to nothing
	// (kube-proxy --nftables-sync-period; default 30s).
	SyncPeriod time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Proxier keeps the table in step with the latest Snapshot.
type Proxier struct {
	cfg ProxierConfig

	mu     sync.Mutex // guards snap, health, ports
	snap   *service.Snapshot
	health Health
	ports  []*portObjects // as last applied; each is immutable

	syncMu   sync.Mutex // one sync at a time; guards the fields below
	applied  *applied   // the last successful sync; nil before the first
	needFull bool       // a sync failed: the kernel may not be what applied says
	lastFull time.Time
}

// applied is what the last successful sync left in the kernel.
type applied struct {
	ports      map[service.PortName]*portObjects
	clusterIPs []string
}

// Health is a Proxier's sync record, for /healthz and /metrics.
type Health struct {
	// Synced: at least one sync has succeeded (serve /healthz from then on).
	Synced bool `json:"synced"`
	// Healthy: the last sync succeeded.
	Healthy             bool          `json:"healthy"`
	LastError           string        `json:"lastError,omitempty"`
	LastSync            time.Time     `json:"lastSync"` // last successful sync
	LastSyncDuration    time.Duration `json:"lastSyncDuration"`
	FullSyncs           uint64        `json:"fullSyncs"`
	PartialSyncs        uint64        `json:"partialSyncs"`
	Failures            uint64        `json:"failures"`
	ConsecutiveFailures uint64        `json:"consecutiveFailures"`
	// Operations is the number of nft commands in the last transaction.
	Operations       int    `json:"operations"`
	ConntrackDeleted uint64 `json:"conntrackDeleted"`
	ConntrackErrors  uint64 `json:"conntrackErrors"`
}

// NewProxier checks cfg and returns a Proxier with no Snapshot: until the first
// Update it syncs an empty table (its fixed part).
func NewProxier(cfg ProxierConfig) (*Proxier, error) {
	if cfg.NFT == nil {
		return nil, errors.New("nftables proxier: NFT is nil")
	}
	if err := cfg.Rules.validate(); err != nil {
		return nil, err
	}
	if cfg.SyncPeriod <= 0 {
		cfg.SyncPeriod = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Proxier{cfg: cfg}, nil
}

// Update makes snap the state the next Sync applies.
func (p *Proxier) Update(snap *service.Snapshot) {
	p.mu.Lock()
	p.snap = snap
	p.mu.Unlock()
}

// Health returns the sync record.
func (p *Proxier) Health() Health {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.health
}

// Status returns the service ports as last applied: chains and endpoint shares.
// It is built when asked for, not at every sync: a sync at 10,000 ports that
// changes one should not copy 10,000 statuses.
func (p *Proxier) Status() []PortStatus {
	p.mu.Lock()
	ports := p.ports
	p.mu.Unlock()
	out := make([]PortStatus, len(ports))
	for i, po := range ports {
		out[i] = po.status
	}
	return out
}

// Sync applies the latest Snapshot now: a partial sync if the last sync
// succeeded and the SyncPeriod has not passed, a full sync otherwise (the first
// one adopts whatever table an earlier process left).
func (p *Proxier) Sync(ctx context.Context) error {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	p.mu.Lock()
	snap := p.snap
	p.mu.Unlock()
	if snap == nil {
		snap = service.NewSnapshot(nil, nil)
	}
	start := p.cfg.Now()
	full := p.applied == nil || p.needFull || start.Sub(p.lastFull) >= p.cfg.SyncPeriod
	var prev map[service.PortName]*portObjects
	if p.applied != nil {
		prev = p.applied.ports
	}
	rs := render(p.cfg.Rules, snap, prev)
	if full || rs.ipsChanged() {
		rs.collectClusterIPs()
	} else {
		rs.clusterIPs = p.applied.clusterIPs // the same slice: partialTx skips the set
	}
	ops, err := p.apply(ctx, rs, full)
	if err != nil {
		// A transaction is atomic, but a full sync is what we trust after any
		// failure (a partial one may have been computed against a kernel state
		// another process changed), as kube-proxy does.
		p.needFull = true
		p.record(func(h *Health) {
			h.Healthy, h.LastError = false, err.Error()
			h.Failures++
			h.ConsecutiveFailures++
		})
		return err
	}
	p.commit(ctx, rs, full, start, ops)
	return nil
}

// apply writes rs to the kernel in one transaction and returns its size.
func (p *Proxier) apply(ctx context.Context, rs *ruleset, full bool) (int, error) {
	tx := p.cfg.NFT.NewTransaction()
	if full {
		stale, err := p.stale(ctx, rs)
		if err != nil {
			return 0, err
		}
		rs.fullTx(tx, stale.chains, stale.sets, stale.counters)
	} else if !rs.partialTx(tx, p.applied.clusterIPs) {
		return 0, nil
	}
	if err := p.cfg.NFT.Run(ctx, tx); err != nil {
		return tx.NumOperations(), fmt.Errorf("nftables sync (full=%v, %d operations): %w", full, tx.NumOperations(), err)
	}
	return tx.NumOperations(), nil
}

// staleObjects are port objects in the kernel that no port of a rendering has.
type staleObjects struct{ chains, sets, counters []string }

// stale reads the table and returns the port chains, affinity sets and counters in
// it that rs does not have: those of ports removed while no process was syncing,
// or before a failure. No table yet: nothing is stale.
func (p *Proxier) stale(ctx context.Context, rs *ruleset) (staleObjects, error) {
	var out staleObjects
	objs, err := p.cfg.NFT.ListAll(ctx)
	if knft.IsNotFound(err) {
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
	slices.Sort(out.chains)
	slices.Sort(out.sets)
	slices.Sort(out.counters)
	return out, nil
}

// commit records a successful sync: what the kernel holds now, the conntrack
// cleanup it calls for, the status and the health.
func (p *Proxier) commit(ctx context.Context, rs *ruleset, full bool, start time.Time, ops int) {
	first := p.applied == nil
	if first {
		p.applied = &applied{ports: make(map[service.PortName]*portObjects, len(rs.ports))}
		for _, po := range rs.ports {
			p.applied.ports[po.name] = po
		}
	} else { // update in place: 10,000 ports, one changed
		for _, c := range rs.changed {
			p.applied.ports[c.cur.name] = c.cur
		}
		for _, po := range rs.removed {
			delete(p.applied.ports, po.name)
		}
	}
	p.applied.clusterIPs = rs.clusterIPs
	if full {
		p.lastFull, p.needFull = p.cfg.Now(), false // counted from the end: see SyncPeriod
	}
	deleted, ctErr := p.cleanFlows(ctx, first, rs)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ports = rs.ports
	h := &p.health
	h.Synced, h.Healthy, h.LastError, h.ConsecutiveFailures = true, true, "", 0
	h.LastSync, h.LastSyncDuration, h.Operations = p.cfg.Now(), p.cfg.Now().Sub(start), ops
	if full {
		h.FullSyncs++
	} else {
		h.PartialSyncs++
	}
	h.ConntrackDeleted += uint64(deleted)
	if ctErr != nil {
		h.ConntrackErrors++
		h.LastError = ctErr.Error()
	}
}

func (p *Proxier) record(f func(*Health)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(&p.health)
}

// cleanFlows deletes the conntrack entries the change left stale.
func (p *Proxier) cleanFlows(ctx context.Context, first bool, rs *ruleset) (int, error) {
	if p.cfg.Conntrack == nil || first {
		// The first sync of this process knows nothing of what came before;
		// the entries it finds belong to rules it has just adopted.
		return 0, nil
	}
	var errs []error
	n := 0
	for _, f := range staleFlows(rs.changed, rs.removed) {
		d, err := p.cfg.Conntrack.Delete(ctx, f)
		n += d
		if err != nil {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// Render returns the transaction (as `nft -f` text) of a full sync of snap into an
// empty kernel: every object the Snapshot needs. It is a pure function.
func Render(cfg Config, snap *service.Snapshot) (string, error) {
	if err := cfg.validate(); err != nil {
		return "", err
	}
	rs := render(cfg, snap, nil)
	rs.collectClusterIPs()
	tx := knftables.NewFake(knftables.IPv4Family, Table).NewTransaction()
	rs.fullTx(tx, nil, nil, nil)
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
