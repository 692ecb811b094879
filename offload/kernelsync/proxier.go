package kernelsync

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/kernel/conntrack"
	"github.com/svcproxy/svcproxy/service"
)

// Port is one service port as a mode rendered it (iptables' *portRules,
// nftables' *portObjects): immutable once rendered.
type Port interface {
	comparable
	// Name is the service port it was rendered from.
	Name() service.PortName
	// Flows is what conntrack cleanup needs to know of it.
	Flows() *Flows
}

// Change is a port rendered anew: Old is its previous rendering, or nil for a
// port new to this process.
type Change[P Port] struct{ Old, Cur P }

// Rendering is a Snapshot rendered against the ports the last sync applied.
type Rendering[P Port] interface {
	// Ports are every port rendered, in the Snapshot's order.
	Ports() []P
	// Changed are the ports rendered anew, with what each replaces; a port
	// reused as it was is not among them.
	Changed() []Change[P]
	// Removed are the applied ports the Snapshot no longer has (or that
	// render to nothing now, e.g. a Service that became headless).
	Removed() []P
}

// Mode is what a mode does its own way. Proxier calls it one sync at a time.
type Mode[P Port, R Rendering[P]] interface {
	// Render renders snap. applied is, per port, what the last successful
	// sync left in the kernel (nil before the first): a port equal to the one
	// its rendering was made from reuses that rendering. full says the
	// rendering is going to be written whole.
	Render(snap *service.Snapshot, applied map[service.PortName]P, full bool) R
	// Apply writes r to the kernel in one transaction: when full, everything,
	// deleting the port objects the kernel holds that r has not; otherwise
	// only what differs from applied. It returns the size of what it wrote in
	// the mode's unit (restore bytes, nft operations; 0: nothing to write).
	Apply(ctx context.Context, r R, applied map[service.PortName]P, full bool) (size int, err error)
	// Commit is told that r is in the kernel now (applied already has r's
	// ports), so the mode keeps what its next partial sync compares with.
	Commit(r R, applied map[service.PortName]P)
	// Check tells, cheaply, whether the kernel still holds the frame the last
	// full sync wrote (iptables: the jumps from the built-in chains; nftables:
	// the table and its base chains' rules): nil if it does, an error saying
	// what is missing otherwise. A partial sync writes only what changed, so
	// without it a table that another program flushed or deleted would stay
	// broken until the next full sync.
	Check(ctx context.Context) error
}

// Config configures a Proxier. Zero values take kube-proxy's defaults.
type Config struct {
	// Conntrack deletes stale UDP flows; nil: no conntrack cleanup.
	Conntrack conntrack.Interface
	// SyncPeriod is how often Sync checks that the kernel still holds what
	// it wrote (Mode.Check; kube-proxy --iptables-sync-period, the period of
	// its canary check; default 30s): at most once per SyncPeriod, a Sync
	// that would be partial checks first and is full if the check fails.
	// Dataplane resyncs every SyncPeriod, so the check runs that often.
	SyncPeriod time.Duration
	// FullSyncPeriod is how long after the end of the last full sync a Sync
	// is full again although nothing failed (kube-proxy's
	// proxyutil.FullSyncPeriod; default 1h). Counted from the end, a full
	// sync that takes longer than FullSyncPeriod does not make every later
	// sync full.
	FullSyncPeriod time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Health is a Proxier's sync record, for /status and /metrics.
type Health struct {
	// Synced: at least one sync has succeeded (serve /healthz from then on).
	Synced bool `json:"synced"`
	// Healthy: the last sync succeeded.
	Healthy          bool          `json:"healthy"`
	LastError        string        `json:"lastError,omitempty"`
	LastSync         time.Time     `json:"lastSync"` // last successful sync
	LastSyncDuration time.Duration `json:"lastSyncDuration"`
	FullSyncs        uint64        `json:"fullSyncs"`
	PartialSyncs     uint64        `json:"partialSyncs"`
	Failures         uint64        `json:"failures"`
	// PartialFailures are the Failures of partial syncs (each followed by a
	// full one).
	PartialFailures     uint64 `json:"partialFailures"`
	ConsecutiveFailures uint64 `json:"consecutiveFailures"`
	// Repairs are the full syncs forced by a failed Check, and LastRepair
	// what that check found: another program flushed or deleted the rules.
	Repairs          uint64 `json:"repairs"`
	LastRepair       string `json:"lastRepair,omitempty"`
	ConntrackDeleted uint64 `json:"conntrackDeleted"`
	ConntrackErrors  uint64 `json:"conntrackErrors"`
	// Size is what the last successful sync wrote, in the mode's unit (Mode's
	// Apply); each mode shows it under its own name.
	Size int `json:"-"`
}

// Proxier keeps the kernel in step with the latest Snapshot through a Mode.
// Until the first Update, Sync does nothing: a restart must not replace the
// rules of the last process with an empty set while the sources are still
// listing.
type Proxier[P Port, R Rendering[P]] struct {
	cfg  Config
	mode Mode[P, R]

	mu     sync.Mutex // guards snap and health
	snap   *service.Snapshot
	health Health

	// kube-proxy's histograms of full and partial syncs and of the conntrack
	// cleanup after them (pkg/proxy/metrics: SyncFullProxyRulesLatency,
	// SyncPartialProxyRulesLatency, ReconcileConntrackFlowsLatency).
	fullDuration, partialDuration, conntrackDuration prometheus.Histogram

	syncMu   sync.Mutex             // one sync at a time; guards the fields below
	applied  map[service.PortName]P // what the last successful sync left; nil before the first
	needFull bool                   // a sync failed: the kernel may not be what applied says
	lastFull time.Time              // when the last full sync ended
	checked  time.Time              // when the kernel was last checked (Mode.Check), or fully synced
	// A conntrack cleanup that failed is tried again at the next sync: the
	// deletions that failed (a deleted Service's entries are in no later
	// walk), and the walk if it failed.
	ctRetry []conntrack.Filter
	ctWalk  bool
}

// New returns a Proxier of mode with cfg's defaults filled in.
func New[P Port, R Rendering[P]](cfg Config, mode Mode[P, R]) *Proxier[P, R] {
	if cfg.SyncPeriod <= 0 {
		cfg.SyncPeriod = 30 * time.Second
	}
	if cfg.FullSyncPeriod <= 0 {
		cfg.FullSyncPeriod = time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Proxier[P, R]{cfg: cfg, mode: mode,
		fullDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kubeproxy_sync_full_proxy_rules_duration_seconds",
			Help:    "SyncProxyRules latency in seconds for full resyncs",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		partialDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kubeproxy_sync_partial_proxy_rules_duration_seconds",
			Help:    "SyncProxyRules latency in seconds for partial resyncs",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		conntrackDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kubeproxy_conntrack_reconciler_sync_duration_seconds",
			Help:    "ReconcileConntrackFlowsLatency latency in seconds: the stale UDP conntrack cleanup after a sync",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
	}
}

// SyncPeriod is the period of the kernel check, defaults filled in.
func (p *Proxier[P, R]) SyncPeriod() time.Duration { return p.cfg.SyncPeriod }

// Update makes snap the state the next Sync applies.
func (p *Proxier[P, R]) Update(snap *service.Snapshot) {
	p.mu.Lock()
	p.snap = snap
	p.mu.Unlock()
}

// Health returns the sync record.
func (p *Proxier[P, R]) Health() Health {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.health
}

// BetweenSyncs calls f with what the last successful sync applied, per port
// (nil before the first), while no sync runs: a mode reads its kernel
// counters there, knowing no sync rewrites them meanwhile.
func (p *Proxier[P, R]) BetweenSyncs(f func(applied map[service.PortName]P)) {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	f(p.applied)
}

// Sync applies the latest Snapshot now: a full sync at first, after a failure,
// FullSyncPeriod after the end of the last full one, and when the check of
// the kernel (Mode.Check, at most once per SyncPeriod) fails; a partial sync
// otherwise. Before the first Update it does nothing.
func (p *Proxier[P, R]) Sync(ctx context.Context) error {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	p.mu.Lock()
	snap := p.snap
	p.mu.Unlock()
	if snap == nil {
		return nil
	}
	start := p.cfg.Now()
	full := p.applied == nil || p.needFull || start.Sub(p.lastFull) >= p.cfg.FullSyncPeriod
	if !full && start.Sub(p.checked) >= p.cfg.SyncPeriod {
		full = p.check(ctx, start)
	}
	r := p.mode.Render(snap, p.applied, full)
	size, err := p.mode.Apply(ctx, r, p.applied, full)
	if err != nil {
		// The kernel may hold part of it (iptables: one table committed, the
		// other not), or a partial sync may have been computed against a
		// kernel another process changed: only a full sync can be trusted
		// next, as kube-proxy does.
		p.needFull = true
		p.mu.Lock()
		defer p.mu.Unlock()
		h := &p.health
		h.Healthy, h.LastError = false, err.Error()
		h.Failures++
		if !full {
			h.PartialFailures++
		}
		h.ConsecutiveFailures++
		return err
	}
	p.commit(ctx, r, full, start, size)
	return nil
}

// check asks the mode whether the kernel still holds what it wrote, and
// reports whether it does not: the sync must be full, a repair.
func (p *Proxier[P, R]) check(ctx context.Context, now time.Time) bool {
	p.checked = now
	err := p.mode.Check(ctx)
	if err == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.health.Repairs++
	p.health.LastRepair = err.Error()
	return true
}

// commit records a successful sync: what the kernel holds now, the conntrack
// cleanup it calls for, and the health.
func (p *Proxier[P, R]) commit(ctx context.Context, r R, full bool, start time.Time, size int) {
	first := p.applied == nil
	if first {
		p.applied = make(map[service.PortName]P, len(r.Ports()))
		for _, port := range r.Ports() {
			p.applied[port.Name()] = port
		}
	} else { // update in place: 10,000 ports, one changed
		for _, c := range r.Changed() {
			p.applied[c.Cur.Name()] = c.Cur
		}
		for _, port := range r.Removed() {
			delete(p.applied, port.Name())
		}
	}
	p.mode.Commit(r, p.applied)
	if full {
		// Counted from the end: see FullSyncPeriod. A full sync wrote the
		// whole frame, so it counts as a check too.
		p.lastFull, p.needFull = p.cfg.Now(), false
		p.checked = p.lastFull
	}
	// kube-proxy times a sync up to its conntrack cleanup, and the cleanup
	// on its own.
	synced := p.cfg.Now()
	took := synced.Sub(start)
	if full {
		p.fullDuration.Observe(took.Seconds())
	} else {
		p.partialDuration.Observe(took.Seconds())
	}
	deleted, ctErr := p.cleanFlows(ctx, first, full, r)
	if p.cfg.Conntrack != nil {
		p.conntrackDuration.Observe(p.cfg.Now().Sub(synced).Seconds())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	h := &p.health
	h.Synced, h.Healthy, h.LastError, h.ConsecutiveFailures = true, true, "", 0
	h.LastSync, h.LastSyncDuration, h.Size = p.cfg.Now(), p.cfg.Now().Sub(start), size
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

// cleanFlows deletes the conntrack entries the sync r left stale: those of
// its changes and removals (StaleFlows), and after a full sync, which has no
// complete change list (the first of a process knows nothing of what came
// before it), every UDP entry of a served port that did not go to one of its
// endpoints (StaleEntries). What fails is tried again at the next sync, full
// or not: kube-proxy reconciles after every sync that changed a UDP
// Service's endpoints, so a failure there is mended by the next one; here a
// lost deletion would wait for the next full sync, an hour, while a one-way
// sender keeps its entry to a deleted pod alive. A deletion retried after its
// endpoint came back ends that endpoint's flows early: their clients' next
// datagrams pick an endpoint again.
func (p *Proxier[P, R]) cleanFlows(ctx context.Context, first, full bool, r R) (int, error) {
	if p.cfg.Conntrack == nil {
		return 0, nil
	}
	var errs []error
	n := 0
	filters := p.ctRetry
	if !first {
		filters = append(filters, StaleFlows(r.Changed(), r.Removed())...)
	}
	p.ctRetry = nil
	for _, f := range compact(filters) {
		d, err := p.cfg.Conntrack.Delete(ctx, f)
		n += d
		if err != nil {
			errs = append(errs, err)
			p.ctRetry = append(p.ctRetry, f)
		}
	}
	if full || p.ctWalk {
		p.ctWalk = false
		for _, s := range StaleEntries(p.applied) {
			d, err := p.cfg.Conntrack.DeleteStale(ctx, s)
			n += d
			if err != nil {
				errs = append(errs, err)
				p.ctWalk = true
			}
		}
	}
	return n, errors.Join(errs...)
}
