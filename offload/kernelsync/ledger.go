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

// Port is one service port as a path rendered it (iptables' *portRules,
// nftables' *portObjects): immutable once rendered.
type Port interface {
	comparable
	// Name is the service port it was rendered from.
	Name() service.PortName
	// RenderedFrom is the service port it was rendered from, and this node's
	// zone then (topology hints depend on it): RenderPorts reuses the
	// rendering for a port that renders the same in the same zone.
	RenderedFrom() (p *service.Port, zone string)
	// Flows is what conntrack cleanup needs to know of it.
	Flows() *Flows
}

// Change is a port rendered anew: Old is its previous rendering, or nil for a
// port new to this process.
type Change[P Port] struct{ Old, Cur P }

// Config configures a Ledger. Zero durations take kube-proxy's defaults.
type Config struct {
	// Mode is the path's name (dataplane.ModeIPTables): its metrics are
	// svcproxy_<mode>_syncs_total{kind="full"|"partial"} and
	// svcproxy_<mode>_repairs_total.
	Mode string
	// Metrics names the path's own metrics.
	Metrics Metrics
	// Periods are the path's: conntrack cleanup (nil: none), SyncPeriod (at
	// most once per SyncPeriod, a sync that would be partial checks the
	// kernel first and is full if the check fails; the path's Syncer
	// resyncs every SyncPeriod, so the check runs that often),
	// FullSyncPeriod (counted from the end of the last full sync: one that
	// takes longer than FullSyncPeriod does not make every later sync full),
	// the clock. LagBound is the Syncer's.
	Periods
	// LargeCluster, when it is set and says true, skips the periodic full
	// sync: a failure and a failed check still make the next sync full.
	// kube-proxy's iptables proxier does the same in a cluster of more than
	// 1,000 endpoints (largeClusterMode): there a full sync takes seconds,
	// and every change that arrives meanwhile waits as long.
	LargeCluster func() bool
}

// Health is a Ledger's sync record, for /status and /metrics.
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
	// Repairs are the full syncs forced by a failed check, and LastRepair
	// what that check found: another program flushed or deleted the rules.
	Repairs          uint64 `json:"repairs"`
	LastRepair       string `json:"lastRepair,omitempty"`
	ConntrackDeleted uint64 `json:"conntrackDeleted"`
	ConntrackErrors  uint64 `json:"conntrackErrors"`
	// Size is what the last successful sync wrote, in the path's unit
	// (restore bytes, nft operations); each path shows it under its own name.
	Size int `json:"-"`
}

// Ledger is what a rule-writing path's syncs left in the kernel, and how its
// next sync goes. The path's sync calls it, and it calls nothing of the path:
//
//	s := ledger.Begin()                    // full or partial, and what was applied
//	if s.Check { ledger.Checked(s, check()) } // the kernel's frame, once per SyncPeriod
//	... render against s.Applied, write in one transaction ...
//	return ledger.End(ctx, s, ports, size, err) // record it, clean conntrack
//
// A sync with Sync.ChangesFirst is followed at once by a full one: the
// path's Dataplane asks FullNext after each sync (Dataplane.apply).
//
// Until the first sync nothing is applied: a path's Syncer syncs nothing
// before the first Snapshot, so a restart does not replace the rules of the
// last process with an empty set while the sources are still listing.
// A sync holds the Ledger from Begin to End, which every Begin is followed
// by, also when the sync failed: Connections waits for it. Health and the
// metrics may be read at any time.
type Ledger[P Port] struct {
	cfg     Config
	metrics metricDescs

	mu     sync.Mutex // guards health
	health Health

	// kube-proxy's histograms of full and partial syncs and of the conntrack
	// cleanup after them (pkg/proxy/metrics: SyncFullProxyRulesLatency,
	// SyncPartialProxyRulesLatency, ReconcileConntrackFlowsLatency).
	fullDuration, partialDuration, conntrackDuration prometheus.Histogram

	syncMu   sync.Mutex             // held from Begin to End; guards the fields below
	applied  map[service.PortName]P // what the last successful sync left; nil before the first
	needFull bool                   // a sync failed: the kernel may not be what applied says
	fullNext bool                   // the last sync wrote a periodic full sync's changes: the full one follows
	lastFull time.Time              // when the last full sync ended
	checked  time.Time              // when the kernel was last checked, or fully synced
	// A conntrack cleanup that failed is tried again at the next sync: the
	// deletions that failed (a deleted Service's entries are in no later
	// walk), and the walk if it failed.
	ctRetry []conntrack.Filter
	ctWalk  bool
}

// Sync is one sync under way, from Begin to End.
type Sync[P Port] struct {
	// Full: the path writes everything and deletes the port objects the
	// kernel holds that belong to nothing; otherwise only what differs from
	// Applied. It is full at the first sync, after a failure, when a check
	// fails (Checked), and right after the changes of a periodic one
	// (ChangesFirst).
	Full bool
	// ChangesFirst: FullSyncPeriod has passed since the end of the last full
	// sync (but in a large cluster: Config.LargeCluster), and nothing else
	// asks for a full one. This sync is partial, so that the changes it
	// carries reach the kernel as fast as any; the next is the full one
	// (FullNext), which the path's Dataplane runs at once.
	ChangesFirst bool
	// Check: the sync is partial, and SyncPeriod has passed since the
	// kernel was last checked: the path checks that the kernel still holds
	// the frame its last full sync wrote, and says what it found (Checked).
	// Not before a periodic full sync's changes: the full sync follows.
	Check bool
	// Applied is, per port, what the last successful sync left in the kernel
	// (nil before the first): what a partial sync is computed against.
	Applied map[service.PortName]P
	start   time.Time
}

// NewLedger returns the Ledger of a path that has synced nothing yet.
func NewLedger[P Port](cfg Config) *Ledger[P] {
	if cfg.SyncPeriod <= 0 {
		cfg.SyncPeriod = 30 * time.Second
	}
	if cfg.FullSyncPeriod <= 0 {
		cfg.FullSyncPeriod = time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	histogram := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)})
	}
	return &Ledger[P]{cfg: cfg, metrics: newMetricDescs(cfg.Mode, cfg.Metrics),
		fullDuration:    histogram("kubeproxy_sync_full_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for full resyncs"),
		partialDuration: histogram("kubeproxy_sync_partial_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for partial resyncs"),
		conntrackDuration: histogram("kubeproxy_conntrack_reconciler_sync_duration_seconds",
			"ReconcileConntrackFlowsLatency latency in seconds: the stale UDP conntrack cleanup after a sync"),
	}
}

// SkipPeriodicFullSyncs sets Config.LargeCluster, before the first sync: a
// path that made its Ledger with NewDataplane says so after.
func (l *Ledger[P]) SkipPeriodicFullSyncs(large func() bool) { l.cfg.LargeCluster = large }

// Begin starts a sync: it says whether it is full, whether the kernel is due
// a check first, and what the last one applied. End ends it.
func (l *Ledger[P]) Begin() *Sync[P] {
	l.syncMu.Lock()
	s := &Sync[P]{start: l.cfg.Now(), Applied: l.applied}
	periodic := s.start.Sub(l.lastFull) >= l.cfg.FullSyncPeriod && (l.cfg.LargeCluster == nil || !l.cfg.LargeCluster())
	s.Full = l.applied == nil || l.needFull || l.fullNext
	s.ChangesFirst = !s.Full && periodic
	s.Check = !s.Full && !s.ChangesFirst && s.start.Sub(l.checked) >= l.cfg.SyncPeriod
	return s
}

// FullNext says whether the next sync is a periodic full sync whose changes
// the last one wrote (Sync.ChangesFirst): the path's Dataplane runs it at
// once, in the same Apply.
func (l *Ledger[P]) FullNext() bool {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	return l.fullNext
}

// Checked records what the path's check of the kernel found: nil if the
// kernel still holds the frame of its rules; otherwise what is missing, and
// the sync becomes full, a repair (Health.Repairs): another program flushed
// or deleted the rules, and a partial sync writes only what changed.
func (l *Ledger[P]) Checked(s *Sync[P], err error) {
	l.checked = s.start
	if err == nil {
		return
	}
	s.Full = true
	l.mu.Lock()
	defer l.mu.Unlock()
	l.health.Repairs++
	l.health.LastRepair = err.Error()
}

// Health returns the sync record.
func (l *Ledger[P]) Health() Health {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.health
}

// End records the sync s: the path rendered ports (against s.Applied) and
// wrote size units of them to the kernel, with err. A failure makes the next
// sync full: the kernel may hold part of it (iptables: one table committed,
// the other not), or a partial sync may have been computed against a kernel
// another process changed, so only a full sync can be trusted next, as
// kube-proxy does. After a success it keeps what the kernel holds now and
// deletes the conntrack entries the sync left stale. It returns err.
func (l *Ledger[P]) End(ctx context.Context, s *Sync[P], ports Ports[P], size int, err error) error {
	defer l.syncMu.Unlock()
	if s.ChangesFirst {
		l.fullNext = true // whether or not the changes made it: the full sync is due
	}
	if err != nil {
		l.needFull = true
		l.mu.Lock()
		defer l.mu.Unlock()
		h := &l.health
		h.Healthy, h.LastError = false, err.Error()
		h.Failures++
		if !s.Full {
			h.PartialFailures++
		}
		h.ConsecutiveFailures++
		return err
	}
	first := l.applied == nil
	l.apply(ports)
	if s.Full {
		// Counted from the end: see FullSyncPeriod. A full sync wrote the
		// whole frame, so it counts as a check too.
		l.lastFull, l.needFull, l.fullNext = l.cfg.Now(), false, false
		l.checked = l.lastFull
	}
	// kube-proxy times a sync up to its conntrack cleanup, and the cleanup
	// on its own.
	synced := l.cfg.Now()
	took := synced.Sub(s.start)
	if s.Full {
		l.fullDuration.Observe(took.Seconds())
	} else {
		l.partialDuration.Observe(took.Seconds())
	}
	deleted, ctErr := l.cleanFlows(ctx, first, s.Full, ports)
	if l.cfg.Conntrack != nil {
		l.conntrackDuration.Observe(l.cfg.Now().Sub(synced).Seconds())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	h := &l.health
	h.Synced, h.Healthy, h.LastError, h.ConsecutiveFailures = true, true, "", 0
	h.LastSync, h.LastSyncDuration, h.Size = l.cfg.Now(), l.cfg.Now().Sub(s.start), size
	if s.Full {
		h.FullSyncs++
	} else {
		h.PartialSyncs++
	}
	h.ConntrackDeleted += uint64(deleted)
	if ctErr != nil {
		h.ConntrackErrors++
		h.LastError = ctErr.Error()
	}
	return nil
}

// apply makes ports what the kernel holds: every port after the first sync,
// otherwise an update in place (10,000 ports, one changed).
func (l *Ledger[P]) apply(ports Ports[P]) {
	if l.applied == nil {
		l.applied = make(map[service.PortName]P, len(ports.All))
		for _, port := range ports.All {
			l.applied[port.Name()] = port
		}
		return
	}
	for _, c := range ports.Changed {
		l.applied[c.Cur.Name()] = c.Cur
	}
	for _, port := range ports.Removed {
		delete(l.applied, port.Name())
	}
}

// cleanFlows deletes the conntrack entries the sync of ports left stale:
// those of its changes and removals (StaleFlows), and after a full sync,
// which has no complete change list (the first of a process knows nothing of
// what came before it), every UDP entry of a served port that did not go to
// one of its endpoints (StaleEntries). What fails is tried again at the next
// sync, full or not: kube-proxy reconciles after every sync that changed a
// UDP Service's endpoints, so a failure there is mended by the next one; here
// a lost deletion would wait for the next full sync, an hour, while a one-way
// sender keeps its entry to a deleted pod alive. A deletion retried after its
// endpoint came back ends that endpoint's flows early: their clients' next
// datagrams pick an endpoint again.
func (l *Ledger[P]) cleanFlows(ctx context.Context, first, full bool, ports Ports[P]) (int, error) {
	if l.cfg.Conntrack == nil {
		return 0, nil
	}
	var errs []error
	n := 0
	filters := l.ctRetry
	if !first {
		filters = append(filters, StaleFlows(ports.Changed, ports.Removed)...)
	}
	l.ctRetry = nil
	for _, f := range compact(filters) {
		d, err := l.cfg.Conntrack.Delete(ctx, f)
		n += d
		if err != nil {
			errs = append(errs, err)
			l.ctRetry = append(l.ctRetry, f)
		}
	}
	if full || l.ctWalk {
		l.ctWalk = false
		for _, s := range StaleEntries(l.applied) {
			d, err := l.cfg.Conntrack.DeleteStale(ctx, s)
			n += d
			if err != nil {
				errs = append(errs, err)
				l.ctWalk = true
			}
		}
	}
	return n, errors.Join(errs...)
}
