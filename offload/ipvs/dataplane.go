package ipvs

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/dataplane"
	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	"github.com/svcproxy/svcproxy/service"
)

// Status implements dataplane.Interface: the IPVS table as `ipvsadm -ln`
// prints it, the real servers draining, and the conntrack cleanup's counts.
func (d *Dataplane) Status() any {
	table, err := kipvs.List(context.Background(), d.cfg.IPVS)
	if err != nil {
		table = "error: " + err.Error()
	}
	return map[string]any{"mode": dataplane.ModeIPVS, "ipvs": table, "draining": d.Draining(), "conntrack": d.Conntrack()}
}

// Connections implements dataplane.KernelPath (see connections).
func (d *Dataplane) Connections(ctx context.Context, snap *service.Snapshot, ports dataplane.PortSet) (map[service.PortName]uint64, error) {
	all, err := d.connections(ctx, snap)
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
	d.conntrackDuration.Describe(ch)
}

// Collect implements prometheus.Collector.
func (d *Dataplane) Collect(ch chan<- prometheus.Metric) {
	d.Syncer.Collect(ch)
	ch <- prometheus.MustNewConstMetric(descDraining, prometheus.GaugeValue, float64(d.Draining()))
	ct := d.Conntrack()
	ch <- prometheus.MustNewConstMetric(descConntrackDeleted, prometheus.CounterValue, float64(ct.Deleted))
	ch <- prometheus.MustNewConstMetric(descConntrackErrors, prometheus.CounterValue, float64(ct.Errors))
	ch <- prometheus.MustNewConstMetric(descConntrackReconciled, prometheus.CounterValue, float64(ct.Deleted))
	ch <- prometheus.MustNewConstMetric(descRestoreFailures, prometheus.CounterValue, float64(d.restoreFailures.Load()))
	d.conntrackDuration.Collect(ch)
}
