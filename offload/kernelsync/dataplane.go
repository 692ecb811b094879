package kernelsync

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/kernel/conntrack"
	"github.com/svcproxy/svcproxy/service"
)

// Periods are how a rule path's syncs go, the same fields in iptables' and
// nftables' Configs (each embeds them). Zero durations take kube-proxy's
// defaults.
type Periods struct {
	// Conntrack deletes stale UDP flows; nil: no conntrack cleanup.
	Conntrack conntrack.Interface
	// SyncPeriod is how long after a sync the next one comes without a
	// change, and how often a sync checks that the kernel still holds the
	// frame of the path's rules, making itself full if not (kube-proxy
	// --iptables-sync-period, --nftables-sync-period; default 30s; see
	// Config).
	SyncPeriod time.Duration
	// FullSyncPeriod is how long after the end of the last full sync a sync
	// is full again: it writes every rule and deletes what belongs to nothing
	// (kube-proxy's proxyutil.FullSyncPeriod; default 1h).
	FullSyncPeriod time.Duration
	// LagBound is the Syncer's (0: twice SyncPeriod).
	LagBound time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Dataplane is what a rule path's Dataplane shares with the other's: the
// lifecycle every kernel mode has (dataplane.Syncer, which applies each
// Snapshot with the path's own sync) and the Ledger that sync calls, with the
// metrics of both. The path embeds it, and adds its Status and, for hybrid
// mode, its Connections.
type Dataplane[P Port] struct {
	*dataplane.Syncer
	Ledger *Ledger[P]
}

// NewDataplane returns the Syncer and the Ledger of a path: mode names it
// (dataplane.ModeIPTables), m its own metrics, p its periods; nodeName is
// this node (the Syncer's record counts the endpoints on it), and sync is
// the path's sync, which the Syncer's Apply calls (apply).
func NewDataplane[P Port](mode string, m Metrics, p Periods, nodeName string,
	sync func(ctx context.Context, snap *service.Snapshot) error) Dataplane[P] {
	d := Dataplane[P]{Ledger: NewLedger[P](Config{Mode: mode, Metrics: m, Periods: p})}
	// Apply calls d.apply on this d, whose Syncer is set by then.
	d.Syncer = dataplane.NewSyncer(dataplane.SyncerConfig{Mode: mode, Period: p.SyncPeriod,
		LagBound: p.LagBound, NodeName: nodeName, Now: p.Now,
		Apply: func(ctx context.Context, snap *service.Snapshot) error { return d.apply(ctx, snap, sync) }})
	return d
}

// apply is the Syncer's Apply: the path's sync of snap, and when that sync
// was a periodic full sync's changes (Sync.ChangesFirst), the full sync
// right after it. The periodic full sync is the first sync after
// FullSyncPeriod, so it also carries the changes that came since the last
// sync; written with the whole table, they would reach the kernel only when
// all of it had (1.4–1.9 s at 10,000 Services of 3 endpoints in nftables
// mode, docs/benchmarks/kubeproxy.md). Written first, as a partial sync writes
// them, they are served while the full sync runs, and their programming
// latency ends there (Syncer.Programmed). The full sync follows also when
// the partial one failed. kube-proxy's syncProxyRules (pkg/proxy/nftables
// and pkg/proxy/iptables, proxier.go) writes the changes and the full sync
// in one transaction.
func (d *Dataplane[P]) apply(ctx context.Context, snap *service.Snapshot, sync func(ctx context.Context, snap *service.Snapshot) error) error {
	err := sync(ctx, snap)
	if !d.Ledger.FullNext() {
		return err
	}
	if err == nil {
		d.Syncer.Programmed()
	}
	return sync(ctx, snap)
}

// Describe implements prometheus.Collector: the Syncer's record (kube-proxy's
// sync metrics) and the Ledger's (the path's own).
func (d Dataplane[P]) Describe(ch chan<- *prometheus.Desc) {
	d.Syncer.Describe(ch)
	d.Ledger.Describe(ch)
}

// FullSyncs implements dataplane.FullSyncer: the Ledger's count.
func (d Dataplane[P]) FullSyncs() uint64 { return d.Ledger.Health().FullSyncs }

// Collect implements prometheus.Collector.
func (d Dataplane[P]) Collect(ch chan<- prometheus.Metric) {
	d.Syncer.Collect(ch)
	d.Ledger.Collect(ch)
}
