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
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
)

// ProxierConfig configures a Proxier. Zero durations take kube-proxy's defaults.
type ProxierConfig struct {
	Rules    Config
	IPTables kiptables.Interface
	// Conntrack deletes stale UDP flows; nil: no conntrack cleanup.
	Conntrack conntrack.Interface

	// SyncPeriod is how often a Sync checks that the hooks from the built-in
	// chains are still there, and makes itself full if not (kube-proxy
	// --iptables-sync-period, the period of its canary check; default 30s;
	// kernelsync.Config).
	SyncPeriod time.Duration
	// FullSyncPeriod is how long after the end of the last full sync a Sync is
	// full again: it rewrites every chain and deletes those that belong to
	// nothing (kube-proxy's proxyutil.FullSyncPeriod; default 1h).
	FullSyncPeriod time.Duration
	// CountConnections keeps, across syncs, the packet counts of the DNAT rules
	// that Connections reads: a sync that rewrites a port's chains first adds
	// their counts to the port's carried total (hybrid mode's kernel path).
	CountConnections bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Proxier keeps the kernel's rules in step with the latest Snapshot. How a sync
// goes (full or partial, what was applied, the health record, stale UDP flows) is
// kernelsync.Proxier's, shared with nftables mode; what is iptables' own is the
// kernelsync.Mode below, restorer: iptables-restore text rendered from the
// Snapshot, applied in one restore.
type Proxier struct {
	sync *kernelsync.Proxier[*portRules, *rendering]
	r    *restorer
}

// restorer is the iptables side of a sync (kernelsync.Mode). kernelsync.Proxier
// calls it one sync at a time, which guards top and carried.
type restorer struct {
	cfg ProxierConfig
	top map[string]map[string][]byte // the top chains as last applied
	// carried is, per port, the DNAT packets of its chains that a sync
	// rewrote or deleted (CountConnections).
	carried map[service.PortName]uint64

	mu     sync.Mutex // guards status
	status []PortStatus
}

// rendering is one sync's rendering: the ports, and the top chains it writes.
type rendering struct {
	*ruleset
	top map[string]map[string][]byte
}

// Health is a Proxier's sync record, for /status and /metrics.
type Health struct {
	kernelsync.Health
	// RestoreBytes is the size of the last restore text.
	RestoreBytes int `json:"restoreBytes"`
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
	r := &restorer{cfg: cfg, carried: map[service.PortName]uint64{}}
	return &Proxier{r: r, sync: kernelsync.New(kernelsync.Config{
		Conntrack:      cfg.Conntrack,
		SyncPeriod:     cfg.SyncPeriod,
		FullSyncPeriod: cfg.FullSyncPeriod,
		Now:            cfg.Now,
	}, r)}, nil
}

// Update makes snap the state the next Sync applies.
func (p *Proxier) Update(snap *service.Snapshot) { p.sync.Update(snap) }

// Sync applies the latest Snapshot now (kernelsync.Proxier.Sync): a full sync
// at first, after a failure, FullSyncPeriod after the last full one, and when
// the check of the hooks (once per SyncPeriod) finds one missing; a partial
// sync otherwise. Before the first Update it does nothing.
func (p *Proxier) Sync(ctx context.Context) error { return p.sync.Sync(ctx) }

// Health returns the sync record.
func (p *Proxier) Health() Health {
	h := p.sync.Health()
	return Health{Health: h, RestoreBytes: h.Size}
}

// Status returns the service ports as last applied: chains and endpoint shares.
func (p *Proxier) Status() []PortStatus {
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	return slices.Clone(p.r.status)
}

// Render implements kernelsync.Mode: the ports of snap, and the top chains
// (SVCP-SERVICES and the others every port writes into) anew when a port came,
// went or changed its frontends, or when the sync is full.
func (r *restorer) Render(snap *service.Snapshot, applied map[service.PortName]*portRules, full bool) *rendering {
	rs := render(r.cfg.Rules, snap, applied)
	if !full && !sharedChanged(rs) {
		return &rendering{rs, r.top} // the common case: endpoints changed, not frontends
	}
	return &rendering{rs, rs.tops()}
}

// Commit implements kernelsync.Mode.
func (r *restorer) Commit(rd *rendering, applied map[service.PortName]*portRules) {
	r.top = rd.top
	r.forget(applied)
	status := make([]PortStatus, len(rd.ports))
	for i, pr := range rd.ports {
		status[i] = pr.status
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status = status
}

// Ports, Changed and Removed implement kernelsync.Rendering.
func (rs *ruleset) Ports() []*portRules   { return rs.ports }
func (rs *ruleset) Changed() []change     { return rs.changed }
func (rs *ruleset) Removed() []*portRules { return rs.removed }

// Name and Flows implement kernelsync.Port.
func (pr *portRules) Name() service.PortName   { return pr.name }
func (pr *portRules) Flows() *kernelsync.Flows { return &pr.flows }

// Apply implements kernelsync.Mode: it writes rd to the kernel in one restore
// and returns the size of the restore text.
func (r *restorer) Apply(ctx context.Context, rd *rendering, applied map[service.PortName]*portRules, full bool) (int, error) {
	var pl *plan
	if full {
		// Per-port chains live only in nat: no need to read filter.
		existing, err := ourChains(ctx, r.cfg.IPTables, tableNAT)
		if err != nil {
			return 0, err
		}
		want := rd.chains()
		var stale []string
		for _, c := range sortedKeys(existing[tableNAT]) {
			if isPortChain(c) && !want[c] {
				stale = append(stale, c)
			}
		}
		pl = &plan{top: rd.top, ports: rd.ports, stale: stale}
	} else {
		pl = r.partialPlan(rd)
	}
	if pl.empty() {
		return 0, nil
	}
	if err := r.carryCounts(ctx, pl, applied); err != nil {
		return 0, err
	}
	text := rd.text(pl)
	if err := r.cfg.IPTables.Restore(ctx, text); err != nil {
		return 0, fmt.Errorf("iptables sync (full=%v): %w", full, err)
	}
	if full {
		// After the restore, which creates the chains the hooks jump to. On
		// a restart they exist and this changes nothing.
		if err := ensureHooks(ctx, r.cfg.IPTables); err != nil {
			return 0, err
		}
	}
	return len(text), nil
}

// partialPlan writes what differs from the last applied state: the chains of
// changed ports, the top chains whose rules changed, and deletes the chains of
// removed ports and endpoints. Chain names include the port name, so a chain
// belongs to one port only, and only changed or removed ports can leave any.
func (r *restorer) partialPlan(rd *rendering) *plan {
	pl := &plan{top: map[string]map[string][]byte{}}
	for table, chains := range rd.top {
		for c, rules := range chains {
			if !bytes.Equal(r.top[table][c], rules) {
				if pl.top[table] == nil {
					pl.top[table] = map[string][]byte{}
				}
				pl.top[table][c] = rules
			}
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
