package ipvs

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/dataplane"
	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	"github.com/svcproxy/svcproxy/service"
)

// Dataplane is --mode ipvs, and hybrid mode's IPVS path: a Proxier driven by
// the lifecycle every kernel mode shares (dataplane.Syncer, which gives it
// Mode, Sync, Run and Healthy), which also resyncs every second while real
// servers drain (a drain ends only at a sync). IPVS has no rules to render and
// diff, so it needs none of offload/kernelsync's full and partial syncs. When
// its context ends the virtual servers stay: traffic keeps flowing while
// svcproxy restarts, and the next process adopts them.
type Dataplane struct {
	p *Proxier
	*dataplane.Syncer
}

var _ dataplane.KernelPath = (*Dataplane)(nil)

// DataplaneConfig configures a Dataplane.
type DataplaneConfig struct {
	// SyncPeriod is how long after a sync the next one comes without a change
	// (default 30s); LagBound is the Syncer's (0: twice SyncPeriod).
	SyncPeriod time.Duration
	LagBound   time.Duration
}

// NewDataplane returns the IPVS mode of cfg; cfg.Select restricts it to some
// ports (hybrid's promoted ones).
func NewDataplane(cfg Config, dc DataplaneConfig) (*Dataplane, error) {
	p, err := New(cfg)
	if err != nil {
		return nil, err
	}
	d := &Dataplane{p: p}
	d.Syncer = dataplane.NewSyncer(dataplane.SyncerConfig{
		Mode:     dataplane.ModeIPVS,
		Apply:    p.Sync,
		Period:   dc.SyncPeriod,
		Pending:  func() bool { return p.Draining() > 0 },
		LagBound: dc.LagBound,
		NodeName: cfg.NodeName,
	})
	return d, nil
}

// Status implements dataplane.Interface: the IPVS table as `ipvsadm -ln`
// prints it, the real servers draining, and the conntrack cleanup's counts.
func (d *Dataplane) Status() any {
	table, err := kipvs.List(context.Background(), d.p.cfg.IPVS)
	if err != nil {
		table = "error: " + err.Error()
	}
	return map[string]any{"mode": dataplane.ModeIPVS, "ipvs": table, "draining": d.p.Draining(), "conntrack": d.p.Conntrack()}
}

// Connections implements dataplane.KernelPath (see Proxier.Connections).
func (d *Dataplane) Connections(ctx context.Context, snap *service.Snapshot, ports dataplane.PortSet) (map[service.PortName]uint64, error) {
	all, err := d.p.Connections(ctx, snap)
	if err != nil {
		return nil, err
	}
	out := make(map[service.PortName]uint64, len(ports))
	for name := range ports {
		if _, ok := snap.Port(name); ok {
			out[name] = all[name]
		}
	}
	return out, nil
}

var (
	descDraining = prometheus.NewDesc("svcproxy_ipvs_draining_real_servers",
		"Real servers at weight 0 waiting for their connections to end.", nil, nil)
	// The iptables and nftables modes' (offload/kernelsync), by name and help.
	descConntrackDeleted = prometheus.NewDesc("svcproxy_conntrack_deleted_total",
		"Stale UDP conntrack entries deleted.", nil, nil)
	descConntrackErrors = prometheus.NewDesc("svcproxy_conntrack_errors_total",
		"Conntrack cleanups that failed.", nil, nil)
	// descConntrackReconciled is kube-proxy's name for descConntrackDeleted's
	// count (pkg/proxy/metrics: ReconcileConntrackFlowsDeletedEntriesTotal).
	descRestoreFailures = prometheus.NewDesc("kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
		"Cumulative proxy iptables restore failures (the masquerade rules')", nil, nil)
	descConntrackReconciled = prometheus.NewDesc("kubeproxy_conntrack_reconciler_deleted_entries_total",
		"Cumulative conntrack flows deleted by conntrack reconciler", nil, nil)
)

// Describe implements prometheus.Collector.
func (d *Dataplane) Describe(ch chan<- *prometheus.Desc) {
	d.Syncer.Describe(ch)
	ch <- descDraining
	ch <- descConntrackDeleted
	ch <- descConntrackErrors
	ch <- descConntrackReconciled
	ch <- descRestoreFailures
	d.p.conntrackDuration.Describe(ch)
}

// Collect implements prometheus.Collector.
func (d *Dataplane) Collect(ch chan<- prometheus.Metric) {
	d.Syncer.Collect(ch)
	ch <- prometheus.MustNewConstMetric(descDraining, prometheus.GaugeValue, float64(d.p.Draining()))
	ct := d.p.Conntrack()
	ch <- prometheus.MustNewConstMetric(descConntrackDeleted, prometheus.CounterValue, float64(ct.Deleted))
	ch <- prometheus.MustNewConstMetric(descConntrackErrors, prometheus.CounterValue, float64(ct.Errors))
	ch <- prometheus.MustNewConstMetric(descConntrackReconciled, prometheus.CounterValue, float64(ct.Deleted))
	ch <- prometheus.MustNewConstMetric(descRestoreFailures, prometheus.CounterValue, float64(d.p.restoreFailures.Load()))
	d.p.conntrackDuration.Collect(ch)
}
