package kernelsync

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/service"
)

// DataplaneConfig names a mode and its own metrics.
type DataplaneConfig struct {
	// Mode is the mode's name (dataplane.ModeIPTables): /proxyMode, errors,
	// and the metrics svcproxy_<mode>_syncs_total{kind="full"|"partial"}.
	Mode string
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
	// LagBound is the Syncer's (0: twice the Proxier's SyncPeriod).
	LagBound time.Duration
	// NodeName is the Syncer's: this node.
	NodeName string
}

// Dataplane is a Proxier driven by the lifecycle every kernel mode shares
// (dataplane.Syncer): it is a dataplane.Interface but for Status, which the mode
// adds (with Connections, for hybrid's dataplane.KernelPath).
type Dataplane struct {
	*dataplane.Syncer
	health                                func() Health
	syncs, size, repairs                  *prometheus.Desc
	failures, partialFailures             *prometheus.Desc // partialFailures: nil if the mode has none
	fullDuration, partialDuration, ctTime prometheus.Histogram
}

// NewDataplane drives p: each Snapshot the Syncer applies is p.Update, then p.Sync.
func NewDataplane[P Port, R Rendering[P]](p *Proxier[P, R], cfg DataplaneConfig) *Dataplane {
	return &Dataplane{
		Syncer: dataplane.NewSyncer(dataplane.SyncerConfig{
			Mode:     cfg.Mode,
			Apply:    func(ctx context.Context, snap *service.Snapshot) error { p.Update(snap); return p.Sync(ctx) },
			Period:   p.cfg.SyncPeriod,
			LagBound: cfg.LagBound,
			NodeName: cfg.NodeName,
			Now:      p.cfg.Now,
		}),
		health: p.Health,
		syncs:  prometheus.NewDesc("svcproxy_"+cfg.Mode+"_syncs_total", cfg.SyncsHelp, []string{"kind"}, nil),
		size:   prometheus.NewDesc(cfg.SizeMetric, cfg.SizeHelp, nil, nil),
		repairs: prometheus.NewDesc("svcproxy_"+cfg.Mode+"_repairs_total",
			"Full syncs forced because the periodic check found the kernel's rules not as svcproxy wrote them "+
				"(flushed or deleted by another program).", nil, nil),
		failures:        prometheus.NewDesc(cfg.FailuresMetric, cfg.FailuresHelp, nil, nil),
		partialFailures: optionalDesc(cfg.PartialFailuresMetric, cfg.PartialFailuresHelp),
		fullDuration:    p.fullDuration,
		partialDuration: p.partialDuration,
		ctTime:          p.conntrackDuration,
	}
}

func optionalDesc(name, help string) *prometheus.Desc {
	if name == "" {
		return nil
	}
	return prometheus.NewDesc(name, help, nil, nil)
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

// Describe implements prometheus.Collector: the Syncer's metrics and the
// Proxier's Health.
func (d *Dataplane) Describe(ch chan<- *prometheus.Desc) {
	d.Syncer.Describe(ch)
	for _, desc := range []*prometheus.Desc{d.syncs, d.size, d.repairs, descConntrackDeleted, descConntrackErrors,
		descConntrackReconciled, d.failures} {
		ch <- desc
	}
	if d.partialFailures != nil {
		ch <- d.partialFailures
	}
	for _, h := range []prometheus.Histogram{d.fullDuration, d.partialDuration, d.ctTime} {
		h.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (d *Dataplane) Collect(ch chan<- prometheus.Metric) {
	d.Syncer.Collect(ch)
	h := d.health()
	ch <- prometheus.MustNewConstMetric(d.syncs, prometheus.CounterValue, float64(h.FullSyncs), "full")
	ch <- prometheus.MustNewConstMetric(d.syncs, prometheus.CounterValue, float64(h.PartialSyncs), "partial")
	ch <- prometheus.MustNewConstMetric(d.size, prometheus.GaugeValue, float64(h.Size))
	ch <- prometheus.MustNewConstMetric(d.repairs, prometheus.CounterValue, float64(h.Repairs))
	ch <- prometheus.MustNewConstMetric(descConntrackDeleted, prometheus.CounterValue, float64(h.ConntrackDeleted))
	ch <- prometheus.MustNewConstMetric(descConntrackErrors, prometheus.CounterValue, float64(h.ConntrackErrors))
	ch <- prometheus.MustNewConstMetric(descConntrackReconciled, prometheus.CounterValue, float64(h.ConntrackDeleted))
	ch <- prometheus.MustNewConstMetric(d.failures, prometheus.CounterValue, float64(h.Failures))
	if d.partialFailures != nil {
		ch <- prometheus.MustNewConstMetric(d.partialFailures, prometheus.CounterValue, float64(h.PartialFailures))
	}
	for _, h := range []prometheus.Histogram{d.fullDuration, d.partialDuration, d.ctTime} {
		h.Collect(ch)
	}
}
