package kernelsync

import "github.com/prometheus/client_golang/prometheus"

// Metrics names a path's own metrics of its syncs.
type Metrics struct {
	// SyncsHelp is the help text of svcproxy_<mode>_syncs_total.
	SyncsHelp string
	// SizeMetric and SizeHelp name the gauge of Health.Size.
	SizeMetric, SizeHelp string
	// FailuresMetric and FailuresHelp name the counter of Health.Failures,
	// kube-proxy's for the mode (iptables:
	// kubeproxy_sync_proxy_rules_iptables_restore_failures_total).
	FailuresMetric, FailuresHelp string
	// PartialFailuresMetric and PartialFailuresHelp, if set, name the counter
	// of Health.PartialFailures (iptables:
	// kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total;
	// kube-proxy has none in nftables mode).
	PartialFailuresMetric, PartialFailuresHelp string
}

type metricDescs struct {
	syncs, size, repairs      *prometheus.Desc
	failures, partialFailures *prometheus.Desc // partialFailures: nil if the mode has none
}

func newMetricDescs(mode string, m Metrics) metricDescs {
	d := metricDescs{
		syncs: prometheus.NewDesc("svcproxy_"+mode+"_syncs_total", m.SyncsHelp, []string{"kind"}, nil),
		size:  prometheus.NewDesc(m.SizeMetric, m.SizeHelp, nil, nil),
		repairs: prometheus.NewDesc("svcproxy_"+mode+"_repairs_total",
			"Full syncs forced because the periodic check found the kernel's rules not as svcproxy wrote them "+
				"(flushed or deleted by another program).", nil, nil),
		failures: prometheus.NewDesc(m.FailuresMetric, m.FailuresHelp, nil, nil),
	}
	if m.PartialFailuresMetric != "" {
		d.partialFailures = prometheus.NewDesc(m.PartialFailuresMetric, m.PartialFailuresHelp, nil, nil)
	}
	return d
}

var (
	descConntrackDeleted = prometheus.NewDesc("svcproxy_conntrack_deleted_total",
		"Stale UDP conntrack entries deleted.", nil, nil)
	descConntrackErrors = prometheus.NewDesc("svcproxy_conntrack_errors_total",
		"Conntrack cleanups that failed.", nil, nil)
	// descConntrackReconciled is kube-proxy's name for the same count as
	// svcproxy_conntrack_deleted_total (pkg/proxy/metrics:
	// ReconcileConntrackFlowsDeletedEntriesTotal).
	descConntrackReconciled = prometheus.NewDesc("kubeproxy_conntrack_reconciler_deleted_entries_total",
		"Cumulative conntrack flows deleted by conntrack reconciler", nil, nil)
)

// Describe implements prometheus.Collector: the path's sync metrics from the
// Health, and kube-proxy's histograms of its syncs. The path's Syncer adds
// kube-proxy's sync record (dataplane.Record).
func (l *Ledger[P]) Describe(ch chan<- *prometheus.Desc) {
	m := l.metrics
	for _, desc := range []*prometheus.Desc{m.syncs, m.size, m.repairs, descConntrackDeleted, descConntrackErrors,
		descConntrackReconciled, m.failures} {
		ch <- desc
	}
	if m.partialFailures != nil {
		ch <- m.partialFailures
	}
	for _, h := range []prometheus.Histogram{l.fullDuration, l.partialDuration, l.conntrackDuration} {
		h.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (l *Ledger[P]) Collect(ch chan<- prometheus.Metric) {
	m, h := l.metrics, l.Health()
	ch <- prometheus.MustNewConstMetric(m.syncs, prometheus.CounterValue, float64(h.FullSyncs), "full")
	ch <- prometheus.MustNewConstMetric(m.syncs, prometheus.CounterValue, float64(h.PartialSyncs), "partial")
	ch <- prometheus.MustNewConstMetric(m.size, prometheus.GaugeValue, float64(h.Size))
	ch <- prometheus.MustNewConstMetric(m.repairs, prometheus.CounterValue, float64(h.Repairs))
	ch <- prometheus.MustNewConstMetric(descConntrackDeleted, prometheus.CounterValue, float64(h.ConntrackDeleted))
	ch <- prometheus.MustNewConstMetric(descConntrackErrors, prometheus.CounterValue, float64(h.ConntrackErrors))
	ch <- prometheus.MustNewConstMetric(descConntrackReconciled, prometheus.CounterValue, float64(h.ConntrackDeleted))
	ch <- prometheus.MustNewConstMetric(m.failures, prometheus.CounterValue, float64(h.Failures))
	if m.partialFailures != nil {
		ch <- prometheus.MustNewConstMetric(m.partialFailures, prometheus.CounterValue, float64(h.PartialFailures))
	}
	for _, hist := range []prometheus.Histogram{l.fullDuration, l.partialDuration, l.conntrackDuration} {
		hist.Collect(ch)
	}
}
