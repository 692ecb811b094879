package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/svcproxy/svcproxy/kernel/conntrack"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
)

// ProxierConfig configures a Proxier. Zero durations take kube-proxy's defaults.
type ProxierConfig struct {
	Rules    Config
	IPTables kiptables.Interface
	// Conntrack deletes stale UDP flows; nil: no conntrack cleanup.
	Conntrack conntrack.Interface

	// SyncPeriod is how long after the end of the last full sync a Sync is full
	// again: it rewrites every chain and deletes those that belong to nothing
	// (kube-proxy --iptables-sync-period; default 30s). Counted from the end, a
	// full sync that takes longer than SyncPeriod does not make every later
	// sync full.
	SyncPeriod time.Duration
	// CountConnections keeps, across syncs, the packet counts of the DNAT rules
	// that Connections reads: a sync that rewrites a port's chains first adds
	// their counts to the port's carried total (hybrid mode's kernel path).
	CountConnections bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Proxier keeps the kernel's rules in step with the latest Snapshot.
type Proxier struct {
	cfg ProxierConfig

	mu     sync.Mutex // guards snap, health, status
	snap   *service.Snapshot
	health Health
	status []PortStatus

	syncMu   sync.Mutex // one sync at a time; guards the fields below
	applied  *applied   // the last successful sync; nil before the first
	needFull bool       // a sync failed: the kernel may not be what applied says
	lastFull time.Time  // when the last full sync ended
	// carried is, per port, the DNAT packets of its chains that a sync
	// rewrote or deleted (CountConnections).
	carried map[service.PortName]uint64
}

// applied is what the last successful sync left in the kernel.
type applied struct {
	ports map[service.PortName]*portRules
	top   map[string]map[string][]byte
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
	// RestoreBytes is the size of the last restore text.
	RestoreBytes     int    `json:"restoreBytes"`
	ConntrackDeleted uint64 `json:"conntrackDeleted"`
	ConntrackErrors  uint64 `json:"conntrackErrors"`
}

// NewProxier checks cfg and returns a Proxier with no Snapshot: until the first
// Update, Sync does nothing (a restart must not replace the rules of the last
// process with an empty set while the sources are still listing).
func NewProxier(cfg ProxierConfig) (*Proxier, error) {
	if cfg.IPTables == nil {
		return nil, errors.New("iptables proxier: IPTables is nil")
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
	return &Proxier{cfg: cfg, carried: map[service.PortName]uint64{}}, nil
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
func (p *Proxier) Status() []PortStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.status)
}

// Sync applies the latest Snapshot now: a partial sync if the last sync
// succeeded and the SyncPeriod has not passed since the last full one, a full
// sync otherwise. Before the first Update it does nothing.
func (p *Proxier) Sync(ctx context.Context) error {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	p.mu.Lock()
	snap := p.snap
	p.mu.Unlock()
	if snap == nil {
		return nil
	}
	start := p.cfg.Now()
	full := p.applied == nil || p.needFull || start.Sub(p.lastFull) >= p.cfg.SyncPeriod
	var prev map[service.PortName]*portRules
	if p.applied != nil {
		prev = p.applied.ports
	}
	rs := render(p.cfg.Rules, snap, prev)
	var tops map[string]map[string][]byte
	if !full && !sharedChanged(rs) {
		tops = p.applied.top // the common case: endpoints changed, not frontends
	} else {
		tops = rs.tops()
	}
	text, err := p.apply(ctx, rs, tops, full)
	if err != nil {
		// The kernel may hold half of it (one table committed, the other
		// not): only a full sync can be trusted next (kube-proxy does the same).
		p.needFull = true
		p.record(func(h *Health) {
			h.Healthy, h.LastError = false, err.Error()
			h.Failures++
			h.ConsecutiveFailures++
		})
		return err
	}
	p.commit(ctx, rs, tops, full, start, len(text))
	return nil
}

// commit records a successful sync: what the kernel holds now, the conntrack
// cleanup it calls for, the status and the health.
func (p *Proxier) commit(ctx context.Context, rs *ruleset, tops map[string]map[string][]byte, full bool, start time.Time, size int) {
	first := p.applied == nil
	if first {
		p.applied = &applied{ports: make(map[service.PortName]*portRules, len(rs.ports))}
		for _, pr := range rs.ports {
			p.applied.ports[pr.name] = pr
		}
	} else { // update in place: 10,000 ports, one changed
		for _, c := range rs.changed {
			p.applied.ports[c.cur.name] = c.cur
		}
		for _, pr := range rs.removed {
			delete(p.applied.ports, pr.name)
		}
	}
	p.applied.top = tops
	p.forget()
	if full {
		p.lastFull, p.needFull = p.cfg.Now(), false
	}
	deleted, ctErr := p.cleanFlows(ctx, first, rs)
	status := make([]PortStatus, len(rs.ports))
	for i, pr := range rs.ports {
		status[i] = pr.status
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status = status
	h := &p.health
	h.Synced, h.Healthy, h.LastError, h.ConsecutiveFailures = true, true, "", 0
	h.LastSync, h.LastSyncDuration, h.RestoreBytes = p.cfg.Now(), p.cfg.Now().Sub(start), size
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

// apply writes rs to the kernel, returning the restore text it used.
func (p *Proxier) apply(ctx context.Context, rs *ruleset, tops map[string]map[string][]byte, full bool) ([]byte, error) {
	var pl *plan
	if full {
		// Per-port chains live only in nat: no need to read filter.
		existing, err := ourChains(ctx, p.cfg.IPTables, tableNAT)
		if err != nil {
			return nil, err
		}
		want := rs.chains()
		var stale []string
		for _, c := range sortedKeys(existing[tableNAT]) {
			if isPortChain(c) && !want[c] {
				stale = append(stale, c)
			}
		}
		pl = &plan{top: tops, ports: rs.ports, stale: stale}
	} else {
		pl = p.partialPlan(rs, tops)
	}
	if pl.empty() {
		return nil, nil
	}
	if err := p.carryCounts(ctx, pl); err != nil {
		return nil, err
	}
	text := rs.text(pl)
	if err := p.cfg.IPTables.Restore(ctx, text); err != nil {
		return text, fmt.Errorf("iptables sync (full=%v): %w", full, err)
	}
	if full {
		// After the restore, which creates the chains the hooks jump to. On
		// a restart they exist and this changes nothing.
		if err := ensureHooks(ctx, p.cfg.IPTables); err != nil {
			return text, err
		}
	}
	return text, nil
}

// partialPlan writes what differs from the last applied state: the chains of
// changed ports, the top chains whose rules changed, and deletes the chains of
// removed ports and endpoints. Chain names include the port name, so a chain
// belongs to one port only, and only changed or removed ports can leave any.
func (p *Proxier) partialPlan(rs *ruleset, tops map[string]map[string][]byte) *plan {
	pl := &plan{top: map[string]map[string][]byte{}}
	for table, chains := range tops {
		for c, rules := range chains {
			if !bytes.Equal(p.applied.top[table][c], rules) {
				if pl.top[table] == nil {
					pl.top[table] = map[string][]byte{}
				}
				pl.top[table][c] = rules
			}
		}
	}
	for _, c := range rs.changed {
		if c.old == nil || !bytes.Equal(c.old.text, c.cur.text) || !slices.Equal(c.old.chains, c.cur.chains) {
			pl.ports = append(pl.ports, c.cur)
			if c.old != nil {
				pl.stale = append(pl.stale, removedChains(c.old.chains, c.cur.chains)...)
			}
		}
	}
	for _, old := range rs.removed {
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
		if c.old == nil {
			return true
		}
		for i := range c.cur.shared {
			if !bytes.Equal(c.old.shared[i], c.cur.shared[i]) {
				return true
			}
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

// cleanFlows deletes the conntrack entries the change from old to rs left stale.
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
